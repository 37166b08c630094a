"""The read model: what an operator looks at, as plain frozen values (the ``acta status``
and ``acta jobs`` commands use it today, the dashboard will tomorrow).

Each function runs one or two statements of ``queries.inspect`` on the caller's
``AsyncSession`` (its engine may map acta's schema with ``engine_options``) and changes
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .queries import inspect as q
from .status import JobStatus, WorkerStatus

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

__all__ = [
    "ExecutionRow",
    "JobDetail",
    "JobPage",
    "JobRow",
    "WorkerRow",
    "job_detail",
    "list_jobs",
    "queue_depth",
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
    executions: tuple[ExecutionRow, ...] = ()


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
    return _make(JobDetail, row, executions=tuple(_make(ExecutionRow, e) for e in history))
