"""Executors: every way a handler can end becomes a completion, and the permit comes back
only after the hand-off."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from acta_sqla import Acta, Cancel, Context, Fail, Retry
from acta_sqla.policy import Policy
from acta_sqla.settings import Timings
from acta_sqla.values import Completion, Outcome
from acta_sqla.worker.clock import Clock
from acta_sqla.worker.executor import Executor, Executors
from acta_sqla.worker.inflight import Entry, EntryState, Permits, Registry

from .fakes import job, until

TIMINGS = Timings.from_heartbeat(45.0)

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


class Harness:
    def __init__(self, completed_size: int = 16) -> None:
        self.registry = Registry()
        self.permits = Permits(4)
        self.claimed: asyncio.Queue[Entry | None] = asyncio.Queue(maxsize=4)
        self.completed: asyncio.Queue[Completion | None] = asyncio.Queue(maxsize=completed_size)
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="acta-sync")
        self.executor = Executor(
            acta.handlers,
            lambda kind: acta.handlers[kind].policy if kind in acta.handlers else Policy(),
            self.registry,
            self.permits,
            self.claimed,
            self.completed,
            "unit",
            safety_poll=1.0,
            pool=self.pool,
            clock=Clock(),
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
    assert (c.status, c.outcome) == ("ready", Outcome.ERROR)
    assert 1.5 <= c.delay <= 2.5  # backoff_base 2 s, ±25 %
    assert c.error_type == "ValueError" and c.error_message == "no luck"
    assert "ValueError: no luck" in (c.traceback or "")
    c = await h.run("boom", attempts=2)
    assert c.status == "ready" and 3.0 <= c.delay <= 5.0
    c = await h.run("boom", attempts=3)
    assert c.status == "failed"
    assert "failure budget spent" in (c.error_message or "")


async def test_per_job_max_attempts_wins_over_the_policy(h: Harness) -> None:
    c = await h.run("boom", attempts=1, max_attempts=1)
    assert c.status == "failed"


async def test_retry_fail_and_cancel(h: Harness) -> None:
    c = await h.run("retry_later")
    assert (c.status, c.outcome, c.delay) == ("ready", Outcome.RETRY, 42.0)
    c = await h.run("retry_later", attempts=3)
    assert c.status == "failed"  # a Retry is charged like any attempt
    c = await h.run("give_up")
    assert (c.status, c.outcome) == ("failed", Outcome.FAIL_NOW)
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
    assert c.outcome is Outcome.ERROR
    assert "not JSON-serializable" in (c.error_message or "")


async def test_cancelled_error_and_system_exit_from_a_handler_are_failures(h: Harness) -> None:
    c = await h.run("self_cancel")
    assert c.outcome is Outcome.ERROR and c.error_type == "asyncio.exceptions.CancelledError"
    c = await h.run("exits")
    assert c.outcome is Outcome.ERROR and c.error_type == "SystemExit"


async def test_sync_handlers_run_in_the_thread_pool(h: Harness) -> None:
    c = await h.run("sync_handler", '{"name": "x"}')
    assert c.outcome is Outcome.SUCCEEDED
    assert '"x from acta-sync' in (c.result_json or "")


async def test_args_that_no_longer_fit_fail_without_retry(h: Harness) -> None:
    c = await h.run("ok", '{"n": "not a number"}')
    assert (c.status, c.outcome) == ("failed", Outcome.FAIL_NOW)
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
