"""The lifeline on a fake clock: while the loop is blocked (its ticker does not run) the
thread's half renews what the registry holds, each job only until its execution timeout,
and the loop applies those renewals before its alarm or a past deadline is trusted."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from loguru import logger

from acta_sqla.settings import Timings
from acta_sqla.values import HeartbeatReport, Outcome
from acta_sqla.worker.inflight import Entry, EntryState, Registry
from acta_sqla.worker.lifeline import Lifeline

from .fakes import FakeClock, FakeStore, job, until

TIMINGS = Timings.from_heartbeat(45.0)
"""Tick 1 s, stall threshold 5 s, attempt deadline 112.5 s."""


class RenewingStore(FakeStore):
    """Renews every held row (minus ``lost``), recording when each renewal started."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.lost: set[tuple[int, int]] = set()
        self.at: list[float] = []

    async def heartbeat(self, held, locks=()):  # type: ignore[no-untyped-def]
        self.at.append(self.clock.now())
        self.heartbeats.append(list(held))
        return HeartbeatReport(
            renewed=frozenset((j, x) for j, x, _ in held) - self.lost,
            busy=frozenset(),
            cancel_requested=frozenset(),
            definitions_version=1,
            recovery_due=False,
        )

    async def close(self) -> None:
        pass


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(str(m)), level="WARNING", format="{message}")
    logger.enable("acta_sqla")
    try:
        yield seen
    finally:
        logger.disable("acta_sqla")
        logger.remove(sink)


def setup() -> tuple[FakeClock, Registry, RenewingStore, Lifeline]:
    clock = FakeClock(start=1000.0)
    registry = Registry(clock)
    store = RenewingStore(clock)
    lifeline = Lifeline(registry, TIMINGS, lambda: store, clock, monotonic=clock.now)
    lifeline.start_ticker()
    return clock, registry, store, lifeline


def running(registry: Registry, clock: FakeClock, id: int, kind: str, timeout: float) -> Entry:
    entry = registry.add(job(id, kind), clock.now() + TIMINGS.attempt_deadline)
    entry.state = EntryState.EXECUTING
    entry.started = clock.now()
    entry.timeout_at = clock.now() + timeout
    registry.arm(entry, asyncio.ensure_future(asyncio.sleep(3600)))  # type: ignore[arg-type]
    return entry


def freeze(clock: FakeClock, seconds: float) -> None:
    """Time passes and nothing runs: neither the loop (no timer fires) nor the thread."""
    clock.t += seconds


async def block(lifeline: Lifeline, clock: FakeClock, seconds: float) -> None:
    """The loop runs nothing (no timer fires) for ``seconds``; the lifeline thread looks
    once per tick, as it does."""
    end = clock.t + seconds
    while clock.t + lifeline.tick < end:
        clock.t += lifeline.tick
        await lifeline.step()
    clock.t = end


async def test_a_loop_that_ticks_is_never_renewed_from_outside() -> None:
    clock, registry, store, lifeline = setup()
    running(registry, clock, 1, "quick", 300)
    for _ in range(100):
        clock.advance(0.5)  # the loop runs its ticker
        await lifeline.step()
    assert store.heartbeats == []


async def test_a_blocked_loop_keeps_its_leases_and_the_alarm_learns_of_them(
    warnings: list[str],
) -> None:
    clock, registry, store, lifeline = setup()
    t0 = clock.now()
    blocker = running(registry, clock, 1, "blocks_loop", 300)
    innocent = running(registry, clock, 2, "quick", 300)
    waiting = registry.add(job(3, "quick"), t0 + TIMINGS.attempt_deadline)  # claimed only

    await block(lifeline, clock, 0.5)
    await lifeline.step()
    assert store.heartbeats == []  # shorter than tick + threshold: not a stall yet
    await block(lifeline, clock, 6.0)
    await lifeline.step()  # stalled: renewed at once
    for _ in range(4):
        await block(lifeline, clock, 45.0)
        await lifeline.step()  # and once per beat interval
    assert len(store.heartbeats) == 5
    assert store.heartbeats[-1] == [(1, 1001, True), (2, 1002, True), (3, 1003, False)]
    assert any("has been blocked" in w and "blocks_loop (job 1)" in w for w in warnings)

    # t0 + 186.5: every deadline the loop knows (t0 + 112.5) is long past. The loop comes
    # back: timers run first, the alarm among them; it must learn of the renewals first.
    assert clock.now() > t0 + TIMINGS.attempt_deadline
    clock.advance(0)
    last = store.at[-1]
    for entry in (blocker, innocent, waiting):
        assert entry.deadline == last + TIMINGS.attempt_deadline
        assert not entry.expired and entry.stop_reason is None
    assert not waiting.fired(clock.now())
    assert lifeline.stalls == 1
    assert any("was blocked for 185.5s" in w and "5 lease renewal" in w for w in warnings[1:])


async def test_a_past_deadline_is_checked_against_the_renewals_before_it_is_believed() -> None:
    # An executor may look at a claimed entry before any timer runs (asyncio runs what was
    # already queued first): Entry.fired applies the renewals made during the block.
    clock, registry, store, lifeline = setup()
    entry = registry.add(job(1), clock.now() + TIMINGS.attempt_deadline)
    running(registry, clock, 2, "blocks_loop", 300)
    await block(lifeline, clock, 6.0)
    await lifeline.step()
    await block(lifeline, clock, 110.0)
    assert not entry.fired(clock.now())
    assert entry.deadline == store.at[-1] + TIMINGS.attempt_deadline


async def test_renewals_stop_at_each_jobs_own_execution_timeout(warnings: list[str]) -> None:
    clock, registry, store, lifeline = setup()
    short = running(registry, clock, 1, "short", 30)
    running(registry, clock, 2, "long", 100)
    registry.add(job(3), clock.now() + TIMINGS.attempt_deadline)  # claimed only
    await block(lifeline, clock, 6.0)
    await lifeline.step()  # t+6: all three
    await block(lifeline, clock, 45.0)
    await lifeline.step()  # t+51: the short job is past its 30 s timeout
    await block(lifeline, clock, 45.0)
    await lifeline.step()  # t+96: the long one still within its 100 s
    await block(lifeline, clock, 45.0)
    await lifeline.step()  # t+141: every running job past its timeout: nothing at all
    await block(lifeline, clock, 45.0)
    await lifeline.step()
    held = [[j for j, _, _ in beat] for beat in store.heartbeats]
    assert held == [[1, 2, 3], [2, 3], [2, 3]]
    assert sum("past every running job's execution timeout" in w for w in warnings) == 1
    assert short.stop_reason is None  # the thread never touches an entry


async def test_what_the_heartbeat_would_leave_out_is_not_renewed() -> None:
    clock, registry, store, lifeline = setup()
    cancelled = running(registry, clock, 1, "quick", 300)
    registry.fire(cancelled, Outcome.CANCELLED, clock.now())
    soon = registry.add(job(2), clock.now() + 3)  # its deadline passes during the block
    finalizing = running(registry, clock, 3, "quick", 1)
    finalizing.state = EntryState.FINALIZING
    running(registry, clock, 4, "blocks_loop", 300)
    await block(lifeline, clock, 6.0)
    await lifeline.step()
    assert [j for j, _, _ in store.heartbeats[0]] == [3, 4]
    assert soon.stop_reason is None


async def test_a_row_the_lifeline_could_not_renew_keeps_its_old_deadline() -> None:
    clock, registry, store, lifeline = setup()
    kept = running(registry, clock, 1, "blocks_loop", 300)
    lost = running(registry, clock, 2, "quick", 300)
    first_deadline = lost.deadline
    store.lost = {lost.key}  # taken over meanwhile
    for seconds in (6.0, 45.0, 45.0):
        await block(lifeline, clock, seconds)
        await lifeline.step()
    await block(lifeline, clock, 30.0)  # t+126: past the lost row's deadline (t+112.5)
    clock.advance(0)  # back: the alarm rings for the lost row only
    assert lost.expired and lost.deadline == first_deadline
    assert not kept.expired


async def test_a_late_answer_never_moves_a_deadline_back() -> None:
    clock = FakeClock()
    registry = Registry(clock)
    entry = registry.add(job(1), clock.now() + 200)
    registry.rearm(entry, clock.now() + 100)  # a beat that started before the last renewal
    assert entry.deadline == clock.now() + 200


async def test_a_frozen_process_is_told_apart_from_a_blocked_loop(warnings: list[str]) -> None:
    clock, registry, store, lifeline = setup()
    freeze(clock, 20.0)  # the lifeline thread never looked: the whole process was stopped
    clock.advance(0)
    assert any("did not run for" in w for w in warnings)
    assert not any("event loop was blocked" in w for w in warnings)


async def test_a_loop_slow_to_come_back_from_a_freeze_is_not_told_as_blocked(
    warnings: list[str],
) -> None:
    """After a thaw the thread may look before the loop has run, and again a tick later
    with the loop still catching up (a busy machine): the loop gets the allowance of a
    running one, measured from the thaw, before it counts as blocked. Before, one tick
    after the thaw it counted as a blocked loop (a fault test saw it under load)."""
    clock, registry, store, lifeline = setup()
    running(registry, clock, 1, "work", 300)
    await lifeline.step()  # the thread's look before the freeze
    freeze(clock, 20.0)
    await lifeline.step()  # the thread looks first: it finds its own freeze
    for _ in range(3):  # the loop not back yet, for less than tick + threshold (6 s)
        clock.t += 1.5
        await lifeline.step()
    assert store.heartbeats == [] and not warnings
    clock.advance(0)  # the loop comes back
    assert any("did not run for" in w for w in warnings)
    assert not any("event loop" in w for w in warnings)


async def test_a_loop_blocked_after_a_thaw_is_still_renewed_and_told(
    warnings: list[str],
) -> None:
    clock, registry, store, lifeline = setup()
    running(registry, clock, 1, "work", 300)
    await lifeline.step()
    freeze(clock, 20.0)
    await lifeline.step()  # the freeze
    await block(lifeline, clock, 7.0)  # then the loop blocks past tick + threshold
    await lifeline.step()
    assert len(store.heartbeats) == 1  # renewed from the thread
    clock.advance(0)
    assert any("event loop was blocked" in w for w in warnings)


async def test_the_alarm_applies_the_renewals_even_when_it_rings_before_the_ticker() -> None:
    clock, registry, store, lifeline = setup()
    entry = running(registry, clock, 1, "blocks_loop", 300)
    for seconds in (6.0, 45.0, 45.0):
        await block(lifeline, clock, seconds)
        await lifeline.step()
    await block(lifeline, clock, 30.0)  # t+126: past the deadline the loop knows (t+112.5)
    assert lifeline._timer is not None
    lifeline._timer.cancel()  # whatever order the loop runs its due timers in
    clock.advance(0)
    assert not entry.expired
    assert entry.deadline == store.at[-1] + TIMINGS.attempt_deadline


async def test_stopping_ends_the_thread_at_once_not_a_tick_later() -> None:
    # Every worker's stop (and so every testing.drain) waited for the thread's next look.
    clock = FakeClock(start=1000.0)
    lifeline = Lifeline(Registry(clock), TIMINGS, lambda: RenewingStore(clock), clock)
    lifeline.tick = 3600.0  # the next look would be an hour away
    lifeline.start()
    thread = lifeline._thread
    assert thread is not None
    await until(lambda: lifeline._woken is not None)  # the thread waits for its next look
    await lifeline.stop()
    assert not thread.is_alive()
