"""The registry's alarm: one loop timer for every running attempt."""

from __future__ import annotations

import asyncio

from acta_sqla.values import Outcome
from acta_sqla.worker.inflight import Entry, EntryState, Registry

from .fakes import job, until


async def _attempt(registry: Registry, entry: Entry) -> str:
    """A handler that sleeps until cancelled, armed as the executor arms it."""
    task = asyncio.current_task()
    assert task is not None
    entry.state = EntryState.EXECUTING
    registry.arm(entry, task)  # type: ignore[arg-type]
    try:
        await asyncio.sleep(3600)
        return "finished"
    except asyncio.CancelledError:
        task.uncancel()
        return "cancelled"
    finally:
        registry.disarm(entry)


async def test_each_attempt_is_cancelled_at_its_own_alarm_in_order() -> None:
    registry = Registry()
    now = asyncio.get_running_loop().time()
    late = registry.add(job(1), now + 0.08)
    early = registry.add(job(2), now + 0.02)
    never = registry.add(job(3), now + 3600)
    order: list[int] = []

    async def run(entry: Entry) -> None:
        await _attempt(registry, entry)
        order.append(entry.job.id)

    tasks = [asyncio.create_task(run(e)) for e in (late, early, never)]
    await asyncio.wait(tasks[:2])
    assert order == [2, 1]
    assert early.expired and late.expired and not never.expired
    assert not tasks[2].done()
    registry.fire(never, Outcome.CANCELLED, asyncio.get_running_loop().time())
    await tasks[2]
    assert never.expired and never.stop_reason is Outcome.CANCELLED


async def test_the_timeout_rings_when_it_comes_before_the_deadline() -> None:
    registry = Registry()
    entry = registry.add(job(1), asyncio.get_running_loop().time() + 3600)
    entry.timeout_at = asyncio.get_running_loop().time() + 0.02
    assert await _attempt(registry, entry) == "cancelled"


async def test_a_finished_attempt_is_never_cancelled_later() -> None:
    registry = Registry()
    entry = registry.add(job(1), asyncio.get_running_loop().time() + 0.02)
    task = asyncio.current_task()
    assert task is not None
    registry.arm(entry, task)
    registry.disarm(entry)
    await until(lambda: registry._timer is None)  # the alarm rang, for nothing
    assert not entry.expired and task.cancelling() == 0


async def test_stale_alarms_do_not_pile_up() -> None:
    registry = Registry()
    task = asyncio.current_task()
    assert task is not None
    deadline = asyncio.get_running_loop().time() + 3600
    for i in range(10_000):
        entry = registry.add(job(i), deadline)
        registry.arm(entry, task)
        registry.rearm(entry, deadline + 1)  # a renewal leaves a stale item behind
        registry.disarm(entry)
        registry.remove(entry.key)
    assert len(registry._alarms) <= 64
