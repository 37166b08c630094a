"""A sync handler that runs past its timeout (issue 10 item 3).

A thread cannot be killed. The worker used to write the attempt's timeout at once and give
its permit back while the thread still ran: the retry (due after the back-off) started in
the same worker while the first run went on, two runs of one job at once (I4). Now the
attempt is asked to stop (``ctx.should_stop``) and its completion, lease and executor wait
for the thread to return, then it is recorded as a timeout with its true run time.

A real `acta worker` process, heartbeat 0.5 s (lease 2 s).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.harness import Run, Sql, Workers, read_runs
from tests.waiting import wait_for

from . import oracle
from .conftest import all_terminal, enqueue

APP = ("--app", "tests.faults.app_sync:acta")
SLEEP = 3.0
"""The first attempt's run: three times its 1 s timeout, past one lease of 2 s."""


def ended(runs_log: Path, job: int) -> list[Run]:
    """The job's runs once every start has its end (else [])."""
    runs = [r for r in read_runs(runs_log) if r.job_id == job]
    events = [r.event for r in runs]
    return runs if events.count("start") == events.count("end") else []


def overlapping(runs: list[Run]) -> list[tuple[int, int]]:
    """Pairs of executions whose runs overlapped in time, from the handlers' own log."""
    spans: dict[int, list[float]] = {}
    for r in runs:
        spans.setdefault(r.execution_id, []).append(r.t)
    intervals = sorted((min(ts), max(ts), x) for x, ts in spans.items())
    return [
        (x1, x2)
        for i, (_s1, e1, x1) in enumerate(intervals)
        for s2, _e2, x2 in intervals[i + 1 :]
        if s2 < e1
    ]


def test_a_sync_handler_past_its_timeout_never_overlaps_its_retry(
    sql: Sql, workers: Workers, runs_log: Path
) -> None:
    worker = workers(*APP)
    [job] = enqueue(sql, "overruns", args=f'{{"seconds": {SLEEP}}}')

    wait_for(lambda: all_terminal(sql, 1), 60, "the job to end")
    runs = wait_for(lambda: ended(runs_log, job), 30, "every run of the job to end")
    first = [r for r in runs if r.attempt == 1]
    assert [r.event for r in first] == ["start", "end"], runs
    assert first[1].t - first[0].t >= SLEEP - 0.01  # the thread really ran on
    assert overlapping(runs) == [], runs
    report = oracle.check(sql, runs_log, jobs=[job], attempts=2, max_starts=2)
    assert report.overlaps == []
    status, attempts, result = report.final[job]
    assert (status, attempts, result["pid"]) == ("succeeded", 2, worker.pid)
    history = sql(
        "SELECT attempt, outcome, extract(epoch FROM finished_at - claimed_at)::float8 "
        "FROM acta.attempt WHERE job_id = %s ORDER BY id",
        job,
    )
    assert [(a, o) for a, o, _ in history] == [(1, "timeout"), (2, "succeeded")], history
    # Attempt 1 was written when its thread returned, not at its timeout.
    assert history[0][2] >= SLEEP - 0.1, history
    out = worker.output()
    assert "overruns" in out and f"job {job}" in out and "should_stop" in out, out


def test_a_thread_that_never_returns_lets_its_job_go_after_the_cap(
    sql: Sql, workers: Workers, runs_log: Path
) -> None:
    """Bounded: the row is renewed for the kind's timeout plus one lease after the stop
    (1 + 2 s), then let go; recovery takes it back once its lease ran out, and the retry
    runs (here, in the same worker) while the stuck thread runs on: I4 as written."""
    worker = workers(*APP)
    [job] = enqueue(sql, "overruns", args='{"seconds": 3600}')

    wait_for(lambda: all_terminal(sql, 1), 60, "the job to be let go and run again")
    runs = [r for r in read_runs(runs_log) if r.job_id == job]
    first, second = (r for r in runs if r.event == "start")
    assert (first.attempt, second.attempt, first.pid, second.pid) == (1, 2, worker.pid, worker.pid)
    # Stop at 1 s, renewed 3 s more, then the 2 s lease: not before 1 + 3 + 2 s.
    assert second.t - first.t >= 1.0 + 3.0, runs
    changes = oracle.read_changes(sql)
    [left] = [c for c in changes if c.old == "executing" and c.execution_id == first.execution_id]
    [claim] = [c for c in changes if c.is_claim and c.execution_id == second.execution_id]
    assert left.lease_expired and left.seq < claim.seq  # taken back only once the lease ran out
    [(status, attempts)] = sql("SELECT status, attempts FROM acta.job WHERE id = %s", job)
    assert (status, attempts) == ("succeeded", 2)
    out = worker.output()
    assert "no longer renewed" in out and f"job {job} (overruns)" in out, out


def test_a_worker_stops_past_a_sync_handler_that_never_returns(
    sql: Sql, workers: Workers, runs_log: Path
) -> None:
    """One SIGTERM ends the worker within its grace plus the forced-stop wait, past a sync
    handler (30 s timeout) that ignores the request to stop. No completion is written for
    the running thread (an uncharged one, due at once, would let the job run again while
    the thread runs on): the row comes back through recovery once its lease runs out."""
    # A short forced-stop wait (ACTA_FORCED_STOP_WAIT; 10 s by default): the worker must
    # exit past the thread whatever its length.
    stopping = workers(*APP, "--grace", "1", env={"ACTA_FORCED_STOP_WAIT": "2"})
    [job] = enqueue(sql, "hangs", args='{"seconds": 3600}')
    wait_for(lambda: read_runs(runs_log), 30, "the handler to start")
    signalled = time.monotonic()
    stopping.signal(signal.SIGTERM)
    assert stopping.wait(40) == 0, stopping.output()
    gone = time.monotonic()
    # The grace (1 s), the forced-stop wait (2 s), then past the stuck executor (1 s).
    assert gone - signalled < 1 + 2 + 1 + 5, stopping.output()
    assert gone - signalled >= 1 + 2, stopping.output()  # the setting held, not less
    out = stopping.output()
    assert "the worker is stopping" in out and "no completion is written" in out, out
    assert f"job {job} (hangs)" in out, out
    assert "waiting up to 2s for them to end (the forced-stop wait" in out, out

    rescuer = workers(*APP)
    wait_for(lambda: all_terminal(sql, 1), 60, "the job to be recovered and run")
    report = oracle.check(sql, runs_log, jobs=[job], attempts=2, killed={stopping.pid: gone})
    assert report.overlaps == []
    assert report.final[job][0] == "succeeded" and report.final[job][2]["pid"] == rescuer.pid
