"""Every long-lived stage has one lifecycle (``worker/stage.py``): named task(s), started
once, an idempotent stop, never started again after it."""

from __future__ import annotations

import asyncio

from acta_sqla.worker.claimer import Claimer
from acta_sqla.worker.executor import Executors
from acta_sqla.worker.finalizer import Finalizer
from acta_sqla.worker.heartbeat import Heartbeat
from acta_sqla.worker.stage import LoopStage, Stage


class Ticker(LoopStage):
    task_name = "acta-ticker"

    def __init__(self) -> None:
        super().__init__()
        self.stops = 0
        self._stop = asyncio.Event()

    async def run(self) -> None:
        await self._stop.wait()

    async def stop(self) -> None:
        if not self._begin_stop():
            return
        self.stops += 1
        self._stop.set()
        if self._task is not None:
            await self._task


def test_the_claimer_finalizer_and_heartbeat_share_the_loop_stage() -> None:
    for stage in (Claimer, Finalizer, Heartbeat):
        assert issubclass(stage, LoopStage), stage
        assert stage.task_name == f"acta-{stage.__name__.lower()}"
    # The executors' N tasks are a Stage too (the supervisor's kill reads their tasks).
    stages: list[type[Stage]] = [Claimer, Finalizer, Heartbeat, Executors]
    assert all(isinstance(getattr(s, "tasks", None), property) for s in stages)


async def test_start_once_stop_once_and_no_start_after_the_stop() -> None:
    ended: list[asyncio.Task[object]] = []
    t = Ticker()
    assert t.tasks == ()
    t.start(on_ended=ended.append)
    first = t.task
    t.start(on_ended=ended.append)
    assert first is not None and t.task is first and first.get_name() == "acta-ticker"
    await t.stop()
    await t.stop()
    assert t.stops == 1 and t.stopped and first.done()
    await asyncio.sleep(0)
    assert ended == [first]
    t.start()
    assert t.task is first and t.tasks == (first,)


async def test_a_stop_before_the_start_leaves_nothing_to_start() -> None:
    t = Ticker()
    await t.stop()
    t.start()
    assert t.task is None
