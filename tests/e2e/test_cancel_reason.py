"""Who cancelled a job and why (issue 32): `acta jobs cancel --reason` on a job a real
worker is running and on a ready one; the record survives the worker's completion."""

from __future__ import annotations

import getpass
import json
import signal

from tests.harness import insert_jobs, read_runs
from tests.waiting import wait_for

from .test_worker import run_acta


def test_the_reason_and_the_os_user_stay_with_the_job_past_its_workers_completion(
    db, sql, start_worker, runs_log
) -> None:  # type: ignore[no-untyped-def]
    [running] = insert_jobs(sql, "e2e", "sleepy", 1, '{"seconds": 60}')
    [ready] = insert_jobs(sql, "e2e", "work", 1, "{}", run_at="2999-01-01T00:00:00Z")
    w = start_worker(env={"ACTA_HEARTBEAT_INTERVAL": "0.5"})
    wait_for(lambda: read_runs(runs_log), what="the handler to start")
    done = run_acta(db, "jobs", "cancel", str(running), "--reason", "duplicate order #77")
    assert done.returncode == 0, done.stderr
    wait_for(
        lambda: sql("SELECT status FROM acta.job WHERE id = %s", running) == [("cancelled",)],
        timeout=10,
        what="the heartbeat to cancel the handler",
    )
    [(error,)] = sql("SELECT last_error FROM acta.job WHERE id = %s", running)
    error = error if isinstance(error, dict) else json.loads(error)
    assert error["type"] == "acta.cancelled"  # the worker's own record of the stop
    assert error["cancel"]["reason"] == "duplicate order #77"
    assert error["cancel"]["by"] == f"{getpass.getuser()} (cli)"
    assert error["cancel"]["at"]

    assert run_acta(db, "jobs", "cancel", str(ready), "--reason", "not needed").returncode == 0
    [(by, reason)] = sql(
        "SELECT last_error->'cancel'->>'by', last_error->'cancel'->>'reason' "
        "FROM acta.job WHERE id = %s",
        ready,
    )
    assert (by, reason) == (f"{getpass.getuser()} (cli)", "not needed")

    # A retry is a fresh start: the cancel's record belonged to the run it ended.
    assert run_acta(db, "jobs", "retry", str(ready)).returncode == 0
    assert sql("SELECT last_error->'cancel' FROM acta.job WHERE id = %s", ready) == [(None,)]

    refused = run_acta(db, "jobs", "cancel", str(ready), "--reason", "x" * 1001)
    assert refused.returncode != 0
    assert "--reason is 1,001 characters long; at most 1,000" in refused.stderr
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
