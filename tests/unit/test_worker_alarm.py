"""The registry's alarm: one timer for every running attempt, driven by a fake clock."""

from __future__ import annotations

import asyncio

from acta_sqla.values import Outcome
from acta_sqla.worker.inflight import Entry, EntryState, Registry

from .fakes import FakeClock, job


def _attempt(registry: Registry, entry: Entry) -> asyncio.Task[str]:
    """A handler that sleeps until cancelled, armed as the executor arms it."""

    async def run() -> str:
        task = asyncio.current_task()
        assert task is not None
        entry.state = EntryState.EXECUTING
        registry.arm(entry, task)  # type: ignore[arg-type]
        try:
            await asyncio.Event().wait()
            return "finished"
        except asyncio.CancelledError:
            task.uncancel()
            return "cancelled"
        finally:
            registry.disarm(entry)

    return asyncio.create_task(run())


async def _started(*tasks: asyncio.Task[str]) -> None:
    for _ in range(3):  # let each task reach its wait (arming its alarm)
        await asyncio.sleep(0)
    assert not any(t.done() for t in tasks)


async def test_each_attempt_is_cancelled_at_its_own_alarm_in_order() -> None:
    clock = FakeClock()
    registry = Registry(clock)
    late = registry.add(job(1), clock.now() + 80)
    early = registry.add(job(2), clock.now() + 20)
    never = registry.add(job(3), clock.now() + 3600)
    tasks = [_attempt(registry, e) for e in (late, early, never)]
    await _started(*tasks)

    clock.advance(19.9)
    assert not early.expired and not late.expired
    clock.advance(0.2)
    assert early.expired and not late.expired
    assert await tasks[1] == "cancelled"
    clock.advance(60)
    assert late.expired and not never.expired
    assert await tasks[0] == "cancelled"
    assert not tasks[2].done()
    registry.fire(never, Outcome.CANCELLED, clock.now())
    assert await tasks[2] == "cancelled"
    assert never.expired and never.stop_reason is Outcome.CANCELLED


async def test_the_timeout_rings_when_it_comes_before_the_deadline() -> None:
    clock = FakeClock()
    registry = Registry(clock)
    entry = registry.add(job(1), clock.now() + 3600)
    entry.timeout_at = clock.now() + 20
    task = _attempt(registry, entry)
    await _started(task)
    clock.advance(20)
    assert await task == "cancelled"
    assert entry.timeout_at <= entry.deadline  # the executor reports it as a timeout


async def test_a_renewal_moves_a_running_deadline_on() -> None:
    clock = FakeClock()
    registry = Registry(clock)
    entry = registry.add(job(1), clock.now() + 10)
    task = _attempt(registry, entry)
    await _started(task)
    clock.advance(5)
    registry.rearm(entry, clock.now() + 10)  # a confirmed renewal at t+5
    clock.advance(9)  # t+14: past the first deadline, before the renewed one
    await asyncio.sleep(0)
    assert not entry.expired and not task.done()
    clock.advance(1)
    assert await task == "cancelled"


async def test_a_finished_attempt_is_never_cancelled_later() -> None:
    clock = FakeClock()
    registry = Registry(clock)
    entry = registry.add(job(1), clock.now() + 20)
    task = asyncio.current_task()
    assert task is not None
    registry.arm(entry, task)
    registry.disarm(entry)
    clock.advance(30)  # the alarm rings, for nothing
    assert registry._timer is None
    assert not entry.expired and task.cancelling() == 0


async def test_stale_alarms_do_not_pile_up() -> None:
    clock = FakeClock()
    registry = Registry(clock)
    task = asyncio.current_task()
    assert task is not None
    deadline = clock.now() + 3600
    for i in range(10_000):
        entry = registry.add(job(i), deadline)
        registry.arm(entry, task)
        registry.rearm(entry, deadline + 1)  # a renewal leaves a stale item behind
        registry.disarm(entry)
        registry.remove(entry.key)
    assert len(registry._alarms) <= 64
