"""The oracle of the fault tests, and the checker of invariants I1-I5, I10, I11 and I17
(docs/reliability.md).

Two logs, both written outside the code under test:

* the **status log**: a test-only trigger on ``acta.job`` (installed by the fixtures, never
  by the migrations) that records every insert, every status change and every delete of a
  job, in the same transaction as the change itself: job id, old and new status, attempts
  and execution id after the change, whether the lease had run out when the row left
  ``executing`` (``OLD.lease_expires_at < now()``), the transaction id and the time;
* the **run log**: every handler start and end, written by the handlers of
  ``tests.faults.app`` to a file (job, execution, attempt, pid, CLOCK_MONOTONIC time).

:func:`check` reads both into a :class:`Report` (the facts: each job's history, its
claims, the runs as time spans, which of them overlapped) and runs the invariants over it.
Each invariant is one named function ``(report, expected) -> violations`` in
:data:`INVARIANTS`; a feature with an invariant of its own (I10 one fire per tick, I11
parent/child counts, I14 concurrency, I15 rate window, I16 lanes, I17 signals) adds one
function there, or a test passes it to ``check(..., extra={...})``. The invariants:

* I1: every enqueued job is terminal (and the row still exists);
* I2: exactly one transition into a terminal state per job, none out of one;
* I3: a succeeded job's result was written by the execution that made its terminal
  transition (a stale attempt's late completion changed nothing);
* I4: two runs of one job overlap in time only if the earlier execution left ``executing``
  with its lease run out before the later one was claimed, and the earlier handler was
  then cancelled (unless its process was killed); an execution starts at most once;
* I5: each claim counts one attempt, each return to ``ready`` gives back at most that one,
  nothing else moves the count; execution ids are never reused; the final counts are the
  ones the test expects;
* claims: no run belongs to an execution the database never recorded (a "phantom" claim),
  unless the test allows it (a database crash may lose a claim committed asynchronously);
* starts: no job started more often than the test allows;
* I10: no tick of a schedule fires twice;
* I11: each wait of a parent for its children ends once, never before every child of
  that wait is terminal;
* I17: no job is left waiting for a signal it has already received.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.harness import Run, read_runs

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


def by_job(changes: Iterable[Change]) -> dict[int, list[Change]]:
    """Each job's changes, in log order."""
    out: dict[int, list[Change]] = defaultdict(list)
    for c in changes:
        out[c.job_id].append(c)
    return out


@dataclass(frozen=True, slots=True)
class Expected:
    """What the test says must hold beyond the invariants themselves (see :func:`check`)."""

    attempts: int | Mapping[int, int] | None = 1
    max_starts: int | None = None
    killed: Mapping[int, float] = field(default_factory=dict)
    allow_phantoms: bool = False

    def attempts_of(self, job: int) -> int | None:
        if self.attempts is None or isinstance(self.attempts, int):
            return self.attempts
        return self.attempts.get(job)


@dataclass(frozen=True, slots=True)
class Span:
    """One execution's handler, from its start to its end (or its process's SIGKILL)."""

    execution: int
    start: float
    end: float
    last: Run
    """The run's last event (its start, when it never ended)."""


@dataclass(slots=True)
class Report:
    """What the checker saw: the facts the invariants judge, and the test's own extra
    assertions read."""

    jobs: set[int]
    """The jobs checked."""
    changes: list[Change]
    runs: list[Run]
    final: dict[int, tuple[str, int, Any]]
    """job -> (status, attempts, result) as the table holds it now."""
    history: dict[int, list[Change]] = field(default_factory=dict)
    """job -> its changes, in log order."""
    inserted: set[int] = field(default_factory=set)
    """Jobs the status log saw inserted."""
    claims: dict[tuple[int, int], Change] = field(default_factory=dict)
    """(job, execution) -> the change that claimed it (ready -> executing)."""
    executions: dict[tuple[int, int], list[Run]] = field(default_factory=dict)
    """(job, execution) -> its runs' events, of the jobs checked."""
    spans: dict[int, list[Span]] = field(default_factory=dict)
    """job -> its handlers' spans, by start time."""
    starts: Counter[int] = field(default_factory=Counter)
    """job -> handler starts."""
    phantoms: list[tuple[int, int]] = field(default_factory=list)
    """(job, execution) pairs that ran but that the database never recorded as claimed."""
    overlaps: list[tuple[int, int, int]] = field(default_factory=list)
    """(job, earlier execution, later execution) whose handlers overlapped in time."""
    parents: dict[int, int] = field(default_factory=dict)
    """child -> parent, of the jobs checked that were spawned by ``WaitForChildren``."""
    unheard_signals: list[int] = field(default_factory=list)
    """Jobs left waiting for a signal they have already received."""
    fires: dict[int, tuple[str, str, Any]] = field(default_factory=dict)
    """job -> (namespace, schedule, tick), of the jobs checked that are a schedule's fire."""


def observe(
    sql: SQL, runs_path: Path | None, jobs: Collection[int] | None, killed: Mapping[int, float]
) -> Report:
    """Read both logs and the jobs' rows; derive the facts (no judgement here)."""
    changes = read_changes(sql)
    runs = read_runs(runs_path) if runs_path is not None else []
    history = by_job(changes)
    inserted = {c.job_id for c in changes if c.old is None and c.new != "deleted"}
    wanted = set(jobs) if jobs is not None else inserted
    rows = sql(
        "SELECT id, status, attempts, result::text FROM acta.job WHERE id = ANY(%s)", list(wanted)
    )
    final = {r[0]: (r[1], r[2], json.loads(r[3]) if r[3] is not None else None) for r in rows}
    report = Report(
        jobs=wanted, changes=changes, runs=runs, final=final, history=history, inserted=inserted
    )
    report.parents = dict(
        sql(
            "SELECT id, parent_id FROM acta.job WHERE id = ANY(%s) AND parent_id IS NOT NULL",
            list(wanted),
        )
    )
    report.fires = {
        r[0]: (r[1], r[2], r[3])
        for r in sql(
            "SELECT id, namespace, schedule_name, scheduled_at FROM acta.job"
            " WHERE id = ANY(%s) AND schedule_name IS NOT NULL",
            list(wanted),
        )
    }
    report.unheard_signals = [
        r[0]
        for r in sql(
            "SELECT id FROM acta.job WHERE id = ANY(%s) AND status = 'waiting'"
            " AND awaited_signal IS NOT NULL AND signals ? awaited_signal",
            list(wanted),
        )
    ]
    for job in wanted:
        for c in history.get(job, []):
            if c.is_claim and c.execution_id is not None:
                report.claims[(job, c.execution_id)] = c
    executions: dict[tuple[int, int], list[Run]] = defaultdict(list)
    for r in runs:
        if r.job_id in wanted:
            executions[(r.job_id, r.execution_id)].append(r)
    report.executions = dict(executions)
    spans: dict[int, list[Span]] = defaultdict(list)
    for (job, execution), events in executions.items():
        starts = [e for e in events if e.event == "start"]
        report.starts[job] += len(starts)
        if (job, execution) not in report.claims:
            report.phantoms.append((job, execution))
        if not starts:
            continue
        ends = [e for e in events if e.event != "start"]
        end = ends[0].t if ends else killed.get(starts[0].pid, math.inf)
        spans[job].append(Span(execution, starts[0].t, end, ends[0] if ends else starts[0]))
    for job, job_spans in spans.items():
        job_spans.sort(key=lambda s: (s.start, s.end, s.execution))
        for i, first in enumerate(job_spans):
            for later in job_spans[i + 1 :]:
                if later.start < first.end:
                    report.overlaps.append((job, first.execution, later.execution))
    report.spans = dict(spans)
    return report


# ------------------------------------------------------------------------ the invariants

Invariant = Callable[[Report, Expected], Iterable[str]]
"""One invariant: the report and the test's expectations in, one line per violation out."""


def every_job_terminal(r: Report, want: Expected) -> Iterator[str]:
    """I1: every enqueued job is terminal, its row still there, the log agreeing."""
    missing = r.jobs - r.inserted
    if missing:
        yield f"jobs never seen inserted by the status log: {sorted(missing)[:10]}"
    for job in sorted(r.jobs):
        if job not in r.final:
            yield f"job {job} is gone from acta.job"
            continue
        status = r.final[job][0]
        if status not in TERMINAL:
            yield f"job {job} is {status!r}, not terminal"
        history = r.history.get(job, [])
        if history and history[-1].new != status:
            yield f"job {job}: the log ends {history[-1].new!r}, the row says {status!r}"


def one_terminal_transition(r: Report, want: Expected) -> Iterator[str]:
    """I2: exactly one transition into a terminal state per job, none out of one."""
    for job in sorted(r.jobs):
        history = r.history.get(job, [])
        terminal = [c for c in history if c.new in TERMINAL]
        if len(terminal) > 1:
            yield f"job {job} reached a terminal state {len(terminal)} times: " + ", ".join(
                f"{c.old}->{c.new} (execution {c.execution_id})" for c in terminal
            )
        for c in history:
            if c.old in TERMINAL:
                yield f"job {job} left terminal {c.old!r} for {c.new!r} (seq {c.seq})"


def result_of_the_terminal_execution(r: Report, want: Expected) -> Iterator[str]:
    """I3: a succeeded job's result comes from the execution of its terminal transition."""
    for job in sorted(r.jobs):
        if job not in r.final or r.final[job][0] != "succeeded":
            continue
        result = r.final[job][2]
        terminal = [c for c in r.history.get(job, []) if c.new in TERMINAL]
        if isinstance(result, dict) and "execution" in result and terminal:
            if result["execution"] != terminal[-1].execution_id:
                yield (
                    f"job {job} succeeded under execution {terminal[-1].execution_id} but "
                    f"its result was written by execution {result['execution']}"
                )


def overlap_only_after_lease_loss(r: Report, want: Expected) -> Iterator[str]:
    """I4: an execution starts once; two runs of one job overlap only if the earlier one's
    lease ran out before the later one was claimed, and the earlier handler was then
    cancelled (or its process killed)."""
    for (job, execution), events in r.executions.items():
        starts = [e for e in events if e.event == "start"]
        if len(starts) > 1:
            yield (
                f"execution {execution} of job {job} ran {len(starts)} times "
                f"(pids {[e.pid for e in starts]}): an execution id was handed out twice"
            )
    for job, x1, x2 in r.overlaps:
        [first] = [s for s in r.spans[job] if s.execution == x1]
        claim2 = r.claims.get((job, x2))
        released = [
            c
            for c in r.history.get(job, [])
            if c.old == "executing" and c.execution_id == x1 and c.lease_expired
        ]
        if claim2 is None or not released or released[0].seq > claim2.seq:
            yield (
                f"job {job}: execution {x2} started while execution {x1} still ran, "
                f"and {x1}'s lease had not run out before {x2} was claimed"
            )
        if first.last.event != "cancel" and first.last.pid not in want.killed:
            yield (
                f"job {job}: the overtaken execution {x1} was not cancelled "
                f"(its handler ended with {first.last.event!r})"
            )


def attempt_accounting(r: Report, want: Expected) -> Iterator[str]:
    """I5: a claim counts one attempt, a return to ready gives back at most that one,
    nothing else moves the count; execution ids are never reused; the final counts are the
    test's."""
    execution_owner: dict[int, int] = {}
    for job in sorted(r.jobs):
        previous: int | None = None
        seen_executions: set[int] = set()
        for c in r.history.get(job, []):
            if c.old is None:
                previous = c.attempts
                continue
            if previous is None:
                yield f"job {job}: {c.old}->{c.new} (seq {c.seq}) before its insert"
                break
            if c.is_claim:
                if c.attempts != previous + 1:
                    yield f"job {job}: a claim moved attempts {previous} -> {c.attempts}"
                if c.execution_id is None or c.execution_id in seen_executions:
                    yield f"job {job}: claim reused execution id {c.execution_id}"
                if c.execution_id is not None:
                    other = execution_owner.setdefault(c.execution_id, job)
                    if other != job:
                        yield f"execution id {c.execution_id} minted for jobs {other}, {job}"
                    seen_executions.add(c.execution_id)
            elif c.old == "executing" and c.new in ("ready", "waiting"):
                # A retry keeps the attempt; a hand-back, an interruption or a durable
                # wait gives it back.
                if c.attempts not in (previous, previous - 1):
                    yield (
                        f"job {job}: a return to ready moved attempts {previous} -> {c.attempts}"
                    )
            elif c.new != "deleted" and c.attempts != previous:
                yield f"job {job}: {c.old}->{c.new} moved attempts {previous} -> {c.attempts}"
            if c.attempts < 0:
                yield f"job {job}: attempts went negative"
            previous = c.attempts
        expected = want.attempts_of(job)
        if expected is not None and job in r.final and r.final[job][1] != expected:
            yield f"job {job} ended with {r.final[job][1]} attempts, expected {expected}"


def no_phantom_claims(r: Report, want: Expected) -> Iterator[str]:
    """Every run belongs to an execution the database recorded as claimed (unless the test
    allows phantoms: a database crash may lose an asynchronously committed claim)."""
    if want.allow_phantoms:
        return
    for job, execution in r.phantoms:
        yield f"job {job} ran under execution {execution}, which was never claimed"


def starts_within_budget(r: Report, want: Expected) -> Iterator[str]:
    """No job started more often than the test allows (``max_starts``)."""
    if want.max_starts is None:
        return
    over = {j: n for j, n in r.starts.items() if n > want.max_starts}
    if over:
        yield f"jobs started more than {want.max_starts} time(s): {dict(list(over.items())[:10])}"


def parent_resumes_once_after_its_children(r: Report, want: Expected) -> Iterator[str]:
    """I11: each wait of a parent for its children ends exactly once, and never before
    every child spawned by that wait is terminal. A child belongs to the wait whose
    transaction inserted it; the last child's terminal write and the parent's wake share
    one transaction (the trigger), every other child's must come before the wake."""
    children: dict[int, list[int]] = defaultdict(list)
    for child, parent in r.parents.items():
        children[parent].append(child)
    for parent, kids in sorted(children.items()):
        history = r.history.get(parent, [])
        inserted_in = {
            kid: next((c.txid for c in r.history.get(kid, []) if c.old is None), None)
            for kid in kids
        }
        episodes = [c for c in history if c.old == "executing" and c.new == "waiting"]
        for start in episodes:
            mine = [k for k, tx in inserted_in.items() if tx == start.txid]
            if not mine:
                continue  # a signal wait
            after = [c for c in history if c.seq > start.seq]
            ends = after[:1]
            if not ends:
                continue  # still waiting: I1 says so if it should not be
            end = ends[0]
            if end.old != "waiting":
                yield f"parent {parent}: its wait (seq {start.seq}) ended {end.old}->{end.new}"
                continue
            if end.new in ("cancelled", "failed"):
                # A cancel ends the wait whatever the children did; so does recovery's
                # failure of a wait cycle's victim (DeadlockDetected, docs/waits.md).
                continue
            for kid in mine:
                done = [c for c in r.history.get(kid, []) if c.new in TERMINAL]
                if not done or not (done[0].seq < end.seq or done[0].txid == end.txid):
                    yield (
                        f"parent {parent} resumed (seq {end.seq}) before its child {kid} "
                        "was terminal"
                    )
        wakes = [c for c in history if c.old == "waiting" and c.new == "ready"]
        if len(wakes) > len(episodes):
            yield f"parent {parent} woke {len(wakes)} times from {len(episodes)} wait(s)"


def one_fire_per_tick(r: Report, want: Expected) -> Iterator[str]:
    """I10: no tick of a schedule has two fires (jobs)."""
    seen: dict[tuple[str, str, Any], int] = {}
    for job, key in sorted(r.fires.items()):
        first = seen.setdefault(key, job)
        if first != job:
            yield f"schedule {key[1]!r} tick {key[2]} fired as jobs {first} and {job}"


def no_unheard_signal(r: Report, want: Expected) -> Iterator[str]:
    """I17: no job stays waiting for a signal it has already received."""
    if r.unheard_signals:
        yield f"jobs waiting for a signal they hold: {r.unheard_signals[:10]}"


INVARIANTS: dict[str, Invariant] = {
    "I1": every_job_terminal,
    "I2": one_terminal_transition,
    "I5": attempt_accounting,
    "I3": result_of_the_terminal_execution,
    "I4": overlap_only_after_lease_loss,
    "claims": no_phantom_claims,
    "starts": starts_within_budget,
    "I10": one_fire_per_tick,
    "I11": parent_resumes_once_after_its_children,
    "I17": no_unheard_signal,
}
"""Every invariant :func:`check` runs, by name (the name prefixes each violation)."""

MAX_VIOLATIONS = 40
"""Shown in the failure at most: a broken run can violate an invariant per job."""


def check(
    sql: SQL,
    runs_path: Path | None,
    *,
    jobs: Collection[int] | None = None,
    attempts: int | Mapping[int, int] | None = 1,
    max_starts: int | None = None,
    killed: Mapping[int, float] | None = None,
    allow_phantoms: bool = False,
    extra: Mapping[str, Invariant] | None = None,
) -> Report:
    """Assert every invariant of :data:`INVARIANTS` (and ``extra``) over ``jobs`` (default:
    every job the status log saw inserted); the report, for the test's own assertions.

    ``attempts``: the final attempt count of every job (an int), per job (a mapping), or
    None to check only the accounting of each transition. ``max_starts``: at most this many
    handler starts per job. ``killed``: pid -> CLOCK_MONOTONIC time it was SIGKILLed (its
    handlers ended then). ``allow_phantoms``: runs whose claim the database lost are
    tolerated (a crash may lose an asynchronously committed claim) and reported.
    ``extra``: more invariants by name, e.g. a feature's own.
    """
    want = Expected(attempts, max_starts, dict(killed or {}), allow_phantoms)
    report = observe(sql, runs_path, jobs, want.killed)
    problems: list[str] = []
    for name, invariant in {**INVARIANTS, **(extra or {})}.items():
        for violation in invariant(report, want):
            problems.append(f"{name}: {violation}")
    shown = problems[:MAX_VIOLATIONS]
    assert not problems, "invariants violated:\n  " + "\n  ".join(shown)
    return report
