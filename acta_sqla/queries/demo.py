"""The statements of ``acta demo``: SQLAlchemy Core on the demo's own session."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Delete, Select, delete, func, select

from ..models import TERMINAL_STATUSES, Execution, Job, attempt_history


def delete_namespace_history(namespace: str) -> Delete:
    """Delete the namespace's execution rows (before its jobs: the demo starts empty)."""
    jobs = select(Job.id).where(Job.namespace == namespace).scalar_subquery()
    return delete(Execution).where(Execution.job_id.in_(jobs))


def delete_namespace_jobs(namespace: str) -> Delete:
    """Delete every job of the namespace."""
    return delete(Job).where(Job.namespace == namespace)


def count_jobs_of_user(user_id: int) -> Select[tuple[int]]:
    """Jobs whose args name ``user_id`` (the rolled-back sign-up must have none)."""
    return select(func.count()).select_from(Job).where(Job.args["user_id"].as_integer() == user_id)


def count_finished(namespace: str) -> Select[tuple[int]]:
    """The namespace's jobs in a terminal state."""
    return (
        select(func.count())
        .select_from(Job)
        .where(Job.namespace == namespace, Job.status.in_(TERMINAL_STATUSES))
    )


def outcome_by_kind(namespace: str) -> Select[tuple[Any, ...]]:
    """(kind, status, count, average attempts) of the namespace's jobs."""
    return (
        select(Job.kind, Job.status, func.count(), func.avg(Job.attempts))
        .where(Job.namespace == namespace)
        .group_by(Job.kind, Job.status)
        .order_by(Job.kind)
    )


def last_error_of_kind(namespace: str, kind: str) -> Select[tuple[Any]]:
    """The last error of the namespace's job of ``kind``."""
    return select(Job.last_error).where(Job.namespace == namespace, Job.kind == kind)


def result_of_kind(namespace: str, kind: str) -> Select[tuple[Any]]:
    """The result of the namespace's job of ``kind``."""
    return select(Job.result).where(Job.namespace == namespace, Job.kind == kind)


def count_executions(namespace: str) -> Select[tuple[int]]:
    """Attempts recorded for the namespace's jobs."""
    return (
        select(func.count())
        .select_from(attempt_history)
        .join(Job, Job.id == attempt_history.c.job_id)
        .where(Job.namespace == namespace)
    )
