"""The heartbeat against a fake store: renewals re-arm deadlines, lost rows cancel."""

from __future__ import annotations

from acta_sqla.settings import Timings
from acta_sqla.values import HeartbeatReport, Outcome
from acta_sqla.worker.heartbeat import Heartbeat
from acta_sqla.worker.inflight import EntryState, Registry

from .fakes import FakeClock, FakeStore, job

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
