"""A database crash must not let two handlers of one job run at once (I4).

History: claims once committed with ``synchronous_commit=off``. After a crash (``pg_ctl
restart -m immediate``, a backend killed by the OOM killer, a failover) a claim whose
handler already ran could be gone, the row 'ready' again, and another worker ran the job
while the first handler still ran (18-48 of 3,000 jobs per ``-m immediate`` restart); the
execution-id sequence even rolled back and handed the lost claim's fencing token out again.
Claims now commit durably before any handler starts, and the token carries the server's
start time.

Reproduction on a private cluster, deterministic: a CHECKPOINT (so the sequence's page on
disk predates the claim), ``wal_writer_delay = 10s`` (an asynchronous commit would not be
written out for a while), worker A (default clock: no renewal during the test) claims the
job and starts its handler, ``pg_ctl restart -m immediate``, worker B starts. The claim must
have survived, B must never run the job, and A's completion must land after the restart.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from acta_sqla import migrate
from tests.harness import SqlRunner, read_runs
from tests.waiting import wait_for

from . import oracle
from .cluster import PrivateCluster
from .conftest import all_terminal, enqueue, make_workers, running_cluster


@pytest.fixture
def crash_cluster() -> Iterator[PrivateCluster]:
    # A cluster of its own: the test changes server settings (wal_writer_delay).
    with running_cluster() as cluster:
        yield cluster


def test_a_claim_lost_in_a_crash_never_lets_two_handlers_run_one_job_at_once(
    crash_cluster: PrivateCluster, runs_log: Path, tmp_path: Path
) -> None:
    url = crash_cluster.create_database("acta_crash")
    migrate.upgrade(url)
    oracle.install(url)
    sql = SqlRunner(url, reconnect=True)
    start = make_workers(url, sql, runs_log, tmp_path)
    try:
        sql("ALTER SYSTEM SET wal_writer_delay = '10s'")
        sql("SELECT pg_reload_conf()")
        # A runs the default clock: no renewal (a durable commit) within the test.
        a = start("--executors", "1", env={"ACTA_HEARTBEAT_INTERVAL": "45"})
        # Use the sequence a while first (the id reuse did not hinge on its first value).
        earlier = enqueue(sql, "quick", 45)
        wait_for(lambda: all_terminal(sql, len(earlier)), 30, "the earlier jobs")
        sql("CHECKPOINT")
        [(job,)] = sql(
            "INSERT INTO acta.job (namespace, kind, args) VALUES ('faults', 'slow_in', %s) "
            "RETURNING id",
            json.dumps({"pid": a.pid, "slow": 4, "fast": 4}),
        )
        [a_run] = wait_for(  # type: ignore[misc]
            lambda: [r for r in read_runs(runs_log) if r.job_id == job],
            10,
            "A's handler to start",
        )
        crash_cluster.restart("immediate")
        # The claim committed durably before A's handler started: it survives the crash.
        assert sql("SELECT status, execution_id FROM acta.job WHERE id = %s", job) == [
            ("executing", a_run.execution_id)
        ]
        b = start("--executors", "1")
        wait_for(
            lambda: sql("SELECT 1 FROM acta.job WHERE id = %s AND status = 'succeeded'", job),
            60,
            "the job to finish",
        )
        runs = [r for r in read_runs(runs_log) if r.job_id == job]
        assert [r.pid for r in runs if r.event == "start"] == [a.pid], "only A ran the job"
        assert not [r for r in read_runs(runs_log) if r.pid == b.pid and r.job_id == job]
        [(result,)] = sql("SELECT result FROM acta.job WHERE id = %s", job)
        assert result["pid"] == a.pid, "A's completion landed after the restart"
        oracle.check(sql, runs_log, attempts=1, max_starts=1)
    finally:
        start.kill_all()
        sql.close()
