"""The supervisor stops the worker when one of its stages dies of a bug."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from acta_sqla import Acta
from acta_sqla.errors import ConfigurationError
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


def test_a_worker_given_another_namespace_than_its_apps_says_which_to_give() -> None:
    settings = load_settings(database_url="postgresql://x@127.0.0.1:1/none", namespace="billing")
    with pytest.raises(ConfigurationError) as caught:
        Worker(Acta("default"), settings)
    assert str(caught.value) == (
        "the worker was given namespace 'billing' but the app's Acta is for 'default': a "
        "worker serves its app's namespace (Acta(namespace=...)); leave --namespace out or "
        "give 'default'"
    )


class _Stage:
    """Records when the supervisor stops it (and with what bound)."""

    def __init__(self, name: str, calls: list[str]) -> None:
        self.name = name
        self.calls = calls

    async def stop(self, *bound: float, **options: object) -> int:
        self.calls.append(f"{self.name}.stop")
        return 0


class _Store:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    async def stop_worker(self) -> None:
        self.calls.append("store.stop_worker")

    async def close(self) -> None:
        self.calls.append("store.close")


def _wired(calls: list[str]) -> Worker:
    worker = Worker(Acta(), load_settings(database_url="postgresql://x@127.0.0.1:1/none"))
    for name in ("claimer", "executors", "finalizer", "heartbeat", "lifeline", "listener"):
        setattr(worker, name, _Stage(name, calls))
    worker.store = _Store(calls)  # type: ignore[assignment]
    return worker


async def test_shutdown_stops_the_stages_in_the_one_order() -> None:
    # Producers before consumers: no claim after the stop; the executors (and the hand-back
    # of claimed-but-unstarted rows) before the finalizer, so their completions are in its
    # last batch; the heartbeat and lifeline after the finalizer, so leases are renewed
    # until the last write lands; the worker row is marked stopped last.
    calls: list[str] = []
    worker = _wired(calls)
    await worker.shutdown()
    assert calls == [
        "claimer.stop",
        "executors.stop",
        "finalizer.stop",
        "heartbeat.stop",
        "lifeline.stop",
        "listener.stop",
        "store.stop_worker",
        "store.close",
    ]
    assert worker.stopped.is_set()
    await worker.shutdown()  # idempotent: a second call stops nothing twice
    assert len(calls) == 8


async def test_claimed_but_unstarted_rows_are_handed_back_before_the_finalizer_stops() -> None:
    from acta_sqla.values import JobStatus

    from .fakes import job

    calls: list[str] = []
    worker = _wired(calls)
    entry = worker.registry.add(job(1), 1e12)
    worker.claimed.put_nowait(entry)

    class Finalizer(_Stage):
        async def stop(self, *bound: float, **options: object) -> int:
            handed = worker.completed.get_nowait()
            calls.append(f"finalizer.stop after {handed.status} of job {handed.job_id}")
            return 0

    worker.finalizer = Finalizer("finalizer", calls)  # type: ignore[assignment]
    await worker.shutdown()
    assert calls[:3] == [
        "claimer.stop",
        "executors.stop",
        f"finalizer.stop after {JobStatus.READY} of job 1",
    ]


async def test_an_unstarted_row_that_finds_the_channel_full_is_left_to_its_lease() -> None:
    # The completions are not being written and the Completed channel is full: the
    # hand-back cannot queue its completion. The stop goes on (it used to raise QueueFull
    # out of the shutdown), and the row is forgotten, not waited for as if it ran.
    from .fakes import done, job

    calls: list[str] = []
    worker = _wired(calls)
    while not worker.completed.full():
        worker.completed.put_nowait(done(worker.completed.qsize() + 100))
    entry = worker.registry.add(job(1), 1e12)
    worker.claimed.put_nowait(entry)
    worker.grace = 3600.0  # a row still counted as running would hold the stop this long
    await asyncio.wait_for(worker.shutdown(), 5)
    assert worker.stopped.is_set() and "finalizer.stop" in calls
    assert worker.registry.get(entry.key) is None  # its lease runs out: recovery, uncharged
    assert worker.claimed.empty()


class _AdvancingClock:
    """Loop time that moves only by the waits the shutdown makes (each ends at once)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return self.t

    async def wait(self, event: asyncio.Event, seconds: float) -> bool:
        self.t += seconds
        await asyncio.sleep(0)
        return event.is_set()


@pytest.mark.parametrize("swallows", [True, False], ids=["ignores-its-cancel", "ends"])
async def test_the_forced_stop_wait_is_the_setting(swallows: bool) -> None:
    """After the grace, the handlers still running are cancelled and the worker waits up to
    ``forced_stop_wait`` for them (then exits past one that swallows its cancel, naming it),
    and the executors get that long to end (1 s once one is known to be stuck)."""
    from acta_sqla.worker.inflight import EntryState
    from acta_sqla.worker.shutdown import STUBBORN_WAIT_SECONDS

    from .fakes import job

    calls: list[str] = []
    bounds: list[float] = []
    clock = _AdvancingClock()
    settings = load_settings(database_url="postgresql://x@127.0.0.1:1/none", forced_stop_wait=2.5)
    worker = Worker(Acta(), settings, grace=1.0, clock=clock)  # type: ignore[arg-type]
    for name in ("claimer", "finalizer", "heartbeat", "lifeline", "listener"):
        setattr(worker, name, _Stage(name, calls))
    worker.store = _Store(calls)  # type: ignore[assignment]
    entry = worker.registry.add(job(1), 1e12)
    entry.state = EntryState.EXECUTING

    class Executors(_Stage):
        async def stop(self, *bound: float, **options: object) -> int:
            bounds.extend(bound)
            return 0

    worker.executors = Executors("executors", calls)  # type: ignore[assignment]
    cancelled_at: list[float] = []
    if not swallows:
        fire = worker.registry.fire

        def cancel_ends_it(e: Any, reason: Any, now: float) -> None:
            cancelled_at.append(now)
            fire(e, reason, now)
            e.state = EntryState.FINALIZING  # the cancel ended it: handed to the finalizer

        worker.registry.fire = cancel_ends_it  # type: ignore[method-assign]
    start = clock.t
    await worker.shutdown()
    assert worker.stopped.is_set()
    if swallows:
        # the grace (1 s), then the whole forced-stop wait (2.5 s), then past it
        assert clock.t - start == pytest.approx(1.0 + 2.5)
        assert worker.stubborn == [entry] and entry.stop_reason is not None
        assert bounds == [STUBBORN_WAIT_SECONDS]
    else:
        assert cancelled_at == [pytest.approx(start + 1.0)]  # at the grace's end
        assert clock.t - start == pytest.approx(1.0)  # nothing more waited for
        assert worker.stubborn == []
        assert bounds == [2.5]
