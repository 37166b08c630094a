"""The oracle of the fault tests, and the checker of invariants I1-I6 (RELIABILITY.md).

Two logs, both written outside the code under test:

* the **status log**: a test-only trigger on ``acta.job`` (installed by the fixtures, never
  by the migrations) that records every insert, every status change and every delete of a
  job, in the same transaction as the change itself: job id, old and new status, attempts
  and execution id after the change, whether the lease had run out when the row left
  ``executing`` (``OLD.lease_expires_at < now()``), the transaction id and the time;
* the **run log**: every handler start and end, written by the handlers of
  ``tests.faults.app`` to a file (job, execution, attempt, pid, CLOCK_MONOTONIC time).

:func:`check` reads both and asserts, whatever the implementation does inside:

* I1: every enqueued job is terminal (and the row still exists);
* I2: exactly one transition into a terminal state per job, none out of one;
* I3: a succeeded job's result was written by the execution that made its terminal
  transition (a stale attempt's late completion changed nothing);
* I4: two runs of one job overlap in time only if the earlier execution left ``executing``
  with its lease run out before the later one was claimed, and the earlier handler was
  then cancelled (unless its process was killed);
* I5: each claim counts one attempt, each return to ``ready`` gives back at most that one,
  nothing else moves the count; execution ids are never reused; the final counts are the
  ones the test expects;
* no run belongs to an execution the database never recorded (a "phantom" claim), unless
  the test allows it (a database crash may lose a claim committed asynchronously).
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.harness import Run as Run  # re-exported: tests read runs through the oracle
from tests.harness import read_runs as read_runs

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
ORACLE_SCHEMA = "acta_oracle"

SQL = Callable[..., list[tuple[Any, ...]]]

INSTALL = f"""
CREATE SCHEMA IF NOT EXISTS {ORACLE_SCHEMA};
CREATE TABLE IF NOT EXISTS {ORACLE_SCHEMA}.status_change (
    seq bigserial PRIMARY KEY,
    job_id bigint NOT NULL,
    old_status text,
    new_status text NOT NULL,
    attempts int NOT NULL,
    execution_id bigint,
    lease_expired boolean NOT NULL,
    txid bigint NOT NULL,
    at timestamptz NOT NULL
);
CREATE OR REPLACE FUNCTION {ORACLE_SCHEMA}.log_status() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO {ORACLE_SCHEMA}.status_change (job_id, old_status, new_status, attempts,
            execution_id, lease_expired, txid, at)
        VALUES (NEW.id, NULL, NEW.status, NEW.attempts, NEW.execution_id, false,
            txid_current(), clock_timestamp());
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO {ORACLE_SCHEMA}.status_change (job_id, old_status, new_status, attempts,
            execution_id, lease_expired, txid, at)
        VALUES (NEW.id, OLD.status, NEW.status, NEW.attempts, NEW.execution_id,
            coalesce(OLD.lease_expires_at < now(), false), txid_current(), clock_timestamp());
    ELSE
        INSERT INTO {ORACLE_SCHEMA}.status_change (job_id, old_status, new_status, attempts,
            execution_id, lease_expired, txid, at)
        VALUES (OLD.id, OLD.status, 'deleted', OLD.attempts, OLD.execution_id, false,
            txid_current(), clock_timestamp());
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS zz_oracle_insert ON acta.job;
DROP TRIGGER IF EXISTS zz_oracle_update ON acta.job;
DROP TRIGGER IF EXISTS zz_oracle_delete ON acta.job;
CREATE TRIGGER zz_oracle_insert AFTER INSERT ON acta.job
    FOR EACH ROW EXECUTE FUNCTION {ORACLE_SCHEMA}.log_status();
CREATE TRIGGER zz_oracle_update AFTER UPDATE ON acta.job
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION {ORACLE_SCHEMA}.log_status();
CREATE TRIGGER zz_oracle_delete AFTER DELETE ON acta.job
    FOR EACH ROW EXECUTE FUNCTION {ORACLE_SCHEMA}.log_status();
TRUNCATE {ORACLE_SCHEMA}.status_change RESTART IDENTITY;
"""

UNINSTALL = f"""
DROP TRIGGER IF EXISTS zz_oracle_insert ON acta.job;
DROP TRIGGER IF EXISTS zz_oracle_update ON acta.job;
DROP TRIGGER IF EXISTS zz_oracle_delete ON acta.job;
DROP SCHEMA IF EXISTS {ORACLE_SCHEMA} CASCADE;
"""


def install(url: str) -> None:
    """Install the status-log trigger on ``acta.job`` of the database at ``url``."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(INSTALL)


def uninstall(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(UNINSTALL)


@dataclass(frozen=True, slots=True)
class Change:
    seq: int
    job_id: int
    old: str | None
    new: str
    attempts: int
    execution_id: int | None
    lease_expired: bool
    txid: int
    at: Any

    @property
    def is_claim(self) -> bool:
        return self.old == "ready" and self.new == "executing"


def read_changes(sql: SQL) -> list[Change]:
    rows = sql(
        f"SELECT seq, job_id, old_status, new_status, attempts, execution_id, lease_expired, "
        f"txid, at FROM {ORACLE_SCHEMA}.status_change ORDER BY seq"
    )
    return [Change(*row) for row in rows]


@dataclass(slots=True)
class Report:
    """What the checker saw, for the test's own extra assertions."""

    jobs: set[int]
    changes: list[Change]
    runs: list[Run]
    final: dict[int, tuple[str, int, Any]]
    """job -> (status, attempts, result) as the table holds it now."""
    starts: Counter[int] = field(default_factory=Counter)
    """job -> handler starts."""
    phantoms: list[tuple[int, int]] = field(default_factory=list)
    """(job, execution) pairs that ran but that the database never recorded as claimed."""
    overlaps: list[tuple[int, int, int]] = field(default_factory=list)
    """(job, earlier execution, later execution) that overlapped, legitimately."""

    def by_job(self) -> dict[int, list[Change]]:
        out: dict[int, list[Change]] = defaultdict(list)
        for c in self.changes:
            out[c.job_id].append(c)
        return out


def check(
    sql: SQL,
    runs_path: Path | None,
    *,
    jobs: Collection[int] | None = None,
    attempts: int | Mapping[int, int] | None = 1,
    max_starts: int | None = None,
    killed: Mapping[int, float] | None = None,
    allow_phantoms: bool = False,
) -> Report:
    """Assert I1-I6 over ``jobs`` (default: every job the status log saw inserted).

    ``attempts``: the final attempt count of every job (an int), per job (a mapping), or
    None to check only the accounting of each transition. ``max_starts``: at most this many
    handler starts per job. ``killed``: pid -> CLOCK_MONOTONIC time it was SIGKILLed (its
    handlers ended then). ``allow_phantoms``: runs whose claim the database lost are
    tolerated (a crash may lose an asynchronously committed claim) and reported.
    """
    changes = read_changes(sql)
    runs = read_runs(runs_path) if runs_path is not None else []
    killed = dict(killed or {})
    per_job: dict[int, list[Change]] = defaultdict(list)
    for c in changes:
        per_job[c.job_id].append(c)
    inserted = {c.job_id for c in changes if c.old is None and c.new != "deleted"}
    wanted = set(jobs) if jobs is not None else inserted
    rows = sql(
        "SELECT id, status, attempts, result::text FROM acta.job WHERE id = ANY(%s)", list(wanted)
    )
    final = {r[0]: (r[1], r[2], json.loads(r[3]) if r[3] is not None else None) for r in rows}
    problems: list[str] = []

    def problem(text: str) -> None:
        if len(problems) < 40:
            problems.append(text)

    # I1: every enqueued job is terminal, its row still there, the log agreeing.
    missing = wanted - inserted
    if missing:
        problem(f"I1: jobs never seen inserted by the status log: {sorted(missing)[:10]}")
    for job in sorted(wanted):
        if job not in final:
            problem(f"I1: job {job} is gone from acta.job")
            continue
        status = final[job][0]
        if status not in TERMINAL:
            problem(f"I1: job {job} is {status!r}, not terminal")
        history = per_job.get(job, [])
        if history and history[-1].new != status:
            problem(f"I1: job {job}: the log ends {history[-1].new!r}, the row says {status!r}")

    # I2 and I5: one terminal transition, none out of one; attempt accounting.
    execution_owner: dict[int, int] = {}
    claims: dict[tuple[int, int], Change] = {}
    for job in sorted(wanted):
        history = per_job.get(job, [])
        terminal = [c for c in history if c.new in TERMINAL]
        if len(terminal) > 1:
            problem(
                f"I2: job {job} reached a terminal state {len(terminal)} times: "
                + ", ".join(f"{c.old}->{c.new} (execution {c.execution_id})" for c in terminal)
            )
        for c in history:
            if c.old in TERMINAL:
                problem(f"I2: job {job} left terminal {c.old!r} for {c.new!r} (seq {c.seq})")
        previous: int | None = None
        seen_executions: set[int] = set()
        for c in history:
            if c.old is None:
                previous = c.attempts
                continue
            assert previous is not None
            if c.is_claim:
                if c.attempts != previous + 1:
                    problem(f"I5: job {job}: a claim moved attempts {previous} -> {c.attempts}")
                if c.execution_id is None or c.execution_id in seen_executions:
                    problem(f"I5: job {job}: claim reused execution id {c.execution_id}")
                if c.execution_id is not None:
                    other = execution_owner.setdefault(c.execution_id, job)
                    if other != job:
                        problem(f"I5: execution id {c.execution_id} minted for jobs {other}, {job}")
                    seen_executions.add(c.execution_id)
                    claims[(job, c.execution_id)] = c
            elif c.old == "executing" and c.new == "ready":
                if c.attempts not in (previous, previous - 1):
                    problem(
                        f"I5: job {job}: a return to ready moved attempts "
                        f"{previous} -> {c.attempts}"
                    )
            elif c.new != "deleted" and c.attempts != previous:
                problem(
                    f"I5: job {job}: {c.old}->{c.new} moved attempts {previous} -> {c.attempts}"
                )
            if c.attempts < 0:
                problem(f"I5: job {job}: attempts went negative")
            previous = c.attempts
        if attempts is not None and job in final:
            expected = attempts if isinstance(attempts, int) else attempts.get(job)
            if expected is not None and final[job][1] != expected:
                problem(f"I5: job {job} ended with {final[job][1]} attempts, expected {expected}")

    # I3: a succeeded job's result comes from the execution of its terminal transition.
    for job in sorted(wanted):
        if job not in final or final[job][0] != "succeeded":
            continue
        result = final[job][2]
        terminal = [c for c in per_job.get(job, []) if c.new in TERMINAL]
        if isinstance(result, dict) and "execution" in result and terminal:
            if result["execution"] != terminal[-1].execution_id:
                problem(
                    f"I3: job {job} succeeded under execution {terminal[-1].execution_id} but "
                    f"its result was written by execution {result['execution']}"
                )

    # Runs: each execution starts once; I4 for overlaps.
    report = Report(jobs=wanted, changes=changes, runs=runs, final=final)
    by_execution: dict[tuple[int, int], list[Run]] = defaultdict(list)
    for r in runs:
        by_execution[(r.job_id, r.execution_id)].append(r)
    intervals: dict[int, list[tuple[float, float, int, Run]]] = defaultdict(list)
    for (job, execution), events in by_execution.items():
        if job not in wanted:
            continue
        starts = [e for e in events if e.event == "start"]
        report.starts[job] += len(starts)
        if len(starts) > 1:
            problem(
                f"I4: execution {execution} of job {job} ran {len(starts)} times "
                f"(pids {[e.pid for e in starts]}): an execution id was handed out twice"
            )
        if (job, execution) not in claims:
            report.phantoms.append((job, execution))
            if not allow_phantoms:
                problem(f"job {job} ran under execution {execution}, which was never claimed")
        if not starts:
            continue
        start = starts[0]
        ends = [e for e in events if e.event != "start"]
        end = ends[0].t if ends else killed.get(start.pid, math.inf)
        intervals[job].append((start.t, end, execution, ends[0] if ends else start))
    for job, spans in intervals.items():
        spans.sort()
        for i, (_s1, e1, x1, last1) in enumerate(spans):
            for s2, _e2, x2, _ in spans[i + 1 :]:
                if s2 >= e1:
                    continue
                report.overlaps.append((job, x1, x2))
                claim2 = claims.get((job, x2))
                released = [
                    c
                    for c in per_job.get(job, [])
                    if c.old == "executing" and c.execution_id == x1 and c.lease_expired
                ]
                if claim2 is None or not released or released[0].seq > claim2.seq:
                    problem(
                        f"I4: job {job}: execution {x2} started while execution {x1} still ran, "
                        f"and {x1}'s lease had not run out before {x2} was claimed"
                    )
                if last1.event != "cancel" and last1.pid not in killed:
                    problem(
                        f"I4: job {job}: the overtaken execution {x1} was not cancelled "
                        f"(its handler ended with {last1.event!r})"
                    )
    if max_starts is not None:
        over = {j: n for j, n in report.starts.items() if n > max_starts}
        if over:
            problem(f"jobs started more than {max_starts} time(s): {dict(list(over.items())[:10])}")
    assert not problems, "invariants violated:\n  " + "\n  ".join(problems)
    return report
