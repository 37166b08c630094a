"""A handler that blocks its worker's event loop (issue 10 item 1).

``time.sleep`` (or a CPU loop) inside an ``async def`` handler stops everything on the
worker's loop, the heartbeat included. Before the lifeline, the worker's leases ran out
during the block: another worker ran the same job while the first still ran it, innocent
batch-mates were started again and again and ended failed, and nothing in the log said the
loop was blocked. Now the lifeline thread renews the leases (on its own event loop and
connection) while the loop is blocked, the stall is logged naming the running handlers,
and a loop that never comes back still lets its jobs go once they are past their timeout.

Real `acta worker` processes, heartbeat 0.5 s (lease 2 s, worker dead after 3.5 s).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

from tests.harness import Run, Sql, Workers, read_runs
from tests.waiting import wait_for

from . import oracle
from .conftest import NAMESPACE, all_terminal

APP = ("--app", "tests.faults.app_blocking:acta")
BLOCK = 6.0
"""Three leases."""
INNOCENTS = 6


def insert_batch(sql: Sql, jobs: list[tuple[str, dict[str, object]]]) -> list[int]:
    """Insert ``jobs`` (kind, args) in one committed statement, in this order."""
    rows = sql(
        "INSERT INTO acta.job (namespace, kind, args) "
        "SELECT %s, k, a::jsonb FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY "
        "AS t(k, a, n) ORDER BY n RETURNING id",
        NAMESPACE,
        [k for k, _ in jobs],
        [json.dumps(a) for _, a in jobs],
    )
    return sorted(int(r[0]) for r in rows)


def started(runs_log: Path, job: int) -> list[Run]:
    return [r for r in read_runs(runs_log) if r.job_id == job and r.event == "start"]


def test_a_blocked_loop_keeps_its_jobs_and_fails_none(
    sql: Sql, workers: Workers, runs_log: Path
) -> None:
    blocked = workers(*APP)
    # One statement: the one worker claims the whole batch in one call, so the innocent
    # jobs share the blocked loop (the first ones already running their asyncio.sleep, the
    # others still waiting for the loop to start them).
    ids = insert_batch(
        sql,
        [("quick", {"pause": 2.0})] * (INNOCENTS // 2)
        + [("blocks_loop", {"seconds": BLOCK})]
        + [("quick", {"pause": 2.0})] * (INNOCENTS - INNOCENTS // 2),
    )
    blocker = ids[INNOCENTS // 2]
    wait_for(lambda: started(runs_log, blocker), 30, "the blocking handler to start")
    other = workers(*APP)  # free to take whatever the blocked worker lets go

    wait_for(lambda: all_terminal(sql, len(ids)), 90, "every job to end")

    report = oracle.check(sql, runs_log, jobs=ids, attempts=1, max_starts=1)
    assert report.overlaps == []
    assert {report.final[j][0] for j in ids} == {"succeeded"}, report.final
    assert all(report.starts[j] == 1 for j in ids), report.starts
    # Every run happened in the blocked worker: it never let go of a job.
    assert {r.pid for r in report.runs} == {blocked.pid}
    out = blocked.output()
    assert "WARNING" in out and "event loop" in out and "blocks_loop" in out, out
    [(status,)] = sql("SELECT status FROM acta.worker WHERE id = %s", blocked.id)
    assert status == "running", out
    assert other.alive()


def test_a_loop_that_never_comes_back_lets_its_job_go_after_the_timeout(
    sql: Sql, workers: Workers, runs_log: Path
) -> None:
    stuck = workers(*APP)
    [job] = insert_batch(sql, [("blocks_loop_in", {"pid": stuck.pid, "seconds": 3600})])
    [first] = wait_for(lambda: started(runs_log, job), 30, "the blocking handler to start")
    rescuer = workers(*APP)

    wait_for(lambda: all_terminal(sql, 1), 60, "the job to be recovered and run elsewhere")
    # With nothing left to renew the lifeline stopped beating: the worker is marked dead.
    wait_for(
        lambda: sql("SELECT status FROM acta.worker WHERE id = %s", stuck.id) == [("dead",)],
        30,
        "the stuck worker to be marked dead",
    )
    out = stuck.output()
    killed = {stuck.pid: stuck.kill()}

    report = oracle.check(sql, runs_log, jobs=[job], attempts=2, killed=killed)
    status, attempts, result = report.final[job]
    assert (status, attempts, result["pid"]) == ("succeeded", 2, rescuer.pid)
    [second] = [r for r in started(runs_log, job) if r.pid == rescuer.pid]
    # The lifeline renewed the lease while the loop was blocked, but only until the job's
    # own 6 s execution timeout: the job came back after that, not after one 2 s lease.
    assert second.t - first.t >= 6.0, second.t - first.t
    assert second.t - first.t < 6.0 + 15.0, second.t - first.t
    assert "event loop has been blocked" in out and "blocks_loop_in" in out, out
    assert "past every running job's execution timeout" in out, out


def test_a_worker_marked_dead_that_turns_out_alive_registers_again(
    sql: Sql, workers: Workers, runs_log: Path
) -> None:
    """A whole process frozen (SIGSTOP: the lifeline thread stops too) past the worker-dead
    limit is marked dead by the other worker's recovery. When it thaws, its first
    confirmed beat finds the silence: it marks its old row stopped, registers a new one,
    and goes on claiming under the new id (no restart)."""
    frozen = workers(*APP)
    other = workers(*APP)
    old_id = frozen.id
    frozen.signal(signal.SIGSTOP)
    try:
        wait_for(
            lambda: sql("SELECT status FROM acta.worker WHERE id = %s", old_id) == [("dead",)],
            30,
            "the frozen worker to be marked dead",
        )
    finally:
        frozen.signal(signal.SIGCONT)

    def new_row() -> int | None:
        rows = sql(
            "SELECT id FROM acta.worker WHERE pid = %s AND id <> %s AND status = 'running'",
            frozen.pid,
            old_id,
        )
        return int(rows[0][0]) if rows else None

    new_id = wait_for(new_row, 30, "the thawed worker to register again")
    wait_for(
        lambda: sql("SELECT status FROM acta.worker WHERE id = %s", old_id) == [("stopped",)],
        10,
        "the old row to be marked stopped",
    )
    wait_for(lambda: "registered again as worker" in frozen.output(), 10, "the log line")
    out = frozen.output()
    assert "did not run for" in out and "event loop" not in out, out

    other.signal(signal.SIGTERM)
    assert other.wait(30) == 0
    ids = insert_batch(sql, [("quick", {})] * 3)
    wait_for(lambda: all_terminal(sql, len(ids)), 30, "the thawed worker to run new jobs")
    report = oracle.check(sql, runs_log, jobs=ids, attempts=1)
    assert {report.final[j][2]["pid"] for j in ids} == {frozen.pid}
    assert sql("SELECT DISTINCT worker_id FROM acta.attempt WHERE job_id = ANY(%s)", ids) == [
        (new_id,)
    ]
