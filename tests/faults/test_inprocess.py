"""Faults injected into a worker running in this process (the same ``Worker`` class that
`acta worker` runs), where a real process cannot be brought into the state under test:
claimed-but-unstarted rows at SIGTERM, completion writes that fail, and the real 180 s
lease (default heartbeat 45 s), checked by backdating in SQL instead of waiting."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from acta_sqla.database import asyncpg_dsn
from acta_sqla.errors import StoreUnavailable
from acta_sqla.settings import BATCH_MAX_COMPLETIONS, ActaSettings, load_settings
from acta_sqla.testing import drain
from acta_sqla.values import Completion
from acta_sqla.worker import Worker
from acta_sqla.worker.claimer import Claimer
from acta_sqla.worker.executor import Executor
from acta_sqla.worker.inflight import Entry, EntryState
from acta_sqla.worker.recovery import run_recovery
from tests.harness import RUNS_LOG_VAR, Sql, Workers, read_runs
from tests.waiting import until

from . import oracle
from .app import acta
from .conftest import NAMESPACE, enqueue


def settings(url: str, **overrides: Any) -> ActaSettings:
    return load_settings(database_url=url, namespace=NAMESPACE, **overrides)


async def started(worker: Worker, task: asyncio.Task[None]) -> None:
    def up() -> bool:
        if task.done():
            task.result()
            raise AssertionError("the worker stopped early")
        listener = getattr(worker, "listener", None)
        return listener is not None and listener.connected.is_set()

    await until(up, 30, "the worker to start")


@pytest.fixture
def log_runs(runs_log: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(RUNS_LOG_VAR, str(runs_log))
    return runs_log


async def test_sigterm_hands_claimed_but_unstarted_rows_back_uncharged_at_once(
    faults_db: str, sql: Sql, log_runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state a real process cannot be forced into (test_processes.py says why): rows
    claimed and waiting in the Claimed channel when the stop comes. The executors are kept
    from taking them and the claimer from claiming; the test makes the claim exactly as the
    claimer does (one claim_jobs call, entries registered and queued); then the worker's
    own shutdown must hand them back: 'ready', due now, the attempt given back, no
    Execution row, a NOTIFY so that another worker takes them at once."""

    worker_box: list[Worker] = []
    entries: list[Entry] = []
    executor_run = Executor.run

    async def claimer_that_waits(self: Claimer) -> None:
        await self._stop.wait()

    async def executor_after_the_stop(self: Executor) -> None:
        # Take nothing until the stop has begun and no queued entry is still Claimed (the
        # shutdown's hand-back moves them on), then run as usual (ending on its None).
        await until(
            lambda: (
                worker_box[0].claimer.stopping
                and all(e.state is not EntryState.CLAIMED for e in entries)
            ),
            timeout=120,
            what="the stop and the hand-back of the claimed entries",
        )
        await executor_run(self)

    monkeypatch.setattr(Claimer, "run", claimer_that_waits)
    monkeypatch.setattr(Executor, "run", executor_after_the_stop)
    ids = enqueue(sql, "quick", 5)
    worker = Worker(acta, settings(faults_db, executors=3, heartbeat_interval=0.5), grace=30)
    worker_box.append(worker)
    task = asyncio.create_task(worker.run())
    await started(worker, task)
    assert worker.store is not None

    jobs = await worker.store.claim_jobs(3)
    assert len(jobs) == 3
    deadline = asyncio.get_running_loop().time() + worker.timings.attempt_deadline
    for job in jobs:
        entries.append(worker.registry.add(job, deadline))
        worker.claimed.put_nowait(entries[-1])
    claimed = [j.id for j in jobs]
    assert sql("SELECT DISTINCT status, attempts FROM acta.job WHERE id = ANY(%s)", claimed) == [
        ("executing", 1)
    ]

    notified: list[str] = []
    listen = await asyncpg.connect(asyncpg_dsn(faults_db))
    try:
        await listen.add_listener(f"acta.{NAMESPACE}", lambda *a: notified.append(a[2]))
        began = time.monotonic()
        worker.request_stop()  # what the first SIGTERM does
        await asyncio.wait_for(task, 30)
        took = time.monotonic() - began
        await until(lambda: notified, 5, "the hand-back's NOTIFY")
    finally:
        await listen.close()

    assert took < 5, f"the hand-back waited {took:.1f}s (the grace is 30 s): not at once"
    rows = sql(
        "SELECT status, attempts, run_at <= now(), worker_id, lease_expires_at "
        "FROM acta.job WHERE id = ANY(%s)",
        claimed,
    )
    assert rows == [("ready", 0, True, None, None)] * 3
    assert sql("SELECT count(*) FROM acta.attempt") == [(0,)]
    assert read_runs(log_runs) == []
    assert sql("SELECT status FROM acta.worker") == [("stopped",)]
    returns = [c for c in oracle.read_changes(sql) if c.old == "executing"]
    assert sorted((c.job_id, c.new, c.attempts, c.lease_expired) for c in returns) == [
        (j, "ready", 0, False) for j in sorted(claimed)
    ]

    # Handed back rows are ordinary ready rows: the next worker runs them, charged once.
    monkeypatch.undo()
    monkeypatch.setenv(RUNS_LOG_VAR, str(log_runs))
    await drain(acta, settings=settings(faults_db, heartbeat_interval=0.5))
    oracle.check(sql, log_runs, jobs=ids, attempts=1, max_starts=1)


async def test_failing_completion_writes_are_retried_never_dropped_and_pause_claiming(
    faults_db: str, sql: Sql, log_runs: Path
) -> None:
    """The first N=2 complete_executions calls fail. With a 2 s lease, the ~3 s of failed
    writes (1 s then 2 s between tries, ±25 %) outlast the lease: the heartbeat must keep
    renewing the Finalizing rows. Meanwhile the Completed channel (128 + N) fills, the
    executors block on it holding their permits, and claiming stops. Then every completion
    lands, once."""
    executors = 2
    worker = Worker(acta, settings(faults_db, executors=executors, heartbeat_interval=0.5))
    task = asyncio.create_task(worker.run())
    await started(worker, task)
    store = worker.store
    assert store is not None
    real: Callable[[Sequence[Completion]], Awaitable[set[int]]] = store.complete_executions
    tries: list[tuple[float, tuple[int, ...], bool]] = []

    async def failing_twice(batch: Sequence[Completion]) -> set[int]:
        failed = sum(1 for *_, ok in tries if not ok)
        if failed < 2:
            tries.append((time.monotonic(), tuple(c.job_id for c in batch), False))
            raise StoreUnavailable("complete: injected failure")
        applied = await real(batch)
        tries.append((time.monotonic(), tuple(c.job_id for c in batch), True))
        return applied

    store.complete_executions = failing_twice  # type: ignore[method-assign]
    total = 400
    ids = enqueue(sql, "quick", total)
    try:
        await until(lambda: tries and worker.completed.full(), 15, "the Completed channel to fill")
        # The completion that filled the channel freed a permit, so one last claim may be in
        # flight: let it land and its rows reach the executors, which then block on the
        # full channel holding every permit. From here on, nothing may be claimed.
        await until(
            lambda: (
                worker.permits.free == 0
                and not store.claim_conn._busy.locked()
                and all(e.state is EntryState.FINALIZING for e in worker.registry)
            ),
            10,
            "every executor to block on the full channel",
        )
        claimed = worker.claimer.claimed_rows
        executing = sql("SELECT count(*) FROM acta.job WHERE status = 'executing'")[0][0]
        first_batch = len(tries[0][1])
        # Held: the batch being retried, a full channel, one completion in each executor.
        bound = first_batch + BATCH_MAX_COMPLETIONS + executors + executors
        assert claimed == executing <= bound < total, (claimed, executing, bound)
        await until(lambda: len(tries) >= 2, 5, "the second (failing) try")
        assert worker.claimer.claimed_rows == claimed, "claiming went on while writes failed"
        await until(lambda: any(ok for *_, ok in tries), 10, "a write to land")
        # Outlasting the lease changed nothing: renewals kept every held row.
        assert tries[-1][0] - tries[0][0] > worker.timings.lease
        assert tries[0][1] == tries[1][1] == tries[2][1], "the same batch is retried"
        # Repeats back off 1 s, then 2 s, each ±25 % (a little slack for scheduling).
        gaps = [tries[1][0] - tries[0][0], tries[2][0] - tries[1][0]]
        assert 0.75 <= gaps[0] <= 1.25 + 0.2 and 1.5 <= gaps[1] <= 2.5 + 0.2, gaps
        await until(
            lambda: sql("SELECT count(*) FROM acta.job WHERE status = 'succeeded'")[0][0] == total,
            30,
            "every job to succeed",
        )
    finally:
        worker.request_stop()
        await asyncio.wait_for(task, 30)
    report = oracle.check(sql, log_runs, jobs=ids, attempts=1, max_starts=1)
    assert not any(c.lease_expired for c in report.changes), "a held row's lease ran out"
    assert sql("SELECT count(*), count(DISTINCT job_id) FROM acta.attempt") == [(total, total)]


async def test_the_real_180s_lease_verified_by_backdating(
    faults_db: str, sql: Sql, workers: Workers, log_runs: Path
) -> None:
    """The default clock (heartbeat 45 s): lease 180 s, attempt deadline 112.5 s, recovery
    every 180 s, worker dead after 315 s. Nothing waits for them: the test reads them back
    and backdates ``lease_expires_at``, ``recovery_due_at`` and ``heartbeat_at``."""
    a = workers(env={"ACTA_HEARTBEAT_INTERVAL": "45"})
    [job] = enqueue(sql, "slow_in", args=json.dumps({"pid": a.pid, "slow": 600}))
    await until(lambda: read_runs(log_runs), 30, "A's handler to start")
    [(lease, started_at)] = sql(
        "SELECT extract(epoch FROM lease_expires_at - claimed_at)::float8, started_at "
        "FROM acta.job WHERE id = %s",
        job,
    )
    assert lease == 180.0
    assert started_at is None, "no renewal within the first 45 s: not known to have started"
    killed_at = a.kill()
    # A's row: silent for 300 s is not yet dead (315 s is).
    sql("UPDATE acta.worker SET heartbeat_at = now() - interval '300 s' WHERE pid = %s", a.pid)

    b = Worker(acta, settings(faults_db, executors=2), grace=0.5)
    assert b.timings.heartbeat == 45.0
    task = asyncio.create_task(b.run())
    try:
        await started(b, task)
        assert b.store is not None
        # A pass now changes nothing: the lease (180 s) has not run out, A is not dead.
        result = await run_recovery(b.store)
        assert (result.recovered, result.dead_workers) == (0, 0)
        assert sql("SELECT status FROM acta.job WHERE id = %s", job) == [("executing",)]
        assert sql("SELECT status FROM acta.worker WHERE pid = %s", a.pid) == [("running",)]

        # Backdate: the lease ran out a moment ago, A went silent 316 s ago, and the
        # namespace's pass is due. B's next beat (called now instead of in 45 s) takes it.
        sql("UPDATE acta.job SET lease_expires_at = now() - interval '1 ms' WHERE id = %s", job)
        sql("UPDATE acta.worker SET heartbeat_at = now() - interval '316 s' WHERE pid = %s", a.pid)
        sql("UPDATE acta.namespace SET recovery_due_at = now() - interval '1 s'")
        report = await b.heartbeat.run_once()
        assert report is not None and report.recovery_due
        [(due_in,)] = sql(
            "SELECT extract(epoch FROM recovery_due_at - now())::float8 FROM acta.namespace"
        )
        assert 175 < due_in <= 180, "the pass moved the next one a lease (180 s) on"
        # The pass returns the row (uncharged: never known to start); B claims and runs it.
        await until(
            lambda: sql("SELECT status FROM acta.job WHERE id = %s", job) == [("succeeded",)],
            15,
            "B to recover and run the job",
        )
        assert sql("SELECT status FROM acta.worker WHERE pid = %s", a.pid) == [("dead",)]

        # B's own claim of a long job: its lease is 180 s; a renewal marks it started,
        # moves the lease 180 s on, and re-arms the deadline 112.5 s from the renewal.
        [long_job] = enqueue(sql, "slow_in", args=json.dumps({"pid": os.getpid(), "slow": 600}))
        await until(
            lambda: [r for r in read_runs(log_runs) if r.job_id == long_job],
            15,
            "B's handler to start",
        )
        [(lease,)] = sql(
            "SELECT extract(epoch FROM lease_expires_at - claimed_at)::float8 FROM acta.job "
            "WHERE id = %s",
            long_job,
        )
        assert lease == 180.0
        beat_at = asyncio.get_running_loop().time()
        report = await b.heartbeat.run_once()
        assert report is not None
        [(left, known_started)] = sql(
            "SELECT extract(epoch FROM lease_expires_at - now())::float8, started_at IS NOT NULL "
            "FROM acta.job WHERE id = %s",
            long_job,
        )
        assert 178 < left <= 180 and known_started
        [entry] = [e for e in b.registry if e.job.id == long_job]
        assert 112.5 <= entry.deadline - beat_at < 113.5
    finally:
        b.request_stop()
        await asyncio.wait_for(task, 30)

    # The stop interrupted B's long attempt: back to ready, uncharged.
    assert sql("SELECT status, attempts FROM acta.job WHERE id = %s", long_job) == [("ready", 0)]
    oracle_jobs = [job]
    report = oracle.check(sql, log_runs, jobs=oracle_jobs, attempts=1, killed={a.pid: killed_at})
    assert report.final[job][2]["pid"] == os.getpid()
    assert sql(
        "SELECT attempt, outcome, started_at IS NULL FROM acta.attempt WHERE job_id = %s "
        "ORDER BY id",
        job,
    ) == [(1, "lost", True), (1, "succeeded", False)]


@pytest.mark.parametrize("answer", ["renewed", "not renewed"])
async def test_a_renewal_answered_as_the_attempt_deadline_fires_keeps_the_worker_alive(
    answer: str, faults_db: str, sql: Sql, log_runs: Path
) -> None:
    """Seen with real processes: the SIGSTOP test, under CPU load, lost its stopped worker
    ("acta-heartbeat ended unexpectedly (Cannot change state of expiring Timeout); stopping
    the worker"). The race: the heartbeat's reply is queued, then the loop stalls (SIGSTOP,
    a GC pause, a CPU-bound handler holding the GIL) past the attempt deadline; on the next
    loop iteration the deadline's timer sets the Timeout EXPIRING and the heartbeat, woken
    first, re-arms it (Registry.rearm) or, had the row not been renewed, cancels it
    (Registry.fire): both reschedule a Timeout that is no longer ENTERED. Made deterministic
    here: the renewal's answer is released by a timer 20 ms before the deadline, and the loop
    is stalled (the injected fault) across both. Beats start on a fixed schedule and one
    unanswered when the next is due is abandoned, so the answer that arrives at the deadline
    is that of the beat after a failed one (started half an interval before the deadline)."""
    worker = Worker(acta, settings(faults_db, executors=1, heartbeat_interval=0.5))
    task = asyncio.create_task(worker.run())
    await started(worker, task)
    assert worker.store is not None
    [job] = enqueue(sql, "slow_in", args=json.dumps({"pid": os.getpid(), "slow": 60}))
    await until(lambda: read_runs(log_runs), 10, "the handler to start")
    [entry] = list(worker.registry)
    real = worker.store.heartbeat
    staged: list[float] = []

    failed: list[bool] = []

    async def answered_at_the_deadline(*args: Any) -> Any:
        if not failed:
            failed.append(True)  # the deadline stays where the last confirmed beat put it
            raise StoreUnavailable("heartbeat: injected failure")
        report = await real(*args)
        if staged or entry.key not in report.renewed:
            return report
        loop = asyncio.get_running_loop()
        deadline = entry.deadline
        staged.append(deadline)
        release: asyncio.Future[None] = loop.create_future()
        loop.call_at(deadline - 0.03, time.sleep, 0.06)  # the stall (the injected fault)
        loop.call_at(deadline - 0.02, release.set_result, None)
        await release
        if answer == "not renewed":  # as if another worker had taken the row meanwhile
            return dataclasses.replace(report, renewed=report.renewed - {entry.key})
        return report

    worker.store.heartbeat = answered_at_the_deadline  # type: ignore[method-assign]
    try:
        await until(lambda: staged, 5, "a renewal to be held back to the deadline")
        # The attempt's deadline fired: the handler is cancelled (its row is still this
        # worker's, so the attempt is written as failed and retried). The worker lives on.
        await until(
            lambda: [r for r in read_runs(log_runs) if r.event == "cancel"],
            5,
            "the handler to be cancelled at its deadline",
        )
        beat = sql("SELECT heartbeat_at FROM acta.worker WHERE id = %s", worker.worker_id)
        await until(
            lambda: (
                task.done()
                or sql("SELECT heartbeat_at FROM acta.worker WHERE id = %s", worker.worker_id)
                != beat
            ),
            5,
            "the next heartbeat",
        )
    finally:
        worker.request_stop()
        await asyncio.wait({task}, timeout=30)
    assert not worker.crashed, "a worker stage died: the worker stopped itself"
    assert task.exception() is None, f"the worker's shutdown raised {task.exception()!r}"
    # Cancelled at its deadline while the row was still this worker's: written as a failed
    # attempt and retried under the budget (the retry is not run here).
    assert sql("SELECT status, attempts FROM acta.job WHERE id = %s", job) == [("ready", 1)]
    assert sql("SELECT outcome, error_type FROM acta.attempt WHERE job_id = %s", job) == [
        ("failed", "acta.lease_lost")
    ]
