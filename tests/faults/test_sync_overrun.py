"""A sync handler that runs past its timeout (issue 10 item 3).

A thread cannot be killed. The worker used to write the attempt's timeout at once and give
its permit back while the thread still ran: the retry (due after the back-off) started in
the same worker while the first run went on, two runs of one job at once (I4). Now the
attempt is asked to stop (``ctx.should_stop``) and its completion, lease and executor wait
for the thread to return, then it is recorded as a timeout with its true run time.

A real `acta worker` process, heartbeat 0.5 s (lease 2 s).
"""

from __future__ import annotations

from pathlib import Path

from . import oracle
from .conftest import Sql, WorkerFactory, all_terminal, enqueue, wait_for

APP = ("--app", "tests.faults.app_sync:acta")
SLEEP = 3.0
"""The first attempt's run: three times its 1 s timeout, past one lease of 2 s."""


def ended(runs_log: Path, job: int) -> list[oracle.Run]:
    """The job's runs once every start has its end (else [])."""
    runs = [r for r in oracle.read_runs(runs_log) if r.job_id == job]
    events = [r.event for r in runs]
    return runs if events.count("start") == events.count("end") else []


def overlapping(runs: list[oracle.Run]) -> list[tuple[int, int]]:
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
    sql: Sql, workers: WorkerFactory, runs_log: Path
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
        "FROM acta.execution WHERE job_id = %s ORDER BY id",
        job,
    )
    assert [(a, o) for a, o, _ in history] == [(1, "timeout"), (2, "succeeded")], history
    # Attempt 1 was written when its thread returned, not at its timeout.
    assert history[0][2] >= SLEEP - 0.1, history
    out = worker.output()
    assert "overruns" in out and f"job {job}" in out and "should_stop" in out, out
