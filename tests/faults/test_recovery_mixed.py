"""Recovery runs on time when the namespace mixes heartbeat settings (issue 10, item 6).

The namespace's next recovery pass used to be moved on by the interval of whichever worker
took the last pass: after a 45 s worker (recovery every 180 s), 0.5 s workers (2 s leases)
waited up to 180 s to recover a crashed peer's rows. Must hold: recovery of an expired
lease starts within one lease of its expiry, whatever mix of settings runs. Now the pass
moves on by the shortest interval among the namespace's running workers, and a
registering worker pulls a later pass in to its own interval.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness import Sql, Workers, read_runs
from tests.waiting import wait_for

from . import oracle
from .conftest import NAMESPACE, enqueue

SHORT_LEASE = 2.0  # ACTA_HEARTBEAT_INTERVAL=0.5: four beats


def started(runs_log: Path, job: int, pid: int) -> bool:
    return any(r.job_id == job and r.pid == pid and r.event == "start" for r in read_runs(runs_log))


def test_a_short_lease_is_recovered_within_a_lease_after_a_long_worker_took_the_pass(
    sql: Sql, workers: Workers, runs_log: Path
) -> None:
    long = workers("--executors", "1", env={"ACTA_HEARTBEAT_INTERVAL": "45"})
    # Keep the 45 s worker's one executor busy, so that the job under test runs in A.
    [busy] = enqueue(sql, "slow_in", args=json.dumps({"pid": long.pid, "slow": 120}))
    wait_for(lambda: started(runs_log, busy, long.pid), what="the 45 s worker to be busy")
    # What the 45 s worker's pass does when it runs alone: the next one in 180 s.
    sql(
        "UPDATE acta.namespace SET recovery_due_at = now() + interval '180 seconds' "
        "WHERE name = %s",
        NAMESPACE,
    )
    a = workers()
    [(due_in,)] = sql(
        "SELECT extract(epoch FROM recovery_due_at - now())::float8 FROM acta.namespace "
        "WHERE name = %s",
        NAMESPACE,
    )
    assert due_in <= SHORT_LEASE, "a registering 0.5 s worker pulls the pass in to its lease"

    [job] = enqueue(sql, "slow_in", args=json.dumps({"pid": a.pid, "slow": 60}))
    wait_for(lambda: started(runs_log, job, a.pid), what="the handler to start in worker A")
    b = workers()
    a.kill()
    [(killed_at,)] = sql("SELECT now()")
    wait_for(
        lambda: sql("SELECT status FROM acta.job WHERE id = %s", job) == [("succeeded",)],
        timeout=30,
        what="the killed worker's row to be recovered and completed",
    )
    [(recovered_after,)] = sql(
        f"SELECT extract(epoch FROM at - %s)::float8 FROM {oracle.ORACLE_SCHEMA}.status_change "
        "WHERE job_id = %s AND old_status = 'executing' AND new_status = 'ready'",
        killed_at,
        job,
    )
    # The lease ran out at most one lease after the kill (the last renewal came before
    # it); recovery must start within one more lease, give or take a beat.
    assert recovered_after <= 2 * SHORT_LEASE + 0.5, recovered_after
    [(pid,)] = sql("SELECT (result->>'pid')::int FROM acta.job WHERE id = %s", job)
    assert pid == b.pid
