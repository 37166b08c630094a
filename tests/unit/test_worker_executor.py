"""Executors: every way a handler can end becomes a completion, and the permit comes back
only after the hand-off."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from loguru import logger

from acta_sqla import Acta, Cancel, Context, Fail, Retry, WaitForSignal
from acta_sqla.policy import Policy
from acta_sqla.settings import Timings
from acta_sqla.values import Completion, HeartbeatReport, Outcome
from acta_sqla.worker.clock import Clock
from acta_sqla.worker.executor import Executor, ExecutorConfig, Executors
from acta_sqla.worker.heartbeat import Heartbeat
from acta_sqla.worker.inflight import Entry, EntryState, Permits, Registry

from .fakes import FakeClock, FakeStore, job, until

TIMINGS = Timings.from_heartbeat(45.0)
SHORT = Timings.from_heartbeat(0.5)
LEASE = SHORT.lease
"""2 s: the overrun cap of the 1 s ``overruns`` is 1 + 2 = 3 s after its stop."""

acta = Acta(namespace="unit")
calls: list[Any] = []


@acta.job(max_attempts=3, backoff_base=2.0)
async def ok(ctx: Context, n: int) -> dict[str, int]:
    calls.append((ctx.attempt, ctx.args, ctx.kind))
    return {"double": n * 2}


@acta.job(max_attempts=3, backoff_base=2.0)
async def boom(ctx: Context) -> None:
    raise ValueError("no luck")


@acta.job(max_attempts=3)
async def retry_later(ctx: Context) -> None:
    raise Retry(after=42)


@acta.job
async def give_up(ctx: Context) -> None:
    raise Fail("bad input")


@acta.job
async def obsolete(ctx: Context) -> None:
    raise Cancel("superseded")


@acta.job(timeout=0.05, max_attempts=2)
async def hang(ctx: Context) -> None:
    await asyncio.sleep(3600)


@acta.job
async def sleeps(ctx: Context) -> None:
    await asyncio.sleep(3600)  # until cancelled (its timeout is the default 300 s)


@acta.job
async def garbage(ctx: Context) -> object:
    return object()


@acta.job
async def self_cancel(ctx: Context) -> None:
    raise asyncio.CancelledError()


@acta.job
async def exits(ctx: Context) -> None:
    raise SystemExit(3)


@acta.job
def sync_handler(ctx: Context, name: str) -> str:
    return f"{name} from {threading.current_thread().name}"


class Gate:
    """Holds a sync handler's thread until the test lets it return."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.saw_stop: list[bool] = []


gate = Gate()


@acta.job(timeout=1.0, max_attempts=3)
def overruns(ctx: Context) -> str:
    """Ignores its timeout until the test releases it (a thread cannot be killed)."""
    gate.entered.set()
    assert gate.release.wait(30), "the test never released the handler"
    gate.saw_stop.append(ctx.should_stop)
    return "too late"


@acta.job
async def async_stop_flag(ctx: Context) -> bool:
    return ctx.should_stop


class Harness:
    def __init__(self, completed_size: int = 16, clock: Any = None) -> None:
        self.registry = Registry(clock)
        self.permits = Permits(4)
        self.claimed: asyncio.Queue[Entry | None] = asyncio.Queue(maxsize=4)
        self.completed: asyncio.Queue[Completion | None] = asyncio.Queue(maxsize=completed_size)
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="acta-sync")
        config = ExecutorConfig(
            acta.handlers,
            lambda kind: acta.handlers[kind].policy if kind in acta.handlers else Policy(),
            "unit",
            safety_poll=1.0,
            pool=self.pool,
            lease=LEASE,
        )
        self.executor = Executor(
            config,
            self.registry,
            self.permits,
            self.claimed,
            self.completed,
            clock=clock or Clock(),
        )

    def take_permit(self) -> None:
        # As the claimer does for each row it claims.
        self.permits.free -= 1

    async def start(
        self, job_id: int, kind: str, deadline_in: float
    ) -> tuple[Entry, asyncio.Task[None]]:
        """Start one attempt in the background and wait until its handler runs."""
        self.take_permit()
        loop = asyncio.get_running_loop()
        entry = self.registry.add(job(job_id, kind), loop.time() + deadline_in)
        task = asyncio.create_task(self.executor.run_once(entry))
        await until(lambda: entry.state is EntryState.EXECUTING)
        return entry, task

    async def run(self, kind: str, args: str = "{}", attempts: int = 1, **kw: Any) -> Completion:
        self.take_permit()
        loop = asyncio.get_running_loop()
        entry = self.registry.add(
            job(1, kind, args, attempts, **kw), loop.time() + TIMINGS.attempt_deadline
        )
        await self.executor.run_once(entry)
        completion = self.completed.get_nowait()
        assert completion is not None
        assert entry.state is EntryState.FINALIZING
        assert self.permits.free == 4
        return completion


@pytest.fixture
def h() -> Harness:
    return Harness()


async def test_success_stores_the_json_result(h: Harness) -> None:
    c = await h.run("ok", '{"n": 21}', attempts=2)
    assert c.outcome is Outcome.SUCCEEDED and c.status == "succeeded"
    assert c.result_json == '{"double":42}'
    assert not c.refund and c.record and c.attempt == 2
    # ctx.attempt is the attempt number the claim counted; ctx.args the args as stored
    assert calls[-1] == (2, {"n": 21}, "ok")


async def test_failure_is_retried_with_backoff_until_the_budget_is_spent(h: Harness) -> None:
    c = await h.run("boom", attempts=1)
    assert (c.status, c.outcome) == ("ready", Outcome.FAILED)
    assert 1.5 <= c.delay <= 2.5  # backoff_base 2 s, ±25 %
    assert c.error_type == "ValueError" and c.error_message == "no luck"
    assert "ValueError: no luck" in (c.traceback or "")
    c = await h.run("boom", attempts=2)
    assert c.status == "ready" and 3.0 <= c.delay <= 5.0
    c = await h.run("boom", attempts=3)
    assert c.status == "failed"
    assert "failure budget spent" in (c.error_message or "")


@acta.job(max_attempts=3)
async def waits_badly(ctx: Context, name: str) -> WaitForSignal:
    return WaitForSignal(name + "\x00")  # args cannot carry a NUL; code can


async def test_a_wait_for_a_name_no_table_can_hold_fails_the_attempt_under_its_budget(
    h: Harness,
) -> None:
    # Issue 28, item 8: the completion that parked the job was refused by the database
    # and the job failed for good (acta.CompletionRefused, attempt 1 of 3). The wait is
    # refused where the handler builds it, like any exception of the handler.
    c = await h.run("waits_badly", '{"name": "go"}', attempts=1)
    assert (c.status, c.outcome) == ("ready", Outcome.FAILED)
    assert c.error_type == "acta_sqla.errors.InvalidJob"
    assert (c.error_message or "").startswith("WaitForSignal: signal name 'go\\x00' contains a NUL")
    c = await h.run("waits_badly", '{"name": "go"}', attempts=3)
    assert c.status == "failed" and "attempt 3 of 3" in (c.error_message or "")


async def test_per_job_max_attempts_wins_over_the_policy(h: Harness) -> None:
    c = await h.run("boom", attempts=1, max_attempts=1)
    assert c.status == "failed"


async def test_retry_fail_and_cancel(h: Harness) -> None:
    c = await h.run("retry_later")
    assert (c.status, c.outcome, c.delay) == ("ready", Outcome.RETRY, 42.0)
    c = await h.run("retry_later", attempts=3)
    assert c.status == "failed"  # a Retry is charged like any attempt
    c = await h.run("give_up")
    assert (c.status, c.outcome) == ("failed", Outcome.FAIL)
    c = await h.run("obsolete")
    assert (c.status, c.outcome) == ("cancelled", Outcome.CANCELLED)


async def test_timeout_cancels_the_handler_and_counts_as_a_failure(h: Harness) -> None:
    c = await h.run("hang", attempts=1)
    assert (c.status, c.outcome) == ("ready", Outcome.TIMEOUT)
    assert "execution timeout" in (c.error_message or "")
    c = await h.run("hang", attempts=2)
    assert c.status == "failed"


async def test_unserializable_result_is_a_failure_with_a_clear_error(h: Harness) -> None:
    c = await h.run("garbage")
    assert c.outcome is Outcome.FAILED
    assert "not JSON-serializable" in (c.error_message or "")


async def test_cancelled_error_and_system_exit_from_a_handler_are_failures(h: Harness) -> None:
    c = await h.run("self_cancel")
    assert c.outcome is Outcome.FAILED and c.error_type == "asyncio.exceptions.CancelledError"
    c = await h.run("exits")
    assert c.outcome is Outcome.FAILED and c.error_type == "SystemExit"


async def test_sync_handlers_run_in_the_thread_pool(h: Harness) -> None:
    c = await h.run("sync_handler", '{"name": "x"}')
    assert c.outcome is Outcome.SUCCEEDED
    assert '"x from acta-sync' in (c.result_json or "")


async def test_args_that_no_longer_fit_fail_without_retry(h: Harness) -> None:
    c = await h.run("ok", '{"n": "not a number"}')
    assert (c.status, c.outcome) == ("failed", Outcome.FAIL)
    assert "n" in (c.error_message or "")


async def test_no_handler_hands_back_uncharged_after_the_safety_poll(h: Harness) -> None:
    c = await h.run("unknown_kind")
    assert (c.status, c.outcome, c.delay, c.refund, c.record) == (
        "ready",
        Outcome.HANDBACK,
        1.0,
        True,
        False,
    )


async def test_an_entry_whose_deadline_fired_is_skipped(h: Harness) -> None:
    h.take_permit()
    loop = asyncio.get_running_loop()
    entry = h.registry.add(job(5, "ok", '{"n": 1}'), loop.time() - 1)
    await h.executor.run_once(entry)
    assert h.completed.empty()
    assert len(h.registry) == 0
    assert h.permits.free == 4


started_ids: list[int] = []


@acta.job
async def records_start(ctx: Context) -> None:
    started_ids.append(ctx.job_id)


@pytest.mark.parametrize("reason", [Outcome.CANCELLED, Outcome.LEASE_LOST])
async def test_an_attempt_asked_to_stop_while_admission_decides_never_starts(
    h: Harness, reason: Outcome
) -> None:
    # Fired while its admission call was in flight: no renewal and no alarm would follow,
    # so a handler started now could overlap the row's next owner.
    async def admit(entry: Entry) -> Completion | None:
        h.registry.fire(entry, reason, asyncio.get_running_loop().time())
        return None  # admitted

    h.executor.config = dataclasses.replace(h.executor.config, admit=admit)
    h.take_permit()
    entry = h.registry.add(job(8, "records_start"), asyncio.get_running_loop().time() + 3600)
    await h.executor.run_once(entry)
    assert started_ids == [] and h.completed.empty()
    assert len(h.registry) == 0 and h.permits.free == 4


async def test_heartbeat_fire_cancels_a_running_handler(h: Harness) -> None:
    entry, entry_job = await h.start(6, "hang", 3600)
    h.registry.fire(entry, Outcome.CANCELLED, asyncio.get_running_loop().time())
    await entry_job
    c = h.completed.get_nowait()
    assert c is not None and (c.status, c.outcome) == ("cancelled", Outcome.CANCELLED)


async def test_full_completed_channel_holds_the_permit(h: Harness) -> None:
    small = Harness(completed_size=1)
    small.completed.put_nowait(None)  # the channel is full
    small.take_permit()
    loop = asyncio.get_running_loop()
    entry = small.registry.add(job(8, "ok", '{"n": 1}'), loop.time() + 3600)
    task = asyncio.create_task(small.executor.run_once(entry))
    await until(lambda: entry.state is EntryState.FINALIZING)
    for _ in range(20):  # the executor gets every chance to run: it must stay blocked
        await asyncio.sleep(0)
    assert not task.done()
    assert small.permits.free == 3  # intake stays stopped while the finalizer is behind
    small.completed.get_nowait()
    await task
    assert small.permits.free == 4


async def test_a_timeout_is_told_from_a_lost_lease_by_which_deadline_came_first(
    h: Harness,
) -> None:
    # The lease deadline lies far beyond the 0.05 s timeout: whatever the clock reads when
    # the scope fires, this is a timeout.
    c = await h.run("hang")
    assert c.outcome is Outcome.TIMEOUT
    h.take_permit()
    loop = asyncio.get_running_loop()
    entry = h.registry.add(job(9, "hang"), loop.time() + 0.02)  # the deadline comes first
    await h.executor.run_once(entry)
    c = h.completed.get_nowait()
    assert c is not None and c.error_type == "acta.lease_lost"


async def test_a_renewal_moves_the_running_attempts_deadline_on(h: Harness) -> None:
    # The kind's 0.05 s timeout is the later of the two for now; a renewal moves the
    # deadline past it, so the attempt ends as a timeout instead of a lost lease.
    entry, task = await h.start(10, "hang", 0.03)
    h.registry.rearm(entry, asyncio.get_running_loop().time() + 3600)
    await task
    c = h.completed.get_nowait()
    assert c is not None and c.outcome is Outcome.TIMEOUT


async def test_cancelling_the_executor_hands_over_an_interrupted_completion(
    h: Harness,
) -> None:
    entry, task = await h.start(11, "hang", 3600)
    task.cancel()  # the loop is going down
    with pytest.raises(asyncio.CancelledError):
        await task
    c = h.completed.get_nowait()
    assert c is not None and (c.outcome, c.status, c.refund) == (Outcome.INTERRUPTED, "ready", True)
    assert h.permits.free == 4 and entry.task is None


async def test_executors_start_n_loops_and_stop_ends_them_once() -> None:
    h = Harness()
    executors = Executors([h.executor, h.executor], h.claimed)
    ended: list[asyncio.Task[Any]] = []
    executors.start(on_ended=ended.append)
    executors.start()  # a second start changes nothing
    assert [t.get_name() for t in executors.tasks] == ["acta-executor-0", "acta-executor-1"]
    h.take_permit()
    loop = asyncio.get_running_loop()
    h.claimed.put_nowait(h.registry.add(job(1, "ok", '{"n": 2}'), loop.time() + 60))
    assert await asyncio.wait_for(executors.stop(5.0), 5) == 0
    assert all(t.done() and not t.cancelled() for t in executors.tasks)
    assert sorted(ended, key=id) == sorted(executors.tasks, key=id)
    c = h.completed.get_nowait()
    assert c is not None and c.outcome is Outcome.SUCCEEDED  # the entry in hand was finished
    assert await executors.stop(5.0) == 0 and h.claimed.empty()  # idempotent


async def test_executors_stop_cancels_a_loop_still_running_after_its_time() -> None:
    h = Harness()
    executors = Executors([h.executor], h.claimed)
    executors.start()
    h.take_permit()
    loop = asyncio.get_running_loop()
    entry = h.registry.add(job(1, "sleeps"), loop.time() + 60)
    h.claimed.put_nowait(entry)
    await until(lambda: entry.state is EntryState.EXECUTING)
    assert await asyncio.wait_for(executors.stop(0.0), 5) == 1
    await asyncio.wait(executors.tasks, timeout=5)
    c = h.completed.get_nowait()
    assert c is not None and c.outcome is Outcome.INTERRUPTED  # handed over, uncharged


# ------------------------------------------------------------- a sync handler past its timeout


class Overrun:
    """One ``overruns`` attempt on a fake clock, with the heartbeat (0.5 s beats, 2 s lease)
    renewing what the registry holds against a fake store that renews everything."""

    def __init__(self) -> None:
        global gate
        gate = Gate()
        self.clock = FakeClock()
        self.h = Harness(clock=self.clock)
        self.store = FakeStore()
        self.heartbeat = Heartbeat(self.store, self.h.registry, SHORT, self.clock)
        self.warnings: list[str] = []

    async def start(self) -> tuple[Entry, asyncio.Task[None]]:
        self.h.take_permit()
        entry = self.h.registry.add(job(1, "overruns"), self.clock.now() + SHORT.attempt_deadline)
        task = asyncio.create_task(self.h.executor.run_once(entry))
        await until(gate.entered.is_set, what="the handler's thread to start")
        return entry, task

    async def beat(self) -> list[tuple[int, int]]:
        """One beat, every held row renewed; the keys it held."""
        self.store.report = HeartbeatReport(
            renewed=frozenset(e.key for e in self.h.registry),
            busy=frozenset(),
            cancel_requested=frozenset(),
            definitions_version=1,
            recovery_due=False,
        )
        await self.heartbeat.run_once()
        return [(j, x) for j, x, _ in self.store.heartbeats[-1]]

    async def beats(self, seconds: float) -> list[list[tuple[int, int]]]:
        """Beat every 0.5 s for ``seconds``; what each beat held."""
        held = []
        for _ in range(round(seconds / 0.5)):
            self.clock.advance(0.5)
            held.append(await self.beat())
        return held

    async def time_out(self, entry: Entry) -> None:
        """The kind's 1 s timeout passes (one beat on the way): the alarm asks the attempt
        to stop."""
        assert await self.beats(0.5) == [[entry.key]]
        self.clock.advance(0.5)
        await until(lambda: entry.overrun_until is not None, what="the attempt to be told")

    def release(self) -> None:
        gate.release.set()


@pytest.fixture
def overrun() -> Iterator[Overrun]:
    o = Overrun()
    sink = logger.add(lambda m: o.warnings.append(str(m)), level="WARNING", format="{message}")
    logger.enable("acta_sqla")
    yield o
    logger.disable("acta_sqla")
    logger.remove(sink)
    o.release()
    o.h.pool.shutdown(wait=True)


async def test_a_sync_attempt_past_its_timeout_is_held_until_its_thread_returns(
    overrun: Overrun,
) -> None:
    entry, task = await overrun.start()
    await overrun.time_out(entry)
    # Asked to stop, not stopped: no completion (so no retry can be due), the permit still
    # taken, the row still held and renewed beat after beat while the thread runs.
    assert overrun.h.completed.empty() and overrun.h.permits.free == 3
    assert overrun.h.registry.get(entry.key) is entry and entry.state is EntryState.EXECUTING
    # Two seconds of beats: past the 1.25 s attempt deadline the stop found, too.
    assert await overrun.beats(2.0) == [[entry.key]] * 4
    assert entry.deadline == overrun.clock.now() + SHORT.attempt_deadline
    assert not task.done()
    assert any("job 1 (overruns)" in w and "should_stop" in w for w in overrun.warnings)

    overrun.release()
    await task
    c = overrun.h.completed.get_nowait()
    # Recorded as the timeout it was, charged and retried, with its true run time.
    assert c is not None and (c.outcome, c.status) == (Outcome.TIMEOUT, "ready")
    assert "execution timeout" in (c.error_message or "")
    assert c.ran_seconds == pytest.approx(3.0)
    assert overrun.h.permits.free == 4
    assert gate.saw_stop == [True]  # ctx.should_stop was raised for the handler to see


async def test_an_overrun_past_its_cap_lets_the_row_go_and_keeps_the_permit(
    overrun: Overrun,
) -> None:
    entry, task = await overrun.start()
    await overrun.time_out(entry)
    # Renewed for the kind's timeout plus one lease (3 s) after the stop, then let go.
    assert await overrun.beats(3.0) == [[entry.key]] * 5 + [[]]
    # Past the cap: the registry lets go, the heartbeat no longer renews the row (its lease
    # runs out and recovery takes it back), but the thread still holds its executor.
    assert overrun.h.registry.get(entry.key) is None
    assert overrun.h.permits.free == 3 and overrun.h.completed.empty()
    assert any("no longer renewed" in w and "job 1 (overruns)" in w for w in overrun.warnings)

    overrun.clock.advance(10.0)
    overrun.release()
    await task
    c = overrun.h.completed.get_nowait()
    # Still written (the database fences it out if the row was taken back meanwhile).
    assert c is not None and c.outcome is Outcome.TIMEOUT
    assert c.ran_seconds == pytest.approx(14.0)  # 1 + 3 + 10
    assert overrun.h.permits.free == 4


async def test_a_stopping_worker_leaves_an_overrunning_row_to_its_lease(
    overrun: Overrun,
) -> None:
    entry, task = await overrun.start()
    await overrun.time_out(entry)
    task.cancel()  # the loop is going down (the shutdown cancels stuck executors)
    with pytest.raises(asyncio.CancelledError):
        await task
    # No interrupted completion (due at once, it would let the job run again while this
    # thread runs on): the row is left to its lease, no longer renewed.
    assert overrun.h.completed.empty()
    assert overrun.h.permits.free == 4
    assert await overrun.beat() == []
    assert any("no completion is written" in w for w in overrun.warnings)


async def test_a_lost_row_of_an_overrunning_attempt_is_not_renewed_again(
    overrun: Overrun,
) -> None:
    entry, task = await overrun.start()
    await overrun.time_out(entry)
    overrun.clock.advance(0.5)
    overrun.store.report = HeartbeatReport(
        renewed=frozenset(),  # recovered or taken over
        busy=frozenset(),
        cancel_requested=frozenset(),
        definitions_version=1,
        recovery_due=False,
    )
    await overrun.heartbeat.run_once()
    assert overrun.store.heartbeats[-1] != []
    overrun.clock.advance(0.5)
    assert await overrun.beat() == []  # within the cap, but the row is no longer ours
    assert overrun.h.completed.empty()  # still waiting for the thread
    overrun.release()
    await task
    c = overrun.h.completed.get_nowait()
    assert c is not None and c.outcome is Outcome.TIMEOUT  # why it was asked to stop


async def test_a_sync_handler_that_returns_in_time_is_not_held(h: Harness) -> None:
    c = await h.run("sync_handler", '{"name": "y"}')
    assert c.outcome is Outcome.SUCCEEDED and h.registry.get((1, 1001)) is not None
    c = await h.run("async_stop_flag")
    assert c.result_json == "false"  # an async handler is cancelled instead
