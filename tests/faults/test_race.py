"""Four workers racing over 5,000 jobs: each job terminal exactly once."""

from __future__ import annotations

from pathlib import Path

from tests.harness import Sql, Workers
from tests.waiting import wait_for

from . import oracle
from .conftest import all_terminal, enqueue


def test_four_workers_race_over_5000_jobs(sql: Sql, workers: Workers, runs_log: Path) -> None:
    ids = enqueue(sql, "quick", 5000)
    racing = [workers(ready=False) for _ in range(4)]
    wait_for(lambda: all_terminal(sql, len(ids)), 120, "5,000 jobs to finish")
    report = oracle.check(sql, runs_log, jobs=ids, attempts=1, max_starts=1)
    assert {s for s, *_ in report.final.values()} == {"succeeded"}
    shares = {pid: 0 for pid in (w.pid for w in racing)}
    for r in report.runs:
        if r.event == "start":
            shares[r.pid] += 1
    assert sum(shares.values()) == 5000
    assert sum(1 for n in shares.values() if n) >= 2, shares
    assert sql(
        "SELECT count(*), count(DISTINCT job_id) FROM acta.attempt WHERE outcome = 'succeeded'"
    ) == [(5000, 5000)]
    assert all(w.alive() for w in racing)
