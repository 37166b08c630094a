"""The finalizer against a fake store and a fake clock: batch rules, the 50 ms window, write
repeats, its lifecycle."""

from __future__ import annotations

import asyncio
import random

import pytest
from loguru import logger

from acta_sqla.errors import StatementRefused
from acta_sqla.settings import BATCH_MAX_BYTES, BATCH_WINDOW_SECONDS
from acta_sqla.values import Completion
from acta_sqla.worker.clock import Clock
from acta_sqla.worker.finalizer import STOP, Finalizer, repeat_delay
from acta_sqla.worker.inflight import EntryState, Registry

from .fakes import FakeClock, FakeStore, done, job, until


def make(
    clock: FakeClock | Clock | None = None,
) -> tuple[FakeStore, asyncio.Queue[Completion | None], Finalizer, Registry]:
    store = FakeStore()
    registry = Registry()
    queue: asyncio.Queue[Completion | None] = asyncio.Queue(maxsize=1000)
    fin = Finalizer(store, registry, queue, clock or Clock(), rng=random.Random(7))  # type: ignore[arg-type]
    return store, queue, fin, registry


async def test_a_lone_completion_never_waits() -> None:
    clock = FakeClock()
    store, queue, fin, _ = make(clock)
    queue.put_nowait(done(1))
    # Time does not move: a batch that opened the window would never come back.
    batch = await asyncio.wait_for(fin.next_batch(), 5)
    assert [c.job_id for c in batch] == [1]
    assert clock.timers == []  # no window was opened


async def test_a_backlog_opens_the_window_and_fills_the_batch() -> None:
    clock = FakeClock()
    store, queue, fin, _ = make(clock)
    for i in range(1, 4):
        queue.put_nowait(done(i))
    batch_task = asyncio.create_task(fin.next_batch())
    await until(queue.empty)  # the three are read and the window is open
    queue.put_nowait(done(4))  # arrives inside the window
    await until(queue.empty)
    clock.advance(BATCH_WINDOW_SECONDS * 0.99)
    await asyncio.sleep(0)
    assert not batch_task.done()  # the window is still open just before 50 ms
    clock.advance(BATCH_WINDOW_SECONDS * 0.01)
    batch = await asyncio.wait_for(batch_task, 5)
    # Three were waiting; the fourth arrived inside the window and joined the batch.
    assert [c.job_id for c in batch] == [1, 2, 3, 4]
    assert clock.t == 1000.0 + BATCH_WINDOW_SECONDS


async def test_batches_hold_at_most_128_completions() -> None:
    store, queue, fin, _ = make()
    for i in range(200):
        queue.put_nowait(done(i))
    first = await fin.next_batch()
    second = await fin.next_batch()
    assert len(first) == 128 and len(second) == 72
    assert [c.job_id for c in first + second] == list(range(200))


async def test_batches_hold_at_most_4_mib_and_a_larger_result_goes_alone() -> None:
    store, queue, fin, _ = make()
    third = "x" * (BATCH_MAX_BYTES // 3)
    huge = "y" * (BATCH_MAX_BYTES + 1)
    for i in range(4):
        queue.put_nowait(done(i, third))
    queue.put_nowait(done(9, huge))
    queue.put_nowait(done(10))
    sizes = [len(await fin.next_batch()) for _ in range(4)]
    # 3 thirds fit; the 4th carries over, the huge one is written alone.
    assert sizes == [3, 1, 1, 1]


async def test_stop_flushes_what_is_queued_then_returns() -> None:
    store, queue, fin, registry = make()
    for i in range(5):
        registry.add(job(i), 1e9)
        queue.put_nowait(done(i))
    queue.put_nowait(STOP)
    await asyncio.wait_for(fin.run(), 5)
    assert [c.job_id for b in store.batches for c in b] == [0, 1, 2, 3, 4]
    assert len(registry) == 0


async def test_failed_writes_repeat_with_backoff_and_warn_three_times_then_error() -> None:
    clock = FakeClock()
    store, queue, fin, registry = make(clock)
    registry.add(job(1), 1e9)
    store.write_errors = [ConnectionError(f"down {i}") for i in range(5)]
    levels: list[str] = []
    sink = logger.add(lambda m: levels.append(m.record["level"].name), level="WARNING")
    logger.enable("acta_sqla")
    try:
        applied = await fin.write([done(1)])
    finally:
        logger.remove(sink)
        logger.disable("acta_sqla")
    assert applied == {1}
    assert len(store.batches) == 1
    assert levels == ["WARNING"] * 3 + ["ERROR"] * 2
    bases = [1, 2, 4, 8, 16]
    for slept, base in zip(clock.sleeps, bases, strict=True):
        assert base * 0.75 <= slept <= base * 1.25
    assert len(registry) == 0  # removed only once the write landed


def test_repeat_delay_caps_at_30_seconds() -> None:
    rng = random.Random(1)
    for tries in range(6, 20):
        assert 22.5 <= repeat_delay(tries, rng) <= 37.5


async def test_lease_lost_completions_are_dropped_from_the_registry_all_the_same() -> None:
    store, queue, fin, registry = make()
    registry.add(job(1), 1e9)
    registry.add(job(2), 1e9)
    store.lease_lost = {2}
    applied = await fin.write([done(1), done(2)])
    assert applied == {1}
    assert len(registry) == 0


async def test_a_completion_the_database_refuses_does_not_block_the_others() -> None:
    store, queue, fin, registry = make()

    class Refusing(FakeStore):
        async def complete_executions(self, batch):  # type: ignore[no-untyped-def]
            if any(c.result_json == "poison" for c in batch):
                # What the store raises for asyncpg's UntranslatableCharacterError.
                raise StatementRefused("unsupported escape", "22P05")
            return await super().complete_executions(batch)

    fin.store = refusing = Refusing()
    applied = await fin.write([done(1), done(2, "poison"), done(3)])
    assert applied == {1, 2, 3}
    written = {c.job_id: c for b in refusing.batches for c in b}
    assert written[2].status == "failed"
    assert written[2].error_type == "acta.CompletionRefused"
    assert written[1].status == written[3].status == "succeeded"


async def test_a_transient_error_while_writing_apart_repeats_instead_of_ending_the_stage() -> None:
    # Splitting a refused batch writes each completion alone; a lock timeout or a lost
    # connection during those single writes used to escape write() and end the finalizer
    # (and with it the worker).
    clock = FakeClock()
    store, queue, fin, registry = make(clock)
    transient = [
        StatementRefused("canceling statement due to lock timeout", "55P03"),
        ConnectionError("connection reset"),
    ]

    class Refusing(FakeStore):
        async def complete_executions(self, batch):  # type: ignore[no-untyped-def]
            if any(c.result_json == "poison" for c in batch):
                raise StatementRefused("unsupported escape", "22P05")
            if len(batch) == 1 and batch[0].job_id == 3 and transient:
                raise transient.pop(0)
            return await super().complete_executions(batch)

    fin.store = refusing = Refusing()
    applied = await fin.write([done(1), done(2, "poison"), done(3)])
    assert applied == {1, 2, 3}
    assert not transient and len(clock.sleeps) == 2  # both repeated, with the back-off
    written = {c.job_id: c.status for b in refusing.batches for c in b}
    assert written == {1: "succeeded", 2: "failed", 3: "succeeded"}


async def test_a_refused_fallback_is_left_to_its_lease_not_repeated_forever() -> None:
    store, queue, fin, registry = make()

    class RefusingAll(FakeStore):
        async def complete_executions(self, batch):  # type: ignore[no-untyped-def]
            raise StatementRefused("value too long", "54000")

    fin.store = RefusingAll()
    assert await fin.write([done(1, "poison")]) == set()


@pytest.mark.parametrize("backlog", [0, 5])
async def test_the_run_loop_writes_every_completion_once(backlog: int) -> None:
    store, queue, fin, _ = make()
    task = asyncio.create_task(fin.run())
    for i in range(backlog + 1):
        queue.put_nowait(done(i))
    await until(lambda: sum(len(b) for b in store.batches) == backlog + 1)
    queue.put_nowait(STOP)
    await asyncio.wait_for(task, 5)
    ids = [c.job_id for b in store.batches for c in b]
    assert sorted(ids) == list(range(backlog + 1))


async def test_a_refusal_not_about_the_data_repeats_until_the_write_lands() -> None:
    clock = FakeClock()
    store, queue, fin, registry = make(clock)
    registry.add(job(1), 1e9)
    # A revoked privilege or a serialization failure may pass: never isolate-and-fail.
    store.write_errors = [
        StatementRefused("permission denied for table job", "42501"),
        StatementRefused("could not serialize access", "40001"),
    ]
    applied = await fin.write([done(1), done(2)])
    assert applied == {1, 2}
    assert [[c.status for c in b] for b in store.batches] == [["succeeded", "succeeded"]]
    assert len(clock.sleeps) == 2


async def test_the_window_closes_when_the_claimer_finds_nothing_due() -> None:
    store, queue, fin, _ = make(FakeClock())  # a fake clock never closes the window itself
    for i in range(1, 4):
        queue.put_nowait(done(i))
    batch_task = asyncio.create_task(fin.next_batch())
    await until(queue.empty)  # the three are read and the window is open
    assert not batch_task.done()
    fin.flush()
    batch = await asyncio.wait_for(batch_task, 5)
    assert [c.job_id for c in batch] == [1, 2, 3]
    # A flush with nothing waiting is no batch; the next completion starts a new one.
    fin.flush()
    queue.put_nowait(done(4))
    assert await fin.next_batch() == []
    assert [c.job_id for c in await fin.next_batch()] == [4]


async def test_start_runs_one_loop_and_stop_flushes_then_is_idempotent() -> None:
    store, queue, fin, registry = make()
    ended: list[asyncio.Task[object]] = []
    fin.start(on_ended=ended.append)
    fin.start()  # a second start changes nothing
    assert fin.task is not None and fin.task.get_name() == "acta-finalizer"
    for i in range(3):
        registry.add(job(i), 1e9)
        queue.put_nowait(done(i))
    await asyncio.wait_for(fin.stop(5.0), 5)
    assert [c.job_id for b in store.batches for c in b] == [0, 1, 2]
    assert len(registry) == 0 and fin.task.done() and ended == [fin.task]
    await asyncio.wait_for(fin.stop(5.0), 5)  # idempotent: no second STOP, no wait
    assert queue.empty()


class _Down(FakeStore):
    """A database that takes no completion: every write fails."""

    tries = 0

    async def complete_executions(self, batch):  # type: ignore[no-untyped-def]
        self.tries += 1
        await asyncio.sleep(0)
        raise ConnectionError("down")


async def test_stop_gives_up_a_write_that_does_not_land_within_its_time() -> None:
    store, queue, fin, registry = make(FakeClock())
    fin.store = down = _Down()
    fin.start()
    registry.add(job(1), 1e9)
    queue.put_nowait(done(1))
    await until(lambda: down.tries >= 2)
    await asyncio.wait_for(fin.stop(0.0), 5)
    assert fin.abandon and fin.task is not None and fin.task.done()
    assert down.batches == []  # never landed: the row comes back through recovery


def _full_and_failing() -> tuple[_Down, asyncio.Queue[Completion | None], Finalizer, Registry]:
    """A finalizer repeating a failed write while the channel behind it is full, as when
    the claims went on landing and the completions did not."""
    registry = Registry()
    queue: asyncio.Queue[Completion | None] = asyncio.Queue(maxsize=4)
    down = _Down()
    # The real clock: the first repeat comes about 1 s after the first try.
    fin = Finalizer(down, registry, queue, Clock(), rng=random.Random(7))  # type: ignore[arg-type]
    for i in range(6):
        entry = registry.add(job(i), 1e9)
        entry.state = EntryState.FINALIZING
    fin.start()
    for i in range(2):
        queue.put_nowait(done(i))
    return down, queue, fin, registry


async def test_stop_gives_up_within_its_time_even_when_the_channel_is_full() -> None:
    # The STOP marker cannot enter a full channel while the write in hand keeps failing:
    # the stop's time counts from the call, not from when the marker got in.
    down, queue, fin, registry = _full_and_failing()
    await until(lambda: down.tries >= 1 and queue.empty())
    for i in range(2, 6):
        queue.put_nowait(done(i))
    assert queue.full()
    await asyncio.wait_for(fin.stop(0.05), 5)
    assert fin.abandon and fin.task is not None and fin.task.done()
    assert down.batches == [] and len(registry) == 6  # left held: recovery brings them back


async def test_the_second_signal_repeats_no_failed_write() -> None:
    # The second signal: the write repeating in its pause is given up at once, and so is
    # every later one that fails; the stop then ends without waiting out its time.
    down, queue, fin, registry = _full_and_failing()
    await until(lambda: down.tries >= 1)
    fin.give_up()
    for i in range(2, 6):
        queue.put_nowait(done(i))
    await asyncio.wait_for(fin.stop(3600.0), 5)
    assert fin.abandon and fin.task is not None and fin.task.done()
    assert down.batches == [] and len(registry) == 6  # left held: recovery brings them back


async def test_after_the_second_signal_a_write_that_lands_still_lands() -> None:
    # An interrupted attempt's completion, written once the handlers were cancelled.
    store, queue, fin, registry = make()
    fin.start()
    registry.add(job(1), 1e9)
    fin.give_up()
    queue.put_nowait(done(1))
    await asyncio.wait_for(fin.stop(5.0), 5)
    assert [c.job_id for b in store.batches for c in b] == [1]
    assert len(registry) == 0


async def test_run_once_writes_one_batch() -> None:
    store, queue, fin, _ = make()
    for i in range(3):
        queue.put_nowait(done(i))
    assert [c.job_id for c in await fin.run_once()] == [0, 1, 2]
    assert [[c.job_id for c in b] for b in store.batches] == [[0, 1, 2]]
    queue.put_nowait(STOP)
    assert await fin.run_once() == []
