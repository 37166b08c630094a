"""The read model: what an operator looks at, as plain frozen values (the ``acta status``
and ``acta jobs`` commands and the dashboard use it).

Each function runs one or two statements of ``queries.inspect`` on the caller's
``AsyncSession`` (its engine may map acta's schema with ``engine_options``) and changes
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .queries import inspect as q
from .status import JobStatus, WorkerStatus

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

__all__ = [
    "Count",
    "ExecutionRow",
    "FailureGroup",
    "JobDetail",
    "JobPage",
    "JobRow",
    "LockRow",
    "Overview",
    "SearchPage",
    "WorkerRow",
    "count_jobs",
    "estimate_jobs",
    "failed_ids",
    "failure_groups",
    "in_flight",
    "job_detail",
    "last_traceback",
    "list_jobs",
    "locks",
    "namespaces",
    "overview",
    "queue_depth",
    "search_jobs",
    "workers",
]


@dataclass(frozen=True, slots=True)
class JobRow:
    id: int
    namespace: str
    kind: str
    status: JobStatus
    priority: int
    attempts: int
    max_attempts: int | None
    run_at: datetime
    created_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class ExecutionRow:
    """One recorded attempt; ``id`` is its execution id (the fencing token)."""

    id: int
    attempt: int
    outcome: str
    worker_id: int | None
    claimed_at: datetime | None
    started_at: datetime | None
    finished_at: datetime
    error_type: str | None
    error_message: str | None


@dataclass(frozen=True, slots=True)
class JobDetail(JobRow):
    args: dict[str, Any]
    result: Any
    last_error: dict[str, Any] | None
    unique_key: str | None
    concurrency_key: str | None
    rate_key: str | None
    lane_key: str | None
    parent_id: int | None
    execution_id: int | None
    worker_id: int | None
    claimed_at: datetime | None
    started_at: datetime | None
    lease_expires_at: datetime | None
    cancel_requested: bool
    awaited_signal: str | None = None
    """The signal a waiting job waits for (None: not a signal wait)."""
    pending_children: int = 0
    """Children a waiting parent still waits for."""
    signals: dict[str, Any] | None = None
    """Every signal the job has received, by name, with its payload."""
    resumed: str | None = None
    """Why the job last left a wait (``signal``, ``timeout``, ``children``)."""
    executions: tuple[ExecutionRow, ...] = ()
    children: tuple[JobRow, ...] = ()
    """The jobs it spawned with ``WaitForChildren``, in spawn order."""


@dataclass(frozen=True, slots=True)
class JobPage:
    jobs: tuple[JobRow, ...]
    next_before_id: int | None
    """Pass as ``before_id`` for the next page; None when this page is the last."""


@dataclass(frozen=True, slots=True)
class WorkerRow:
    id: int
    status: WorkerStatus
    hostname: str
    pid: int
    executors: int
    heartbeat_seconds: float
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None


def _make(cls: type[Any], row: Any, **extra: Any) -> Any:
    """``cls`` from a result row, field by column name (a column the statement does not
    select fails here, not as a silently shifted value)."""
    mapping = row._mapping
    return cls(**{f.name: mapping[f.name] for f in fields(cls) if f.name not in extra}, **extra)


async def queue_depth(session: AsyncSession, namespace: str) -> dict[str, dict[JobStatus, int]]:
    """Jobs by kind, then by status: ``{"send_mail": {JobStatus.READY: 12, ...}}``; a
    status a kind has no job in is absent."""
    depth: dict[str, dict[JobStatus, int]] = {}
    for kind, status, count in (await session.execute(q.queue_depth(namespace))).all():
        depth.setdefault(kind, {})[JobStatus(status)] = int(count)
    return depth


async def workers(session: AsyncSession, namespace: str, limit: int = 20) -> list[WorkerRow]:
    """The namespace's newest worker rows, newest first."""
    rows = (await session.execute(q.list_workers(namespace, limit))).all()
    return [_make(WorkerRow, r) for r in rows]


async def list_jobs(
    session: AsyncSession,
    *,
    namespace: str | None = None,
    status: JobStatus | None = None,
    kind: str | None = None,
    before_id: int | None = None,
    limit: int = 50,
) -> JobPage:
    """Jobs newest first, filtered by namespace, status and kind; ``before_id`` (the
    previous page's ``next_before_id``) continues a listing."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    query = q.list_jobs(namespace, status, kind, before_id, limit + 1)
    rows = (await session.execute(query)).all()
    jobs = tuple(_make(JobRow, r) for r in rows[:limit])
    more = len(rows) > limit
    return JobPage(jobs=jobs, next_before_id=jobs[-1].id if more and jobs else None)


async def job_detail(session: AsyncSession, job_id: int) -> JobDetail | None:
    """One job in full with its recorded attempts; None if there is no such job."""
    row = (await session.execute(q.job_detail(job_id))).first()
    if row is None:
        return None
    history = (await session.execute(q.job_executions(job_id))).all()
    children = (await session.execute(q.job_children(job_id))).all()
    return _make(
        JobDetail,
        row,
        executions=tuple(_make(ExecutionRow, e) for e in history),
        children=tuple(_make(JobRow, c) for c in children),
    )


# ------------------------------------------------------------------ the dashboard's pages


@dataclass(frozen=True, slots=True)
class Overview:
    """One namespace at a glance, at the cost of its backlog, not of its history."""

    active: dict[str, dict[JobStatus, int]]
    """Ready and executing jobs by kind, exact (read through the claim and lease indexes)."""
    estimated: dict[JobStatus, int]
    """Every status's job count: exact up to ``EXACT_UP_TO``, the planner's estimate above
    (``counts`` says which)."""
    last_hour: dict[str, dict[JobStatus, int]]
    """Jobs finished in the last hour by kind and outcome, exact."""
    workers: list[WorkerRow]
    in_flight: dict[int | None, int]
    """Executing jobs by worker id."""
    counts: dict[JobStatus, Count] = field(default_factory=dict)
    """``estimated`` with whether each is exact."""
    scheduled: Count | None = None
    """Ready jobs scheduled for later (none charged yet)."""
    retrying: Count | None = None
    """Ready jobs waiting out a retry's back-off."""


EXACT_UP_TO = 10_000
"""Counts up to this many jobs are exact (a count that stops one row past it); above, the
planner's estimate is shown, marked as one."""
COUNT_SCAN_BOUND = 200_000
"""A filtered count is exact only in a namespace of at most this many jobs (as the
planner estimates it): the rows such a count may read to find a small set."""


@dataclass(frozen=True, slots=True)
class Count:
    """A number of jobs, and whether it is exact or the planner's estimate (a count above
    ``EXACT_UP_TO``, or of a table whose statistics say so)."""

    value: int
    exact: bool

    def __str__(self) -> str:
        return f"{self.value:,}" if self.exact else f"≈ {self.value:,}"


@dataclass(frozen=True, slots=True)
class SearchPage:
    """A page of an args search: ``jobs`` found among ids [floor_id, before_id). Fewer
    jobs than asked does not mean the end: ``next_before_id`` continues further down;
    None when the search reached the oldest job."""

    jobs: tuple[JobRow, ...]
    next_before_id: int | None
    floor_id: int


@dataclass(frozen=True, slots=True)
class FailureGroup:
    kind: str
    error_type: str
    """The exception's type name; "" when the failure recorded none."""
    count: int
    first_seen: datetime
    last_seen: datetime
    sample_id: int
    sample_message: str | None


@dataclass(frozen=True, slots=True)
class LockRow:
    name: str
    job_id: int
    execution_id: int
    worker_id: int | None
    acquired_at: datetime
    lease_expires_at: datetime


def _by_kind(rows: Any) -> dict[str, dict[JobStatus, int]]:
    out: dict[str, dict[JobStatus, int]] = {}
    for kind, status, count in rows:
        out.setdefault(kind, {})[JobStatus(status)] = int(count)
    return dict(sorted(out.items()))


async def estimate_jobs(
    session: AsyncSession,
    namespace: str,
    status: JobStatus | None = None,
    kind: str | None = None,
) -> int:
    """How many jobs match, as the planner estimates it from the table's statistics (as
    fresh as the last ANALYZE/autovacuum): costs a plan, not a scan."""
    plan = (await session.execute(q.estimate_jobs(namespace, status, kind))).scalar_one()
    if isinstance(plan, str):  # a driver that does not decode json
        import json

        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


async def count_jobs(
    session: AsyncSession,
    namespace: str,
    status: JobStatus | None = None,
    kind: str | None = None,
) -> Count:
    """How many jobs match: exact up to ``EXACT_UP_TO`` (a count that stops one row past
    it), the planner's estimate above. The estimate decides first: a table the planner
    knows to hold millions of matching rows is not counted at all; a small or never
    analysed one (estimated "1" with 48 failed) is counted. A filtered count is exact in a
    namespace of up to ``COUNT_SCAN_BOUND`` jobs (what it may read to find the set)."""
    estimate = await estimate_jobs(session, namespace, status, kind)
    if estimate > EXACT_UP_TO:
        return Count(estimate, exact=False)
    if status is not None or kind is not None:
        # No index holds a status (or a kind) of every job: the count of a small set may
        # have to read the namespace's rows to find it. Bounded: only a namespace the
        # planner puts at COUNT_SCAN_BOUND jobs or fewer is counted; a bigger one has
        # statistics (autovacuum analyses a table as it grows), so its estimate is shown.
        if await estimate_jobs(session, namespace) > COUNT_SCAN_BOUND:
            return Count(estimate, exact=False)
    query = q.count_jobs_up_to(namespace, status, kind, EXACT_UP_TO + 1)
    counted = int((await session.execute(query)).scalar_one())
    if counted <= EXACT_UP_TO:
        return Count(counted, exact=True)
    return Count(max(estimate, counted), exact=False)


async def _plan_rows(session: AsyncSession, explain: Any) -> int:
    plan = (await session.execute(explain)).scalar_one()
    if isinstance(plan, str):  # a driver that does not decode json
        import json

        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


@dataclass(frozen=True, slots=True)
class DueRow(JobRow):
    last_error: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class DuePage:
    """A page of the Scheduled or Retrying view, soonest first."""

    jobs: tuple[DueRow, ...]
    next_after: tuple[datetime, int] | None
    """(run_at, id) to continue after; None on the last page."""
    total: Count


async def due_later(
    session: AsyncSession,
    namespace: str,
    *,
    retrying: bool,
    after: tuple[datetime, int] | None = None,
    limit: int = 50,
) -> DuePage:
    """Ready jobs due later, soonest first: retries waiting out their back-off
    (``retrying``: attempts charged) or jobs scheduled for later (none charged)."""
    rows = (await session.execute(q.due_later(namespace, retrying, after, limit + 1))).all()
    jobs = tuple(_make(DueRow, r) for r in rows[:limit])
    more = len(rows) > limit
    last = (jobs[-1].run_at, jobs[-1].id) if more and jobs else None
    total = await count_due_later(session, namespace, retrying=retrying)
    return DuePage(jobs=jobs, next_after=last, total=total)


async def count_due_later(session: AsyncSession, namespace: str, *, retrying: bool) -> Count:
    """How many jobs the Scheduled (or Retrying) view holds, as :func:`count_jobs` counts."""
    estimate = await _plan_rows(session, q.estimate_due_later(namespace, retrying))
    if estimate > EXACT_UP_TO:
        return Count(estimate, exact=False)
    query = q.count_due_later(namespace, retrying, EXACT_UP_TO + 1)
    counted = int((await session.execute(query)).scalar_one())
    return Count(counted, True) if counted <= EXACT_UP_TO else Count(counted, False)


async def overview(session: AsyncSession, namespace: str) -> Overview:
    """The overview page: backlog exact, history exact up to ``EXACT_UP_TO`` and estimated
    above, the last hour exact."""
    active = _by_kind((await session.execute(q.active_depth(namespace))).all())
    counts: dict[JobStatus, Count] = {}
    for status in JobStatus:
        if status in (JobStatus.READY, JobStatus.EXECUTING):
            # Exact from the claim and lease indexes, however many.
            counts[status] = Count(sum(c.get(status, 0) for c in active.values()), True)
        else:
            counts[status] = await count_jobs(session, namespace, status)
    estimated = {s: c.value for s, c in counts.items()}
    last_hour = _by_kind((await session.execute(q.finished_since(namespace, 3600.0))).all())
    flying = {w: int(c) for w, c in (await session.execute(q.in_flight(namespace))).all()}
    return Overview(
        active=active,
        estimated=estimated,
        last_hour=last_hour,
        workers=await workers(session, namespace),
        in_flight=flying,
        counts=counts,
        scheduled=await count_due_later(session, namespace, retrying=False),
        retrying=await count_due_later(session, namespace, retrying=True),
    )


@dataclass(frozen=True, slots=True)
class Bucket:
    """One bucket of a chart: jobs that finished in [start, start + step)."""

    start: datetime
    succeeded: int
    failed: int
    cancelled: int
    wait: float | None
    """Mean seconds from due to claimed of those jobs' last attempts (None: none)."""


@dataclass(frozen=True, slots=True)
class Series:
    """The charts' data: every bucket of the window, oldest first (empty ones zero)."""

    seconds: float
    step: float
    kind: str | None
    buckets: tuple[Bucket, ...]


async def history(
    session: AsyncSession,
    namespace: str,
    *,
    seconds: float = 3600.0,
    step: float = 60.0,
    kind: str | None = None,
) -> Series:
    """Jobs finished over the last ``seconds`` in buckets of ``step`` (per minute over the
    last hour by default; per hour over a day: ``seconds=86400, step=3600``), of one
    ``kind`` or all: throughput, failures, cancels and queue wait, for the charts."""
    if not 0 < step <= seconds or seconds / step > 1440:
        raise ValueError(f"step must be in (0, seconds] with at most 1440 buckets, got {step}")
    query = q.finished_series(namespace, seconds, step, kind)
    found = {int(r.bucket): r for r in (await session.execute(query)).all()}
    now = datetime.now(UTC).timestamp()
    first = int((now - seconds) // step * step)
    buckets = []
    for start in range(first, int(now // step * step) + 1, int(step)):
        r = found.get(start)
        buckets.append(
            Bucket(
                start=datetime.fromtimestamp(start, UTC),
                succeeded=int(r.succeeded) if r else 0,
                failed=int(r.failed) if r else 0,
                cancelled=int(r.cancelled) if r else 0,
                wait=float(r.wait) if r is not None and r.wait is not None else None,
            )
        )
    return Series(seconds=seconds, step=step, kind=kind, buckets=tuple(buckets))


@dataclass(frozen=True, slots=True)
class KindRate:
    """One kind's live numbers over the last ``seconds``."""

    kind: str
    seconds: float
    succeeded: int
    failed: int
    cancelled: int
    p50: float | None
    """Median run time (seconds, started to finished) of the jobs' last attempts."""
    p95: float | None
    wait: float | None
    """Mean seconds from due to claimed."""

    @property
    def per_minute(self) -> float:
        """Jobs finished per minute."""
        return (self.succeeded + self.failed + self.cancelled) * 60.0 / self.seconds

    @property
    def error_percent(self) -> float | None:
        """Failed among those that succeeded or failed, in percent (None: neither)."""
        ended = self.succeeded + self.failed
        return 100.0 * self.failed / ended if ended else None


async def kind_rates(
    session: AsyncSession, namespace: str, seconds: float = 300.0
) -> dict[str, KindRate]:
    """Each kind's rate, latency and error percentage over the last ``seconds`` (5 min)."""
    rows = (await session.execute(q.kind_rates(namespace, seconds))).all()

    def number(value: Any) -> float | None:
        return None if value is None else float(value)

    return {
        r.kind: KindRate(
            kind=r.kind,
            seconds=seconds,
            succeeded=int(r.succeeded),
            failed=int(r.failed),
            cancelled=int(r.cancelled),
            p50=number(r.p50),
            p95=number(r.p95),
            wait=number(r.wait),
        )
        for r in rows
    }


async def in_flight(session: AsyncSession, namespace: str) -> dict[int | None, int]:
    """Executing jobs by worker id."""
    return {w: int(c) for w, c in (await session.execute(q.in_flight(namespace))).all()}


def like_pattern(text: str) -> str:
    """``text`` as an ILIKE pattern that matches it literally anywhere (``%`` and ``_``
    in it match themselves)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


async def search_jobs(
    session: AsyncSession,
    *,
    namespace: str,
    text: str,
    status: JobStatus | None = None,
    kind: str | None = None,
    before_id: int | None = None,
    window: int = 50_000,
    limit: int = 50,
) -> SearchPage:
    """Jobs whose args (as JSON text) contain ``text``, newest first, reading at most
    ``window`` ids of the primary key per call: a rare match costs pages, never a scan of
    the whole table in one request."""
    if limit < 1 or window < 1:
        raise ValueError(f"limit and window must be >= 1, got {limit} and {window}")
    if before_id is None:
        top = (await session.execute(q.newest_job_id())).scalar_one()
        if top is None:
            return SearchPage(jobs=(), next_before_id=None, floor_id=0)
        before_id = int(top) + 1
    floor_id = max(before_id - window, 1)
    query = q.search_jobs(
        namespace, status, kind, like_pattern(text), before_id, floor_id, limit + 1
    )
    rows = (await session.execute(query)).all()
    jobs = tuple(_make(JobRow, r) for r in rows[:limit])
    if len(rows) > limit:
        next_before: int | None = jobs[-1].id
    else:
        next_before = floor_id if floor_id > 1 else None
    return SearchPage(jobs=jobs, next_before_id=next_before, floor_id=floor_id)


async def failure_groups(
    session: AsyncSession, namespace: str, seconds: float = 86_400.0, limit: int = 100
) -> list[FailureGroup]:
    """Failed jobs of the last ``seconds`` grouped by kind and error type, biggest group
    first, each with its newest job as the sample."""
    rows = (await session.execute(q.failure_groups(namespace, seconds, limit))).all()
    samples: dict[int, Any] = {}
    if rows:
        ids = [int(r.sample_id) for r in rows]
        samples = dict((await session.execute(q.last_errors(ids))).all())
    return [
        FailureGroup(
            kind=r.kind,
            error_type=r.error_type,
            count=int(r.count),
            first_seen=r.first_seen,
            last_seen=r.last_seen,
            sample_id=int(r.sample_id),
            sample_message=(samples.get(int(r.sample_id)) or {}).get("message"),
        )
        for r in rows
    ]


async def failed_ids(
    session: AsyncSession,
    namespace: str,
    error_type: str,
    seconds: float,
    limit: int,
    kind: str | None = None,
) -> list[int]:
    """The ids of one failure group (as ``failure_groups`` counts it: of ``kind``, None
    for every kind's failures of that error type), at most ``limit``."""
    query = q.failed_ids(namespace, error_type, seconds, limit, kind)
    return [int(i) for i in (await session.execute(query)).scalars()]


async def locks(session: AsyncSession, namespace: str, limit: int = 500) -> list[LockRow]:
    """The namespace's named locks held now, by name."""
    rows = (await session.execute(q.list_locks(namespace, limit))).all()
    return [_make(LockRow, r) for r in rows]


async def namespaces(session: AsyncSession, limit: int = 200) -> list[str]:
    """The namespaces workers have registered, by name."""
    return [str(n) for n in (await session.execute(q.list_namespaces(limit))).scalars()]


async def last_traceback(session: AsyncSession, job_id: int) -> str | None:
    """The traceback of the job's latest attempt that recorded one, if any."""
    return (await session.execute(q.last_traceback(job_id))).scalar_one_or_none()


@dataclass(frozen=True, slots=True)
class DefinitionRow:
    """One kind's policy in a namespace: the effective one (declared, overrides on top),
    and which fields an operator overrode."""

    kind: str
    effective: dict[str, Any]
    overridden: frozenset[str]
    updated_at: datetime


async def definitions(session: AsyncSession, namespace: str) -> list[DefinitionRow]:
    """Every stored kind of ``namespace`` with its effective policy."""
    out = []
    for kind, declared, overrides, updated_at in (
        await session.execute(q.list_definitions(namespace))
    ).all():
        effective = {**declared, **overrides}
        out.append(DefinitionRow(kind, effective, frozenset(overrides), updated_at))
    return out


async def attempt_budgets(session: AsyncSession, namespace: str) -> dict[str, int]:
    """Each stored kind's failure budget now (its effective ``max_attempts``): the size of
    the budget of a job that set none of its own."""
    from .policy import DEFAULT_MAX_ATTEMPTS

    return {
        d.kind: int(d.effective.get("max_attempts") or DEFAULT_MAX_ATTEMPTS)
        for d in await definitions(session, namespace)
    }


def budget_of(job: JobRow, budgets: dict[str, int]) -> int:
    """A job's failure budget: its own ``max_attempts``, else its kind's (as the worker
    reads it), else the default of a kind no worker has stored yet."""
    from .policy import DEFAULT_MAX_ATTEMPTS

    if job.max_attempts is not None:
        return job.max_attempts
    return budgets.get(job.kind, DEFAULT_MAX_ATTEMPTS)


async def namespace_summaries(
    session: AsyncSession, limit: int = 200
) -> list[tuple[str, dict[JobStatus, int], int]]:
    """Each namespace: its jobs by status, and its workers alive (``acta status`` without
    ``--namespace``)."""
    out = []
    for ns in await namespaces(session, limit):
        depth: dict[JobStatus, int] = {}
        for counts in (await queue_depth(session, ns)).values():
            for status, n in counts.items():
                depth[status] = depth.get(status, 0) + n
        alive = sum(1 for w in await workers(session, ns, 1000) if w.status.value == "running")
        out.append((ns, depth, alive))
    return out


# ------------------------------------------------------------------ lanes, keys, schedules


@dataclass(frozen=True, slots=True)
class LaneRow:
    lane: str
    jobs: int
    head: JobRow | None


@dataclass(frozen=True, slots=True)
class LaneJob(JobRow):
    worker_id: int | None
    claimed_at: datetime | None
    concurrency_key: str | None
    awaited_signal: str | None
    pending_children: int


async def lanes(session: AsyncSession, namespace: str, limit: int = 200) -> list[LaneRow]:
    """The namespace's lanes with unfinished jobs, each with its length and its head."""
    rows = (await session.execute(q.list_lanes(namespace, limit))).all()
    if not rows:
        return []
    heads = {
        r.lane_key: _make(JobRow, r)
        for r in (await session.execute(q.lane_heads(namespace, [r[0] for r in rows]))).all()
    }
    return [LaneRow(lane, int(n), heads.get(lane)) for lane, n, _ in rows]


async def lane(session: AsyncSession, namespace: str, key: str, limit: int = 500) -> list[LaneJob]:
    """A lane's unfinished jobs in run order (its head first)."""
    rows = (await session.execute(q.lane_jobs(namespace, key, limit))).all()
    return [_make(LaneJob, r) for r in rows]


def head_waits_on(head: LaneJob, paused: bool) -> str:
    """What a lane's head (the job the lane runs next) waits on, in words."""
    if head.status is JobStatus.EXECUTING:
        return f"running on worker #{head.worker_id}" if head.worker_id else "running"
    if head.status is JobStatus.WAITING:
        if head.awaited_signal is not None:
            return f"waiting for signal {head.awaited_signal!r}"
        if head.pending_children:
            return f"waiting for {head.pending_children} child job(s)"
        return "queued behind an unfinished job of the lane"
    if paused:
        return f"its kind {head.kind!r} is paused"
    if head.concurrency_key is not None:
        return f"due; needs a free slot of concurrency key {head.concurrency_key!r}"
    return "due: the next free executor takes it"


@dataclass(frozen=True, slots=True)
class KeyRow:
    key: str
    held: int
    queued: int


@dataclass(frozen=True, slots=True)
class SlotRow:
    job_id: int
    execution_id: int
    worker_id: int | None
    acquired_at: datetime


@dataclass(frozen=True, slots=True)
class KeyDetail:
    key: str
    slots: tuple[SlotRow, ...]
    jobs: tuple[JobRow, ...]
    limits: dict[str, int]
    """kind -> its effective concurrency limit, for the kinds with unfinished jobs here."""
    rate_next_at: datetime | None


async def concurrency_keys(session: AsyncSession, namespace: str, limit: int = 200) -> list[KeyRow]:
    """Concurrency keys in use: slots held and ready jobs behind each."""
    rows = (await session.execute(q.list_concurrency_keys(namespace, limit))).all()
    return [KeyRow(str(k), int(h), int(n)) for k, h, n in rows]


async def concurrency_key(
    session: AsyncSession, namespace: str, key: str, limit: int = 200
) -> KeyDetail:
    """One key: its slots, its unfinished jobs, its kinds' limits, its rate meter."""
    slots = tuple(_make(SlotRow, r) for r in (await session.execute(q.key_slots(namespace, key))))
    jobs = tuple(
        _make(JobRow, r) for r in (await session.execute(q.key_jobs(namespace, key, limit)))
    )
    limits = {}
    for kind, declared, overrides in (await session.execute(q.key_kinds(namespace, key))).all():
        effective = {**(declared or {}), **(overrides or {})}
        limits[str(kind)] = int(effective.get("concurrency_limit") or 1)
    meter = (await session.execute(q.rate_meter(namespace, key))).first()
    return KeyDetail(key, slots, jobs, limits, meter[0] if meter else None)


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    name: str
    cron: str
    timezone: str
    kind: str
    args: dict[str, Any]
    missed: str
    enabled: bool
    next_fire: datetime | None
    last_fire: datetime | None
    last_status: str | None
    last_job_id: int | None


async def schedules(session: AsyncSession, namespace: str) -> list[ScheduleRow]:
    """The namespace's schedules, each with its next fire and its latest finished one."""
    rows = (await session.execute(q.list_schedule_rows(namespace))).all()
    return [_make(ScheduleRow, r) for r in rows]
