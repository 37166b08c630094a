"""The read model's statements: what an operator looks at (the CLI today, the dashboard
tomorrow). SQLAlchemy Core on the application's session, so they honour
``schema_translate_map``; ``acta_sqla.inspect`` runs them and returns plain values."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    DateTime,
    Delete,
    Double,
    Executable,
    Select,
    Text,
    any_,
    case,
    cast,
    delete,
    func,
    literal_column,
    select,
    true,
    tuple_,
    union,
    union_all,
)
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import ClauseElement

from ..models import (
    ConcurrencySlot,
    Definition,
    Execution,
    Job,
    Lock,
    Namespace,
    RateMeter,
    Schedule,
    Worker,
    attempt_history,
)
from ..status import TERMINAL_STATUSES, JobStatus

SHOWN_FIRST = "0001-01-02 00:00:00+00"
SHOWN_LAST = "9999-12-30 00:00:00+00"
"""The range of a timestamp as the readers show it: a day inside Python's datetime range
(years 1..9999) at both ends, so it stays in range in any time zone."""


def _shown_time(column: Any) -> Any:
    """A job's timestamp clamped into :data:`SHOWN_FIRST` .. :data:`SHOWN_LAST` (a signal
    wait's ``infinity`` too): a due time out of Python's range, left by older code (before
    the one bound of ``durations.py``) or a hand-written UPDATE, is shown at the end of the
    range instead of crashing the driver's decoding (``OverflowError``) and every reader."""
    first = cast(literal_column(f"'{SHOWN_FIRST}'"), DateTime(timezone=True))
    last = cast(literal_column(f"'{SHOWN_LAST}'"), DateTime(timezone=True))
    return case((column > last, last), (column < first, first), else_=column).label(column.key)


JOB_COLUMNS = (
    Job.id,
    Job.namespace,
    Job.kind,
    Job.status,
    Job.priority,
    Job.attempts,
    Job.max_attempts,
    _shown_time(Job.run_at),
    _shown_time(Job.created_at),
    _shown_time(Job.finished_at),
)
"""The columns of a job in a listing (no payloads: a page of jobs stays small)."""

JOB_DETAIL_COLUMNS = (
    *JOB_COLUMNS,
    Job.args,
    Job.result,
    Job.last_error,
    Job.unique_key,
    Job.concurrency_key,
    Job.rate_key,
    Job.lane_key,
    Job.parent_id,
    Job.execution_id,
    Job.worker_id,
    _shown_time(Job.claimed_at),
    _shown_time(Job.started_at),
    _shown_time(Job.lease_expires_at),
    Job.cancel_requested,
    Job.awaited_signal,
    Job.pending_children,
    Job.signals,
    Job.resumed,
)
"""The columns of one job shown in full."""

_A = attempt_history.c
EXECUTION_COLUMNS = (
    _A.id,
    _A.attempt,
    _A.outcome,
    _A.worker_id,
    _A.claimed_at,
    _A.started_at,
    _A.finished_at,
    _A.error_type,
    _A.error_message,
)
"""An attempt's columns, read from ``acta.attempt`` (every attempt: the Execution rows and
each finished job's final attempt, kept on its row since migration 0015)."""

WORKER_COLUMNS = (
    Worker.id,
    Worker.status,
    Worker.hostname,
    Worker.pid,
    Worker.executors,
    Worker.heartbeat_seconds,
    Worker.started_at,
    Worker.heartbeat_at,
    Worker.stopped_at,
)


def queue_depth(namespace: str) -> Select[tuple[str, JobStatus, int]]:
    """(kind, status, count) of the namespace's jobs, by kind then status."""
    return (
        select(Job.kind, Job.status, func.count())
        .where(Job.namespace == namespace)
        .group_by(Job.kind, Job.status)
        .order_by(Job.kind, Job.status)
    )


def list_workers(namespace: str, limit: int) -> Select[tuple[object, ...]]:
    """The namespace's newest ``limit`` worker rows (running, stopped or dead)."""
    return (
        select(*WORKER_COLUMNS)
        .where(Worker.namespace == namespace)
        .order_by(Worker.id.desc())
        .limit(limit)
    )


def list_jobs(
    namespace: str | None,
    status: JobStatus | None,
    kind: str | None,
    before_id: int | None,
    limit: int,
) -> Select[tuple[object, ...]]:
    """One page of jobs, newest first, filtered; keyset pagination: the next page starts
    below the last id shown (``before_id``), so a page costs the same however deep."""
    query = select(*JOB_COLUMNS).order_by(Job.id.desc()).limit(limit)
    if namespace is not None:
        query = query.where(Job.namespace == namespace)
    if status is not None:
        query = query.where(Job.status == status)
    if kind is not None:
        query = query.where(Job.kind == kind)
    if before_id is not None:
        query = query.where(Job.id < before_id)
    return query


def job_detail(job_id: int) -> Select[tuple[object, ...]]:
    """One job in full."""
    return select(*JOB_DETAIL_COLUMNS).where(Job.id == job_id)


def job_children(parent_id: int) -> Select[tuple[object, ...]]:
    """A parent's children in spawn order (by ``job_parent_idx``)."""
    return select(*JOB_COLUMNS).where(Job.parent_id == parent_id).order_by(Job.id)


def job_executions(job_id: int) -> Select[tuple[object, ...]]:
    """One job's recorded attempts, in the order they ended (the ``acta.attempt`` view)."""
    return (
        select(*EXECUTION_COLUMNS).where(_A.job_id == job_id).order_by(_A.finished_at, _A.attempt)
    )


# ------------------------------------------------------------------ the dashboard's pages
#
# The dashboard reads a table that may hold millions of finished rows, so every statement
# below is shaped to an index that exists (benchmarks/dashboard.py times each page on
# 1,100,000 jobs): a count is exact up to 10,000 rows (a count that stops there) and the
# planner's estimate above, never a count(*) of the whole history.


class Explain(Executable, ClauseElement):
    """``EXPLAIN (FORMAT JSON) <select>``: the planner's row estimate of a statement, its
    parameters still bound (PostgreSQL plans EXPLAIN with the values given)."""

    inherit_cache = False

    def __init__(self, statement: Select[Any]) -> None:
        self.statement = statement


@compiles(Explain, "postgresql")
def _render_explain(element: Explain, compiler: Any, **kw: Any) -> str:
    return "EXPLAIN (FORMAT JSON) " + compiler.process(element.statement, **kw)


def _job_filter(
    query: Select[Any], namespace: str, status: JobStatus | None, kind: str | None
) -> Select[Any]:
    query = query.where(Job.namespace == namespace)
    if status is not None:
        query = query.where(Job.status == status)
    if kind is not None:
        query = query.where(Job.kind == kind)
    return query


def estimate_jobs(namespace: str, status: JobStatus | None, kind: str | None) -> Explain:
    """The planner's estimate of how many jobs match a filter (a listing's count: exact
    would scan every matching row, a million for "succeeded")."""
    return Explain(_job_filter(select(Job.id), namespace, status, kind))


def count_jobs_up_to(
    namespace: str, status: JobStatus | None, kind: str | None, limit: int
) -> Select[tuple[int]]:
    """How many jobs match a filter, counting no further than ``limit``: exact for a
    small set (read from an index where one serves the filter), never a scan of a big
    one (the count stops at ``limit``; the caller then takes the planner's estimate)."""
    matching = _job_filter(select(Job.id), namespace, status, kind).limit(limit).subquery()
    return select(func.count()).select_from(matching)


def _due_later(namespace: str, retrying: bool) -> Any:
    """Ready jobs due later: retries waiting out their back-off (charged an attempt), or
    jobs scheduled for later (none charged yet). By ``job_due_idx`` (ready, by run_at)."""
    return (
        Job.namespace == namespace,
        Job.status == JobStatus.READY,
        Job.run_at > func.now(),
        Job.attempts > 0 if retrying else Job.attempts == 0,
    )


def due_later(
    namespace: str, retrying: bool, after: tuple[Any, int] | None, limit: int
) -> Select[tuple[object, ...]]:
    """The Scheduled (``retrying`` False) or Retrying view: ready jobs due later, soonest
    first, keyset-paged on (run_at, id) after ``after``; with the last error (a retry's)."""
    query = select(*JOB_COLUMNS, Job.last_error).where(*_due_later(namespace, retrying))
    if after is not None:
        query = query.where(tuple_(Job.run_at, Job.id) > tuple_(*after))
    return query.order_by(Job.run_at, Job.id).limit(limit)


def estimate_due_later(namespace: str, retrying: bool) -> Explain:
    """The planner's estimate of the Scheduled or Retrying view's size."""
    return Explain(select(Job.id).where(*_due_later(namespace, retrying)))


def count_due_later(namespace: str, retrying: bool, limit: int) -> Select[tuple[int]]:
    """The Scheduled or Retrying view's size, counting no further than ``limit``."""
    matching = select(Job.id).where(*_due_later(namespace, retrying)).limit(limit).subquery()
    return select(func.count()).select_from(matching)


def active_depth(namespace: str) -> Select[tuple[str, str, int]]:
    """(kind, status, count) of the namespace's ready and executing jobs, exactly: ready
    through the claim index, executing through the lease index (an executing job always
    holds a lease), so finished rows are never read."""
    ready = (
        select(Job.kind, Job.status, func.count())
        .where(Job.namespace == namespace, Job.status == JobStatus.READY)
        .group_by(Job.kind, Job.status)
    )
    executing = (
        select(Job.kind, Job.status, func.count())
        .where(
            Job.namespace == namespace,
            Job.lease_expires_at.is_not(None),
            Job.status == JobStatus.EXECUTING,
        )
        .group_by(Job.kind, Job.status)
    )
    return union_all(ready, executing)  # type: ignore[return-value]


def _finished_kinds(namespace: str) -> Any:
    """The kinds of the namespace's finished jobs, as an array: a skip scan of
    ``job_prune_idx`` (namespace, kind, finished_at; terminal rows), one index descent per
    kind, whatever the history (a recursive CTE; NULL ends it). A window over every kind
    says ``kind = ANY (this)`` and reads each kind's range from the window's start on the
    same index: the only index of every finished row since migration 0017 (a job that
    succeeds writes one entry, not two), so a window costs a descent per kind plus its
    rows."""
    terminal = Job.status.in_([_inline(s) for s in TERMINAL_STATUSES])
    first = (
        select(Job.kind.label("k"))
        .where(Job.namespace == namespace, terminal)
        .order_by(Job.kind)
        .limit(1)
    )
    found = first.cte("finished_kinds", recursive=True)
    following = (
        select(Job.kind)
        .where(Job.namespace == namespace, terminal, Job.kind > found.c.k)
        .order_by(Job.kind)
        .limit(1)
        .scalar_subquery()
    )
    found = found.union_all(select(following).where(found.c.k.is_not(None)))
    return func.array(select(found.c.k).where(found.c.k.is_not(None)).scalar_subquery())


def _window(namespace: str, seconds: float, kind: str | None = None) -> tuple[Any, ...]:
    """Jobs of the namespace that finished in the last ``seconds`` (of ``kind``; None:
    of every kind, each kind's range of ``job_prune_idx`` from the window's start). The
    statuses inlined: the index's predicate is matched whatever the plan."""
    return (
        Job.namespace == namespace,
        Job.status.in_([_inline(s) for s in TERMINAL_STATUSES]),
        Job.kind == (any_(_finished_kinds(namespace)) if kind is None else kind),
        _since(seconds),
    )


def _failed_window(namespace: str, seconds: float) -> tuple[Any, ...]:
    """Jobs of the namespace that failed in the last ``seconds``: the time range of
    ``job_failed_idx`` (namespace, finished_at; failed rows only), whose predicate the
    inlined status matches whatever the plan. A completion that succeeds writes no entry
    there; the failure pages read failed rows only."""
    return (
        Job.namespace == namespace,
        Job.status == _inline(JobStatus.FAILED),
        _since(seconds),
    )


def finished_since(namespace: str, seconds: float) -> Select[tuple[str, str, int]]:
    """(kind, status, count) of the jobs that finished in the last ``seconds`` (throughput
    and failures), through each kind's range of the finished index from the window's
    start."""
    return (
        select(Job.kind, Job.status, func.count())
        .where(*_window(namespace, seconds))
        .group_by(Job.kind, Job.status)
        .order_by(Job.kind, Job.status)
    )


def _since(seconds: float) -> Any:
    return Job.finished_at >= func.now() - func.make_interval(0, 0, 0, 0, 0, 0, seconds)


def _queue_wait() -> Any:
    """Seconds a job's last attempt waited from due to claimed (its ``run_at``, which a
    retry's back-off moved, to its ``claimed_at``); NULL for a job no worker claimed, and
    for a due time that is not a time (a signal wait's ``infinity``, which PostgreSQL
    cannot subtract)."""
    waited = func.greatest(func.extract("epoch", Job.claimed_at - Job.run_at), 0)
    finite = func.isfinite(Job.run_at) & func.isfinite(Job.claimed_at)
    return case((finite, waited))


def finished_series(
    namespace: str, seconds: float, step: float, kind: str | None
) -> Select[tuple[object, ...]]:
    """The charts: jobs finished in the last ``seconds`` (of ``kind``, None: every kind)
    in buckets of ``step`` seconds (the bucket's start, epoch seconds): succeeded, failed
    and cancelled, and the mean queue wait of those claimed. Through the finished index's
    range of each kind (``job_prune_idx``): the cost of the window, not of the history."""
    bucket = func.floor(cast(func.extract("epoch", Job.finished_at), Double) / step) * step
    query = select(
        bucket.label("bucket"),
        func.count().filter(Job.status == JobStatus.SUCCEEDED).label("succeeded"),
        func.count().filter(Job.status == JobStatus.FAILED).label("failed"),
        func.count().filter(Job.status == JobStatus.CANCELLED).label("cancelled"),
        func.avg(_queue_wait()).label("wait"),
    ).where(*_window(namespace, seconds, kind))
    return query.group_by(bucket).order_by(bucket)


def kind_rates(namespace: str, seconds: float) -> Select[tuple[object, ...]]:
    """Each kind's live numbers over the last ``seconds``: jobs succeeded, failed and
    cancelled, the median and 95th percentile of their last attempt's run time (started
    to finished: from the job row when it keeps the attempt that ended it, migration
    0015, else from that attempt's history row, found by primary key), and the mean
    queue wait. Through each kind's range of the finished index."""
    ran = func.extract(
        "epoch",
        case(
            (Job.outcome.is_not(None), Job.finished_at - Job.started_at),
            else_=Execution.finished_at - Execution.started_at,
        ),
    )
    return (
        select(
            Job.kind.label("kind"),
            func.count().filter(Job.status == JobStatus.SUCCEEDED).label("succeeded"),
            func.count().filter(Job.status == JobStatus.FAILED).label("failed"),
            func.count().filter(Job.status == JobStatus.CANCELLED).label("cancelled"),
            func.percentile_cont(0.5).within_group(ran).label("p50"),
            func.percentile_cont(0.95).within_group(ran).label("p95"),
            func.avg(_queue_wait()).label("wait"),
        )
        .select_from(Job)
        .outerjoin(Execution, (Execution.job_id == Job.id) & (Execution.id == Job.execution_id))
        .where(*_window(namespace, seconds))
        .group_by(Job.kind)
        .order_by(Job.kind)
    )


def newest_job_id() -> Select[tuple[int | None]]:
    """The highest job id (the top of a bounded args search; one step down the primary key)."""
    return select(func.max(Job.id))


def search_jobs(
    namespace: str,
    status: JobStatus | None,
    kind: str | None,
    pattern: str,
    before_id: int,
    floor_id: int,
    limit: int,
) -> Select[tuple[object, ...]]:
    """Jobs whose args text contains ``pattern`` (an ILIKE pattern, escaped by the caller),
    newest first, among ids in [floor_id, before_id): no index can answer a substring
    search, so each page reads a bounded slice of the primary key instead of the table."""
    query = _job_filter(select(*JOB_COLUMNS), namespace, status, kind)
    return (
        query.where(
            Job.id < before_id,
            Job.id >= floor_id,
            cast(Job.args, Text).ilike(pattern, escape="\\"),
        )
        .order_by(Job.id.desc())
        .limit(limit)
    )


def failure_groups(namespace: str, seconds: float, limit: int) -> Select[tuple[object, ...]]:
    """Failed jobs of the last ``seconds`` grouped by kind and error type (one group for
    "card declined" of ``charge``, another for "child 2 broke" of ``report``): count,
    first and last seen, the newest one's id (the sample); through the time range of
    ``job_failed_idx`` (failed rows only, migration 0017)."""
    error_type = func.coalesce(Job.last_error["type"].astext, "")
    return (
        select(
            Job.kind.label("kind"),
            error_type.label("error_type"),
            func.count().label("count"),
            func.min(Job.finished_at).label("first_seen"),
            func.max(Job.finished_at).label("last_seen"),
            func.max(Job.id).label("sample_id"),
        )
        .where(*_failed_window(namespace, seconds))
        .group_by(Job.kind, error_type)
        .order_by(func.count().desc(), Job.kind, error_type)
        .limit(limit)
    )


def failed_ids(
    namespace: str, error_type: str, seconds: float, limit: int, kind: str | None = None
) -> Select[tuple[int]]:
    """Ids of one failure group (failed in the last ``seconds`` with this error type; ""
    for no recorded type; of ``kind``, None: of any kind), newest first, at most ``limit``
    (a group action's batch); through the time range of ``job_failed_idx``."""
    query = select(Job.id).where(
        *_failed_window(namespace, seconds),
        func.coalesce(Job.last_error["type"].astext, "") == error_type,
    )
    if kind is not None:
        query = query.where(Job.kind == kind)
    return query.order_by(Job.id.desc()).limit(limit)


def last_errors(job_ids: list[int]) -> Select[tuple[int, Any]]:
    """(id, last_error) of the given jobs (a failure group's sample message)."""
    return select(Job.id, Job.last_error).where(Job.id.in_(job_ids))


def in_flight(namespace: str) -> Select[tuple[int | None, int]]:
    """(worker_id, count) of the namespace's executing jobs, through the lease index."""
    return (
        select(Job.worker_id, func.count())
        .where(
            Job.namespace == namespace,
            Job.lease_expires_at.is_not(None),
            Job.status == JobStatus.EXECUTING,
        )
        .group_by(Job.worker_id)
    )


def list_locks(namespace: str, limit: int) -> Select[tuple[object, ...]]:
    """The namespace's named locks as held now: name, holder job and worker, since when,
    until when (a lease its worker's heartbeat renews)."""
    return (
        select(
            Lock.name,
            Lock.job_id,
            Lock.execution_id,
            Lock.worker_id,
            Lock.acquired_at,
            Lock.lease_expires_at,
        )
        .where(Lock.namespace == namespace)
        .order_by(Lock.name)
        .limit(limit)
    )


def _inline(status: JobStatus) -> Any:
    """A status written into the statement, not bound: a partial index's predicate is
    matched by the planner against constants (a generic plan's parameters never match)."""
    return literal_column(f"'{status.value}'")


def _job_namespaces(name: str, *where: Any) -> Any:
    """The distinct namespaces of the jobs matching ``where`` (a partial index's predicate,
    leading with the namespace), by a skip scan: one index probe per namespace, whatever
    the number of jobs (a recursive CTE; NULL ends it)."""
    first = select(Job.namespace.label("ns")).where(*where).order_by(Job.namespace).limit(1)
    found = first.cte(name, recursive=True)
    following = (
        select(Job.namespace)
        .where(*where, Job.namespace > found.c.ns)
        .order_by(Job.namespace)
        .limit(1)
        .scalar_subquery()
    )
    found = found.union_all(select(following).where(found.c.ns.is_not(None)))
    return select(found.c.ns).where(found.c.ns.is_not(None))


def list_namespaces(limit: int) -> Select[tuple[str]]:
    """The namespaces this database knows of (``acta status``, the dashboard's namespace
    switcher): those workers registered, with workers or definitions, and those with
    ready, executing or finished jobs (jobs enqueued before any worker started: their
    namespace has no row yet). The jobs' by skip scans of job_due_idx, job_lease_idx and
    job_prune_idx, never a scan of acta.job."""
    known = union(
        select(Namespace.name.label("name")),
        select(Worker.namespace),
        select(Definition.namespace),
        _job_namespaces("ready_ns", Job.status == _inline(JobStatus.READY)),
        _job_namespaces(
            "executing_ns",
            Job.status == _inline(JobStatus.EXECUTING),
            Job.lease_expires_at.is_not(None),
        ),
        _job_namespaces("finished_ns", Job.status.in_([_inline(s) for s in TERMINAL_STATUSES])),
    ).subquery("known")
    return select(known.c.name).order_by(known.c.name).limit(limit)


def delete_finished_jobs(job_ids: list[int]) -> Delete:
    """An operator's delete: the given jobs, if finished (an active job is never deleted
    under its worker); RETURNING the ids deleted."""
    return (
        delete(Job).where(Job.id.in_(job_ids), Job.status.in_(TERMINAL_STATUSES)).returning(Job.id)
    )


def delete_history(job_ids: list[int]) -> Delete:
    """The recorded attempts of deleted jobs (as retention deletes them with their job)."""
    return delete(Execution).where(Execution.job_id.in_(job_ids))


def last_traceback(job_id: int) -> Select[tuple[str | None]]:
    """The traceback of a job's latest attempt that recorded one."""
    return (
        select(_A.traceback)
        .where(_A.job_id == job_id, _A.traceback.is_not(None))
        .order_by(_A.finished_at.desc(), _A.attempt.desc())
        .limit(1)
    )


def list_definitions(namespace: str) -> Select[tuple[object, ...]]:
    """A namespace's kinds with their declared policy and an operator's overrides."""
    return (
        select(Definition.kind, Definition.declared, Definition.overrides, Definition.updated_at)
        .where(Definition.namespace == namespace)
        .order_by(Definition.kind)
    )


# ------------------------------------------------------------------ lanes, keys, schedules


def _active() -> Any:
    return Job.status.in_((JobStatus.READY, JobStatus.EXECUTING, JobStatus.WAITING))


def list_lanes(namespace: str, limit: int) -> Select[tuple[object, ...]]:
    """The namespace's lanes with unfinished jobs: (lane, jobs, oldest id), by lane. By
    ``job_lane_idx`` (unfinished laned jobs only)."""
    return (
        select(Job.lane_key, func.count(), func.min(Job.id))
        .where(Job.namespace == namespace, Job.lane_key.is_not(None), _active())
        .group_by(Job.lane_key)
        .order_by(Job.lane_key)
        .limit(limit)
    )


def lane_heads(namespace: str, lanes: list[str]) -> Select[tuple[object, ...]]:
    """Each lane's head: its job that is not queued behind another (ready or executing, or
    in a durable wait of its own), else its oldest. By ``job_lane_idx``."""
    queued = (
        (Job.status == JobStatus.WAITING)
        & Job.awaited_signal.is_(None)
        & (Job.pending_children == 0)
    )
    return (
        select(*JOB_COLUMNS, Job.lane_key)
        .where(Job.namespace == namespace, Job.lane_key.in_(lanes), _active())
        .order_by(Job.lane_key, queued, Job.id)
        .ext(distinct_on(Job.lane_key))
    )


def lane_jobs(namespace: str, lane: str, limit: int) -> Select[tuple[object, ...]]:
    """A lane's unfinished jobs in run order: its head, then the queued ones by id (the
    order the hand-on takes them)."""
    queued = (
        (Job.status == JobStatus.WAITING)
        & Job.awaited_signal.is_(None)
        & (Job.pending_children == 0)
    )
    return (
        select(
            *JOB_COLUMNS,
            Job.worker_id,
            Job.claimed_at,
            Job.concurrency_key,
            Job.awaited_signal,
            Job.pending_children,
        )
        .where(Job.namespace == namespace, Job.lane_key == lane, _active())
        .order_by(queued, Job.id)
        .limit(limit)
    )


def list_concurrency_keys(namespace: str, limit: int) -> Select[tuple[object, ...]]:
    """Concurrency keys in use: slots held and jobs ready behind each, by key."""
    held = (
        select(ConcurrencySlot.key.label("key"), func.count().label("held"))
        .where(ConcurrencySlot.namespace == namespace)
        .group_by(ConcurrencySlot.key)
        .subquery()
    )
    queued = (
        select(Job.concurrency_key.label("key"), func.count().label("queued"))
        .where(
            Job.namespace == namespace,
            Job.status == JobStatus.READY,
            Job.concurrency_key.is_not(None),
        )
        .group_by(Job.concurrency_key)
        .subquery()
    )
    key = func.coalesce(held.c.key, queued.c.key)
    return (
        select(
            key.label("key"),
            func.coalesce(held.c.held, 0).label("held"),
            func.coalesce(queued.c.queued, 0).label("queued"),
        )
        .select_from(held.join(queued, held.c.key == queued.c.key, full=True))
        .order_by(key)
        .limit(limit)
    )


def key_slots(namespace: str, key: str) -> Select[tuple[object, ...]]:
    """The slots of one concurrency key: (job, execution, worker, acquired), by time."""
    return (
        select(
            ConcurrencySlot.job_id,
            ConcurrencySlot.execution_id,
            ConcurrencySlot.worker_id,
            ConcurrencySlot.acquired_at,
        )
        .where(ConcurrencySlot.namespace == namespace, ConcurrencySlot.key == key)
        .order_by(ConcurrencySlot.acquired_at)
    )


def key_jobs(namespace: str, key: str, limit: int) -> Select[tuple[object, ...]]:
    """The unfinished jobs of one concurrency key, in claim order."""
    return (
        select(*JOB_COLUMNS)
        .where(Job.namespace == namespace, Job.concurrency_key == key, _active())
        .order_by(Job.priority, Job.run_at, Job.id)
        .limit(limit)
    )


def key_kinds(namespace: str, key: str) -> Select[tuple[object, ...]]:
    """The kinds with unfinished jobs of one key, and their definitions (for the limit)."""
    kinds = (
        select(Job.kind)
        .where(Job.namespace == namespace, Job.concurrency_key == key, _active())
        .distinct()
        .subquery()
    )
    return (
        select(kinds.c.kind, Definition.declared, Definition.overrides)
        .select_from(kinds)
        .outerjoin(
            Definition, (Definition.namespace == namespace) & (Definition.kind == kinds.c.kind)
        )
        .order_by(kinds.c.kind)
    )


def rate_meter(namespace: str, key: str) -> Select[tuple[object, ...]]:
    """One rate key's meter: when it admits next."""
    return select(RateMeter.next_at, RateMeter.booked, RateMeter.updated_at).where(
        RateMeter.namespace == namespace, RateMeter.key == key
    )


def list_schedule_rows(namespace: str) -> Select[tuple[object, ...]]:
    """The namespace's schedules with their pending fire and their latest finished fire."""
    fires = Job.__table__.alias("fire")
    pending = (
        select(func.min(fires.c.scheduled_at))
        .where(
            fires.c.namespace == namespace,
            fires.c.schedule_name == Schedule.name,
            fires.c.status.in_(("ready", "executing", "waiting")),
        )
        .scalar_subquery()
    )
    last = (
        select(fires.c.scheduled_at, fires.c.status, fires.c.id)
        .where(
            fires.c.namespace == namespace,
            fires.c.schedule_name == Schedule.name,
            fires.c.status.in_(("succeeded", "failed", "cancelled")),
        )
        .order_by(fires.c.scheduled_at.desc())
        .limit(1)
        .lateral("last")
    )
    return (
        select(
            Schedule.name,
            Schedule.cron,
            Schedule.timezone,
            Schedule.kind,
            Schedule.args,
            Schedule.missed,
            Schedule.enabled,
            pending.label("next_fire"),
            last.c.scheduled_at.label("last_fire"),
            last.c.status.label("last_status"),
            last.c.id.label("last_job_id"),
        )
        .select_from(Schedule)
        .outerjoin(last, true())
        .where(Schedule.namespace == namespace)
        .order_by(Schedule.name)
    )
