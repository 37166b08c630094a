"""The heartbeat against a fake store: renewals re-arm deadlines, lost rows cancel."""

from __future__ import annotations

import asyncio

from acta_sqla.settings import Timings
from acta_sqla.values import HeartbeatReport, Outcome
from acta_sqla.worker.heartbeat import Heartbeat, next_beat
from acta_sqla.worker.inflight import EntryState, Registry

from .fakes import FakeClock, FakeStore, job, until

TIMINGS = Timings.from_heartbeat(45.0)


def report(**kw: object) -> HeartbeatReport:
    base: dict[str, object] = dict(
        renewed=frozenset(),
        busy=frozenset(),
        cancel_requested=frozenset(),
        definitions_version=1,
        recovery_due=False,
    )
    base.update(kw)
    return HeartbeatReport(**base)  # type: ignore[arg-type]


def test_lease_clock_derives_from_the_heartbeat() -> None:
    t = Timings.from_heartbeat(45.0)
    assert (t.lease, t.attempt_deadline, t.worker_dead_after, t.recovery_interval) == (
        180.0,
        112.5,
        315.0,
        180.0,
    )


async def test_beat_renews_rearms_keeps_busy_and_cancels_lost() -> None:
    clock = FakeClock(start=100.0)
    store = FakeStore()
    registry = Registry()
    renewed = registry.add(job(1), 150.0)
    renewed.state = EntryState.EXECUTING
    renewed.started = 90.0
    busy = registry.add(job(2), 150.0)
    lost_exec = registry.add(job(3), 150.0)
    lost_exec.state = EntryState.EXECUTING
    lost_final = registry.add(job(4), 150.0)
    lost_final.state = EntryState.FINALIZING
    fired = registry.add(job(5), 99.0)  # its deadline already fired: not renewed
    store.report = report(renewed=frozenset({renewed.key}), busy=frozenset({busy.key}))
    versions: list[int] = []
    hb = Heartbeat(store, registry, TIMINGS, clock, on_definitions=versions.append)
    await hb.run_once()
    held = {(j, e): started for j, e, started in store.heartbeats[0]}
    assert fired.key not in held
    assert held[renewed.key] is True and held[busy.key] is False
    assert lost_final.key in held  # a Finalizing entry is still renewed until its write
    assert renewed.deadline == 100.0 + TIMINGS.attempt_deadline
    assert busy.deadline == 150.0 and busy.stop_reason is None
    assert lost_exec.stop_reason is Outcome.LEASE_LOST
    assert lost_final.stop_reason is None  # left to its write
    assert versions == [1]


async def test_cancel_requests_and_recovery_due() -> None:
    clock = FakeClock()
    store = FakeStore()
    registry = Registry()
    entry = registry.add(job(1), clock.now() + 100)
    entry.state = EntryState.EXECUTING
    store.report = report(
        renewed=frozenset({entry.key}), cancel_requested=frozenset({1}), recovery_due=True
    )
    taken: list[bool] = []
    hb = Heartbeat(store, registry, TIMINGS, clock, on_recovery_due=lambda: taken.append(True))
    await hb.run_once()
    assert entry.stop_reason is Outcome.CANCELLED
    assert taken == [True]


async def test_a_failed_beat_leaves_deadlines_alone() -> None:
    clock = FakeClock()
    registry = Registry()
    entry = registry.add(job(1), clock.now() + 10)

    class Down(FakeStore):
        async def heartbeat(self, held, locks=()):  # type: ignore[no-untyped-def]
            raise ConnectionError("database down")

    hb = Heartbeat(Down(), registry, TIMINGS, clock)
    assert await hb.run_once() is None
    assert entry.deadline == clock.now() + 10 and entry.stop_reason is None
    assert hb.failures == 1


async def test_a_lock_not_renewed_cancels_its_attempt() -> None:
    clock = FakeClock()
    store = FakeStore()
    registry = Registry()
    keeps = registry.add(job(1), clock.now() + 100)
    keeps.state = EntryState.EXECUTING
    keeps.locks["a"] = 1
    loses = registry.add(job(2), clock.now() + 100)
    loses.state = EntryState.EXECUTING
    loses.locks["b"] = 1
    store.report = report(
        renewed=frozenset({keeps.key, loses.key}),
        locks_renewed=frozenset({("a", 1, 1001)}),
    )
    await Heartbeat(store, registry, TIMINGS, clock).run_once()
    assert store.lock_beats == [[("a", 1, 1001), ("b", 2, 1002)]]
    assert keeps.stop_reason is None
    assert loses.stop_reason is Outcome.LOCK_LOST


class WaitingClock(FakeClock):
    """A fake clock whose waits take the time they wait (the heartbeat's sleep between
    beats), so that a schedule can be read off the clock."""

    async def wait(self, event: asyncio.Event, seconds: float) -> bool:
        self.waits.append(seconds)
        self.advance(seconds)
        await asyncio.sleep(0)
        return event.is_set()


class TimedStore(FakeStore):
    """Each beat takes ``durations[i]`` seconds of clock time (None, and every beat after
    the listed ones: hangs until cancelled, which stops the fake time); every held row is
    renewed. Records when each beat started."""

    def __init__(self, clock: FakeClock, durations: list[float | None]) -> None:
        super().__init__()
        self.clock = clock
        self.durations = durations
        self.at: list[float] = []
        self.beat_started = asyncio.Event()
        self.heartbeat_conn = self  # dropped after an abandoned beat
        self.discarded = 0

    async def discard(self) -> None:
        self.discarded += 1

    async def heartbeat(self, held, locks=()):  # type: ignore[no-untyped-def]
        self.at.append(self.clock.now())
        self.beat_started.set()
        took = self.durations.pop(0) if self.durations else None
        if took is None:
            await asyncio.Event().wait()
        self.clock.advance(took or 0.0)
        return report(renewed=frozenset((j, x) for j, x, _ in held))


async def beats(hb: Heartbeat, store: TimedStore, n: int) -> None:
    hb.start()
    await until(lambda: hb.beats + hb.failures >= n, 5, f"{n} beats answered")
    await hb.stop()


async def test_beats_start_on_a_fixed_schedule_however_long_each_takes() -> None:
    # The seed's cadence is "every 45 s": a beat that took 30 s is followed by the next
    # 15 s later, not 45 s after it ended (which pushed renewals toward the deadline).
    clock = WaitingClock(start=0.0)
    store = TimedStore(clock, [30.0, 2.0, 44.0, 0.0])
    hb = Heartbeat(store, Registry(clock), TIMINGS, clock)
    await beats(hb, store, 4)
    assert store.at[:4] == [45.0, 90.0, 135.0, 180.0]


async def test_a_hung_beat_is_abandoned_when_the_next_is_due_and_costs_no_deadline() -> None:
    clock = WaitingClock(start=0.0)
    registry = Registry(clock)
    entry = registry.add(job(1), 0.0 + TIMINGS.attempt_deadline)  # confirmed at t=0
    entry.state = EntryState.EXECUTING
    entry.started = 0.0
    registry.arm(entry, asyncio.ensure_future(asyncio.sleep(3600)))  # type: ignore[arg-type]
    store = TimedStore(clock, [None, 1.0])
    hb = Heartbeat(store, registry, TIMINGS, clock)
    hb.start()
    await until(lambda: store.at == [45.0], 5, "the first beat to start")
    await asyncio.sleep(0)
    clock.advance(45.0)  # t=90: the next beat is due; the hung one is abandoned
    await until(lambda: hb.beats == 1, 5, "the next beat to be confirmed")
    await hb.stop()
    assert store.at[:2] == [45.0, 90.0]
    assert hb.failures == 1 and store.discarded == 1
    # Renewed from the second beat's start, before the deadline of t=112.5 ever rang.
    assert entry.deadline == 90.0 + TIMINGS.attempt_deadline
    assert not entry.expired and entry.stop_reason is None


def test_the_next_beat_keeps_the_grid_or_runs_at_once_when_overdue() -> None:
    assert next_beat(45.0, 75.0, 45.0) == 90.0  # a 30 s beat: the next one on its slot
    assert next_beat(45.0, 90.0, 45.0) == 90.0  # abandoned at the next slot: now
    assert next_beat(45.0, 300.0, 45.0) == 300.0  # the loop was blocked: at once


async def test_a_beat_after_seven_silent_beats_reports_the_silence() -> None:
    clock = FakeClock(start=0.0)
    store = FakeStore()
    store.report = report()
    silences: list[float] = []
    hb = Heartbeat(store, Registry(clock), TIMINGS, clock, on_silence=silences.append)
    await hb.run_once()  # t=0
    clock.advance(TIMINGS.worker_dead_after - 1)
    await hb.run_once()
    assert silences == []
    clock.advance(TIMINGS.worker_dead_after)
    hb.renewed_outside(clock.now() - 10)  # the lifeline renewed during the silence
    await hb.run_once()
    assert silences == []
    clock.advance(TIMINGS.worker_dead_after + 5)
    await hb.run_once()
    assert silences == [TIMINGS.worker_dead_after + 5]


async def test_an_overrunning_sync_attempt_is_renewed_until_its_cap() -> None:
    """A sync attempt asked to stop whose thread still runs keeps its row (renewed, although
    it was told to stop) until its overrun cap; an attempt told to stop otherwise does not."""
    clock = FakeClock(start=100.0)
    store = FakeStore()
    registry = Registry()
    overrun = registry.add(job(1), 150.0)
    overrun.state = EntryState.EXECUTING
    overrun.stop_reason = Outcome.CANCELLED  # an operator's cancel reached it
    overrun.overrun_until = 103.0
    stopped = registry.add(job(2), 150.0)
    stopped.state = EntryState.EXECUTING
    stopped.stop_reason = Outcome.CANCELLED  # an async handler being cancelled
    store.report = report(renewed=frozenset({overrun.key}))
    hb = Heartbeat(store, registry, TIMINGS, clock)
    await hb.run_once()
    assert [k[:2] for k in store.heartbeats[-1]] == [overrun.key]
    assert overrun.deadline == 100.0 + TIMINGS.attempt_deadline
    clock.advance(3.0)  # the cap
    await hb.run_once()
    assert store.heartbeats[-1] == []


async def test_a_lost_overrunning_row_is_not_renewed_again() -> None:
    clock = FakeClock(start=100.0)
    store = FakeStore()
    registry = Registry()
    entry = registry.add(job(1), 150.0)
    entry.state = EntryState.EXECUTING
    entry.stop_reason = Outcome.TIMEOUT
    entry.overrun_until = 400.0
    store.report = report()  # not renewed: recovered or taken over
    hb = Heartbeat(store, registry, TIMINGS, clock)
    await hb.run_once()
    assert entry.overrun_until == 100.0
    clock.advance(1.0)
    await hb.run_once()
    assert store.heartbeats[-1] == []
