"""A job that kills its worker (issue 10, item 2): only the poison job pays for its crashes.

Real `acta worker` processes (heartbeat 0.5 s: lease 2 s), restarted by the test as a
supervisor would, run 100 quick jobs and one ``exits_worker`` job (``os._exit`` at once,
budget 4) until every job is terminal. What must hold, from the handlers' own run log and
the database:

* the poison job ends ``failed`` after its budget, its error saying truly what happened
  (it died alone, attempt 4 of 4);
* every other job succeeded, exactly one of its executions ``succeeded``;
* no other job was charged for a loss the database cannot blame on it: a charged loss of
  another job is one the database knew had started (the worker died while running it),
  and says so; an uncharged loss says it was not charged.

Before the fix (main at 6f2d45f) the jobs claimed in the poison job's batches were lost
"unstarted" again and again; from their second such loss each was charged, and with a
budget of 3 they ended ``failed`` without ever having failed themselves.
"""

from __future__ import annotations

import signal
import time
from collections import defaultdict
from pathlib import Path

from tests.harness import Sql, WorkerProcess, Workers, read_runs
from tests.waiting import wait_for

from . import oracle
from .conftest import all_terminal, enqueue

QUICK = 100
POISON_BUDGET = 4
WORKERS = 3
DEADLINE = 240.0


def charged_losses(sql: Sql) -> dict[int, list[tuple[int, bool]]]:
    """Per job, each loss recovery recorded: (execution id, charged). Read from the oracle's
    status log (a trigger outside the code under test): a loss is charged when the row
    left ``executing`` with its lease run out and kept the attempt the claim counted."""
    per_job = oracle.by_job(oracle.read_changes(sql))
    out: dict[int, list[tuple[int, bool]]] = defaultdict(list)
    for job, changes in per_job.items():
        claimed_attempts = None
        for c in changes:
            if c.old != "executing" and c.new == "executing":
                claimed_attempts = c.attempts
            elif c.old == "executing" and c.lease_expired and claimed_attempts is not None:
                assert c.execution_id is not None
                out[job].append((c.execution_id, c.attempts == claimed_attempts))
    return out


def test_a_worker_killing_job_fails_alone_and_its_batch_mates_are_never_charged(
    sql: Sql, workers: Workers, runs_log: Path
) -> None:
    first = enqueue(sql, "quick", QUICK // 2, max_attempts=3)
    [poison] = enqueue(sql, "exits_worker", max_attempts=POISON_BUDGET)
    quick = first + enqueue(sql, "quick", QUICK - QUICK // 2, max_attempts=3)

    def start() -> WorkerProcess:
        return workers("--executors", "4", ready=False)

    running = [start() for _ in range(WORKERS)]
    deaths: dict[int, float] = {}
    deadline = time.monotonic() + DEADLINE
    # The test is the supervisor: a worker the poison job takes down is replaced at once.
    while not all_terminal(sql, QUICK + 1):
        assert time.monotonic() < deadline, (
            f"not every job ended within {DEADLINE:g}s; {len(deaths)} worker(s) died"
        )
        wait_for(
            lambda: any(not w.alive() for w in running) or all_terminal(sql, QUICK + 1),
            timeout=max(1.0, deadline - time.monotonic()),
            what="a worker to die or every job to end",
        )
        for i, w in enumerate(running):
            if not w.alive():
                assert w.proc.returncode == 3, w.output()  # only the poison kills workers
                deaths[w.pid] = time.monotonic()  # its handlers ended no later than this
                running[i] = start()
    for w in running:
        w.signal(signal.SIGTERM)
    for w in running:
        w.wait(timeout=30)

    # The poison job: failed after its budget, with a true message.
    [(status, attempts, error)] = sql(
        "SELECT status, attempts, last_error->>'message' FROM acta.job WHERE id = %s", poison
    )
    assert status == "failed", (status, attempts, error)
    assert attempts == POISON_BUDGET
    assert "alone" in error and f"attempt {POISON_BUDGET} of {POISON_BUDGET}" in error, error
    poison_starts = [r for r in read_runs(runs_log) if r.job_id == poison]
    assert len(poison_starts) == len(deaths), "every start of the poison job killed its worker"
    # Its first crash took a batch down, uncharged; from then on it ran alone, charged.
    assert len(deaths) == POISON_BUDGET + 1
    losses = charged_losses(sql)
    assert sum(charged for _, charged in losses[poison]) == POISON_BUDGET

    # Every other job succeeded once; a charged loss is only ever one of a started attempt.
    rows = sql(
        "SELECT j.id, j.status, count(*) FILTER (WHERE e.outcome = 'succeeded') "
        "FROM acta.job j LEFT JOIN acta.attempt e ON e.job_id = j.id "
        "WHERE j.id = ANY(%s) GROUP BY j.id, j.status",
        quick,
    )
    assert len(rows) == QUICK
    bad = [(job, status, n) for job, status, n in rows if status != "succeeded" or n != 1]
    assert not bad, f"jobs other than the poison one did not succeed exactly once: {bad[:10]}"
    history = {
        (job, execution): (started, message)
        for job, execution, started, message in sql(
            "SELECT job_id, id, started_at IS NOT NULL, error_message FROM acta.attempt "
            "WHERE outcome = 'lost' AND job_id = ANY(%s)",
            quick,
        )
    }
    false_records = []
    for job in quick:
        for execution, charged in losses.get(job, []):
            started, message = history[(job, execution)]
            true = (
                (started and "stopped renewing its lease" in message)
                if charged
                else ("not charged" in message and not started)
            )
            if not true:
                false_records.append((job, execution, charged, started, message))
    assert not false_records, f"losses recorded falsely: {false_records[:5]}"
    oracle.check(sql, runs_log, attempts=None, killed=deaths)
