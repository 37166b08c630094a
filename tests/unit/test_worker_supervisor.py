"""The supervisor stops the worker when one of its stages dies of a bug."""

from __future__ import annotations

import asyncio

from acta_sqla import Acta
from acta_sqla.settings import load_settings
from acta_sqla.worker import Worker


async def test_a_stage_that_dies_stops_the_worker_loudly() -> None:
    worker = Worker(Acta(), load_settings(database_url="postgresql://x@127.0.0.1:1/none"))

    async def broken() -> None:
        raise RuntimeError("bug in a stage")

    task = asyncio.create_task(broken(), name="acta-claimer")
    task.add_done_callback(worker._stage_ended)
    await asyncio.gather(task, return_exceptions=True)
    await asyncio.sleep(0)
    assert worker.crashed
    assert worker._force.is_set() and worker._stop_requested.is_set()


async def test_a_stage_ending_during_shutdown_is_not_a_crash() -> None:
    worker = Worker(Acta(), load_settings(database_url="postgresql://x@127.0.0.1:1/none"))
    worker.request_stop()

    async def done() -> None:
        return None

    task = asyncio.create_task(done())
    task.add_done_callback(worker._stage_ended)
    await task
    await asyncio.sleep(0)
    assert not worker.crashed
