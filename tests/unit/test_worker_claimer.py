"""The claimer against a fake store: permits, batching, idle sleep, back-off."""

from __future__ import annotations

import asyncio

from acta_sqla.settings import Timings
from acta_sqla.worker.claimer import DRAIN_PROBE_SECONDS, Claimer
from acta_sqla.worker.inflight import Entry, Permits, Registry

from .fakes import FakeClock, FakeStore, job, until

TIMINGS = Timings.from_heartbeat(45.0)


def make(n: int = 8, clock: FakeClock | None = None, safety_poll: float = 1.0):  # type: ignore[no-untyped-def]
    store = FakeStore()
    registry = Registry()
    permits = Permits(n)
    claimed: asyncio.Queue[Entry | None] = asyncio.Queue(maxsize=n)
    claimer = Claimer(store, registry, permits, claimed, TIMINGS, safety_poll, clock or FakeClock())
    return store, registry, permits, claimed, claimer


async def test_permits_wait_for_one_then_take_every_free_one() -> None:
    permits = Permits(4)
    assert await permits.take_all() == 4
    waiter = asyncio.ensure_future(permits.take_all())
    await asyncio.sleep(0)
    assert not waiter.done()
    permits.release(1)
    permits.release(2)
    assert await waiter == 3
    permits.close()
    assert await permits.take_all() == 0


async def test_claim_asks_for_every_free_permit_and_returns_unused_ones() -> None:
    store, registry, permits, claimed, claimer = make(8)
    store.to_claim = [[job(1), job(2), job(3)]]
    task = asyncio.create_task(claimer.run_once())
    await until(lambda: claimed.qsize() == 3)
    assert store.claim_asks == [8]
    # Five permits were not used: they are back before the executors take anything.
    assert permits.free == 5
    assert len(registry) == 3
    # The claimer waits until the executors have taken every claimed row.
    assert not task.done()
    for _ in range(3):
        claimed.get_nowait()
        claimed.task_done()
    assert await task == 3


async def test_next_claim_collects_the_permits_executors_freed() -> None:
    store, _registry, permits, claimed, claimer = make(8)
    store.to_claim = [[job(i) for i in range(1, 9)], [job(i) for i in range(9, 17)]]
    first = asyncio.create_task(claimer.run_once())
    await until(lambda: claimed.qsize() == 8)
    for _ in range(8):
        claimed.get_nowait()
        claimed.task_done()
    assert await first == 8
    # Executors finish one after another; the claimer asks only once a permit is free,
    # and then for all of those free at that moment.
    second = asyncio.create_task(claimer.run_once())
    for _ in range(20):  # give the claimer every chance to run: it must keep waiting
        await asyncio.sleep(0)
    assert store.claim_asks == [8]
    permits.release(5)
    await until(lambda: len(store.claim_asks) == 2)
    assert store.claim_asks == [8, 5]
    while not claimed.empty():
        claimed.get_nowait()
        claimed.task_done()
    await second


async def test_empty_claim_sleeps_until_next_due_within_floor_and_poll() -> None:
    clock = FakeClock()
    store, _r, permits, _c, claimer = make(4, clock)
    store.next_due = 0.3
    assert await claimer.run_once() == 0
    assert permits.free == 4
    assert 0.3 <= clock.waits[-1] <= 0.4  # due time plus at most 100 ms of jitter
    store.next_due = 0.001
    await claimer.run_once()
    assert 0.05 <= clock.waits[-1] <= 0.15  # the 50 ms floor
    store.next_due = None
    await claimer.run_once()
    assert 0.9 <= clock.waits[-1] <= 1.0  # nothing waiting: the safety poll, jittered down
    store.next_due = 30.0
    await claimer.run_once()
    assert 0.9 <= clock.waits[-1] <= 1.0  # never longer than the safety poll


async def test_idle_workers_do_not_sleep_in_lockstep() -> None:
    # With nothing due, every idle worker used to sleep exactly 1.0 s (the jitter was cut
    # away by the cap), so idle workers claimed in lockstep.
    clock = FakeClock()
    store, _r, _p, _c, claimer = make(4, clock)
    store.next_due = None
    for _ in range(50):
        await claimer.run_once()
    assert all(0.9 <= w <= 1.0 for w in clock.waits)
    assert max(clock.waits) - min(clock.waits) > 0.05
    assert len(set(clock.waits)) > 40


async def test_wake_ends_the_idle_sleep() -> None:
    store, _r, _p, claimed, claimer = make(4, clock=None, safety_poll=30.0)
    claimer.clock = __import__("acta_sqla.worker.clock", fromlist=["Clock"]).Clock()
    claimer.start()
    await until(lambda: len(store.claim_asks) == 1)
    store.to_claim = [[job(1)]]
    claimer.wake()
    # Without the wake the next claim would come 30 s later.
    await until(lambda: claimed.qsize() == 1, timeout=5)
    claimed.get_nowait()
    claimed.task_done()
    await claimer.stop()


async def test_failed_claim_backs_off_a_full_second_and_returns_permits() -> None:
    clock = FakeClock()
    store, _r, permits, _c, claimer = make(8, clock)
    store.claim_errors = [ConnectionError("boom")]
    claimer.wake()  # a pending wake-up must not shorten the back-off
    assert await claimer.run_once() == 0
    assert permits.free == 8
    assert clock.waits == [1.0]  # the back-off is a full second, not jittered


async def test_claimed_entries_carry_the_attempt_deadline_from_the_claim_start() -> None:
    clock = FakeClock(start=500.0)
    store, registry, _p, claimed, claimer = make(2, clock)
    store.to_claim = [[job(7)]]
    task = asyncio.create_task(claimer.run_once())
    await until(lambda: claimed.qsize() == 1)
    entry = claimed.get_nowait()
    claimed.task_done()
    await task
    assert entry is not None
    assert entry.deadline == 500.0 + TIMINGS.attempt_deadline
    assert registry.get(entry.key) is entry


async def test_finding_nothing_after_work_tells_the_finalizer_once() -> None:
    store, _registry, permits, claimed, claimer = make(4)
    idles: list[int] = []
    claimer._on_idle = lambda: idles.append(len(store.claim_asks))
    store.to_claim = [[job(1)], [], []]
    task = asyncio.create_task(claimer.run_once())
    await until(lambda: claimed.qsize() == 1)
    claimed.get_nowait()
    claimed.task_done()
    await task
    permits.release(1)
    await claimer.run_once()  # nothing due: the finalizer hears of it
    await claimer.run_once()  # still nothing: no second nudge
    assert idles == [2]


async def test_only_a_probing_claim_dates_the_queue_empty_for_burst_mode() -> None:
    # The plain claim never sees a due suspect, and a burst worker (or testing.drain)
    # stops once an empty claim started after its last completion: that claim must be
    # one that probes for suspects (burst mode asks for it with wake(probe=True)).
    clock = FakeClock()
    store, _registry, permits, claimed, claimer = make(4, clock)
    store.to_claim = [[job(1)], [], [], [job(2)]]
    store.suspect_due = [False, True]
    [first] = await claim_one(claimer, claimed)
    permits.release(1)
    clock.advance(0.1)
    await claimer.run_once()  # the plain claim: nothing, idle, but not dated
    assert store.alone_asks == [True, None] and claimer.idle.is_set()
    assert claimer.idle_since == 0.0
    clock.advance(0.1)
    claimer.wake(probe=True)
    await claimer.run_once()  # at once a probe: a suspect is due (job 1 in flight)
    assert store.alone_asks == [True, None, False] and claimer.idle_since == 0.0
    _registry.remove(first.key)  # job 1's completion landed: nothing in flight
    [suspect] = await claim_one(claimer, claimed)
    assert suspect.job.id == 2 and store.alone_asks == [True, None, False, True]


# ------------------------------------------------------------------ suspects run alone


async def take_all(claimed: asyncio.Queue[Entry | None]) -> list[Entry]:
    out = []
    while not claimed.empty():
        entry = claimed.get_nowait()
        claimed.task_done()
        assert entry is not None
        out.append(entry)
    return out


async def claim_one(claimer: Claimer, claimed: asyncio.Queue[Entry | None]) -> list[Entry]:
    task = asyncio.create_task(claimer.run_once())
    await until(lambda: not claimed.empty() or task.done())
    entries = await take_all(claimed)
    await task
    return entries


def probing(n: int, clock: FakeClock):  # type: ignore[no-untyped-def]
    """A claimer that asks about suspects on every claim (the tests below are about what
    it does with the answer; the probe's cadence has a test of its own)."""
    made = make(n, clock)
    made[-1].suspect_probe_every = 0.0
    return made


async def test_suspects_are_probed_at_most_once_a_second_and_plain_claims_between() -> None:
    # The probe (a due-suspect lookup in the claim) cost plain jobs ~20 % more PostgreSQL
    # CPU at 8 executors when every claim made it: it runs once per interval now.
    clock = FakeClock()
    store, registry, _p, claimed, claimer = make(8, clock)
    store.to_claim = [[job(1)], [job(2)], [job(3)], [job(4)]]
    for _ in range(3):
        await claim_one(claimer, claimed)
        clock.advance(0.3)
    clock.advance(0.2)  # 1.1 s after the first probe
    await claim_one(claimer, claimed)
    assert store.alone_asks == [True, None, None, False]


async def test_a_claim_may_take_a_suspect_only_with_nothing_in_flight() -> None:
    store, registry, _p, claimed, claimer = probing(8, FakeClock())
    store.to_claim = [[job(1)], [job(2)]]
    [first] = await claim_one(claimer, claimed)
    await claim_one(claimer, claimed)
    assert store.alone_asks == [True, False]  # job 1 was in flight at the second claim
    assert len(registry) == 2 and first.key in {e.key for e in registry}


async def test_a_due_suspect_stops_claiming_until_the_worker_has_drained() -> None:
    """A worker with work in flight that hears of a due suspect claims nothing (not even
    with free permits) until its last completion has landed, then claims alone: under
    sustained load a suspect is not starved, and it never shares a worker."""
    clock = FakeClock()
    store, registry, permits, claimed, claimer = probing(8, clock)
    store.to_claim = [[job(1)], [], [job(9, alone=True)]]
    store.suspect_due = [False, True, True]
    [entry] = await claim_one(claimer, claimed)
    assert await claimer.run_once() == 0  # held back for the suspect
    assert not claimer.idle.is_set() and clock.waits == []  # not idle: no idle sleep
    task = asyncio.create_task(claimer.run_once())
    for _ in range(50):  # every chance to claim: it must keep waiting
        await asyncio.sleep(0)
    assert len(store.claim_asks) == 2 and permits.free == 7
    registry.remove(entry.key)  # job 1's completion landed: nothing in flight
    await until(lambda: len(store.claim_asks) == 3)
    [suspect] = await take_all(claimed)
    assert await task == 1
    assert store.alone_asks == [True, False, True] and suspect.job.id == 9


async def test_a_draining_worker_asks_again_in_case_another_took_the_suspect() -> None:
    clock = FakeClock()
    store, _registry, _p, claimed, claimer = probing(8, clock)
    store.to_claim = [[job(1)], [], [job(2)]]
    store.suspect_due = [False, True, False]
    await claim_one(claimer, claimed)
    assert await claimer.run_once() == 0  # held back
    task = asyncio.create_task(claimer.run_once())
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(store.claim_asks) == 2
    clock.advance(DRAIN_PROBE_SECONDS)  # job 1 still runs; the probe is due
    await until(lambda: len(store.claim_asks) == 3)
    await take_all(claimed)
    assert await task == 1  # the suspect was gone: plain claiming resumed at once
    assert store.alone_asks == [True, False, False]


async def test_a_suspect_claimed_alone_keeps_its_worker_to_itself_until_done() -> None:
    clock = FakeClock()
    store, registry, permits, claimed, claimer = probing(8, clock)
    store.to_claim = [[job(9, alone=True)], [job(1), job(2)]]
    [suspect] = await claim_one(claimer, claimed)
    assert permits.free == 7
    task = asyncio.create_task(claimer.run_once())
    for _ in range(50):
        await asyncio.sleep(0)
    clock.advance(60.0)  # however long it runs: no probe, no claim
    for _ in range(50):
        await asyncio.sleep(0)
    assert store.claim_asks == [8]
    registry.remove(suspect.key)
    permits.release(1)
    await until(lambda: len(store.claim_asks) == 2)
    await take_all(claimed)
    assert await task == 2
    assert store.alone_asks == [True, True]


async def test_the_claim_after_a_suspect_ran_alone_probes_at_once() -> None:
    # A worker's death loses its whole batch, all suspects: at one probe a second per
    # worker, the rows a crash of a busy worker lost took tens of seconds to run again.
    clock = FakeClock()
    store, registry, permits, claimed, claimer = make(8, clock)
    store.to_claim = [[job(9, alone=True)], [job(10, alone=True)], [job(1)], [job(2)]]
    [first] = await claim_one(claimer, claimed)  # the first claim probes
    task = asyncio.create_task(claimer.run_once())
    clock.advance(0.1)  # well within the probe interval
    registry.remove(first.key)
    permits.release(1)
    [second] = await take_all_of(task, claimed)
    assert second.job.id == 10 and store.alone_asks == [True, True]
    registry.remove(second.key)
    permits.release(1)
    await claim_one(claimer, claimed)  # after the second suspect: a probe again
    clock.advance(0.1)
    await claim_one(claimer, claimed)  # a plain claim: no suspect ran in between
    assert store.alone_asks == [True, True, True, None]


async def take_all_of(task: asyncio.Task[int], claimed: asyncio.Queue[Entry | None]) -> list[Entry]:
    await until(lambda: not claimed.empty() or task.done())
    entries = await take_all(claimed)
    await task
    return entries
