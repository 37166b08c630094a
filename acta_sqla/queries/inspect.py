"""The read model's statements: what an operator looks at (the CLI today, the dashboard
tomorrow). SQLAlchemy Core on the application's session, so they honour
``schema_translate_map``; ``acta_sqla.inspect`` runs them and returns plain values."""

from __future__ import annotations

from sqlalchemy import Select, func, select

from ..models import Execution, Job, Worker
from ..status import JobStatus

JOB_COLUMNS = (
    Job.id,
    Job.namespace,
    Job.kind,
    Job.status,
    Job.priority,
    Job.attempts,
    Job.max_attempts,
    Job.run_at,
    Job.created_at,
    Job.finished_at,
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
    Job.claimed_at,
    Job.started_at,
    Job.lease_expires_at,
    Job.cancel_requested,
)
"""The columns of one job shown in full."""

EXECUTION_COLUMNS = (
    Execution.id,
    Execution.attempt,
    Execution.outcome,
    Execution.worker_id,
    Execution.claimed_at,
    Execution.started_at,
    Execution.finished_at,
    Execution.error_type,
    Execution.error_message,
)

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


def job_executions(job_id: int) -> Select[tuple[object, ...]]:
    """One job's recorded attempts, in the order they ended."""
    return (
        select(*EXECUTION_COLUMNS)
        .where(Execution.job_id == job_id)
        .order_by(Execution.finished_at, Execution.attempt)
    )
