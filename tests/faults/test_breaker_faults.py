"""A circuit breaker under faults: the worker running the half-open probe is SIGKILLed.
Real `acta worker` processes with short clocks (lease 2 s); the breaker must not stay
stuck half-open: the dead probe's place is freed when its lease runs out, another worker's
probe closes it, every job ends succeeded (tests/e2e/app_breaker.py is the app)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import Sql, Workers, insert_jobs, read_runs
from tests.waiting import wait_for

from . import oracle
from .conftest import make_workers

APP = "tests.e2e.app_breaker:acta"
NAMESPACE = "breaker"


@pytest.fixture
def start(faults_db: str, sql: Sql, runs_log: Path, tmp_path: Path) -> Iterator[Workers]:
    with make_workers(faults_db, sql, runs_log, tmp_path, app=APP) as workers:
        yield workers


def probe_of(sql: Sql) -> tuple[int, int, int] | None:
    """The half-open breaker's live probe: (job id, execution id, pid of its worker)."""
    rows = sql(
        "SELECT j.id, b.probe_executions[1], w.pid FROM acta.breaker b "
        "JOIN acta.job j ON j.id = b.probe_jobs[1] AND j.status = 'executing' "
        "JOIN acta.worker w ON w.id = j.worker_id "
        "WHERE b.kind = 'call_dependency' AND b.state = 'half_open'"
    )
    return (int(rows[0][0]), int(rows[0][1]), int(rows[0][2])) if rows else None


def hanging_probe(sql: Sql, runs_log: Path, hangs_from: float) -> tuple[int, float, int] | None:
    """The live probe that hangs: (job id, its handler's start, pid of its worker).

    Only this execution's lines count (the job's earlier attempts, from before the breaker
    opened, have start lines of their own). A probe that started before the hang was set
    may still fail on the down dependency (and the breaker opens again): it counts once
    it has started after ``hangs_from``, or has not ended a second after it."""
    found = probe_of(sql)
    if found is None:
        return None
    job, execution, pid = found
    lines = [r for r in read_runs(runs_log) if r.execution_id == execution]
    starts = [r.t for r in lines if r.event == "start"]
    if not starts or any(r.event != "start" for r in lines):
        return None
    if starts[0] > hangs_from or time.monotonic() > hangs_from + 1.0:
        return (job, starts[0], pid)
    return None


def test_sigkill_of_the_worker_running_the_probe_does_not_leave_the_breaker_stuck(
    sql: Sql, start: Workers, runs_log: Path, tmp_path: Path
) -> None:
    down, hangs = tmp_path / "down", tmp_path / "hangs"
    down.touch()
    env = {
        "ACTA_EXECUTORS": "2",
        "BREAKER_DEPENDENCY_DOWN": str(down),
        "BREAKER_DEPENDENCY_HANGS": str(hangs),
    }
    a, b = start.together(2, env=env)
    ids = insert_jobs(sql, NAMESPACE, "call_dependency", 12)
    wait_for(
        lambda: sql("SELECT state FROM acta.breaker") == [("open",)],
        timeout=60,
        what="the breaker to open",
    )
    # The dependency is back, but the next call (the probe) hangs.
    hangs_from = time.monotonic()
    hangs.touch()
    down.unlink()
    found = wait_for(
        lambda: hanging_probe(sql, runs_log, hangs_from), timeout=30, what="a hanging probe"
    )
    assert found is not None
    probe, probe_start, pid = found
    victim = a if a.pid == pid else b
    survivor = b if victim is a else a
    killed_at = victim.kill()
    hangs.unlink()

    wait_for(
        lambda: sql("SELECT count(*) FROM acta.job WHERE status = 'succeeded'") == [(12,)],
        timeout=90,
        what="every job to succeed after the probe's worker died",
    )
    assert sql("SELECT state, probe_jobs FROM acta.breaker") == [("closed", [])]
    assert survivor.alive()
    runs = read_runs(runs_log)
    # While the dead probe held the half-open breaker's one place (until its lease ran
    # out, 2 s after the kill at most), no other job of the kind started.
    held = [r.job_id for r in runs if r.event == "start" and probe_start < r.t < killed_at]
    assert held == [], f"jobs {held} started beside the probe"
    # After it: a new probe (the lease ran out), closing the breaker, then the rest.
    after = sorted((r.t, r.job_id) for r in runs if r.event == "start" and r.t > killed_at)
    assert after and after[0][0] < killed_at + 15.0
    report = oracle.check(sql, runs_log, jobs=ids, attempts=None, killed={victim.pid: killed_at})
    assert {report.final[j][0] for j in ids} == {"succeeded"}
