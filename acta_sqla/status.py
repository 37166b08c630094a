"""The statuses of jobs and workers (a module of its own, free of SQLAlchemy, so that the
CLI and the worker can name them without loading the ORM)."""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    READY = "ready"
    EXECUTING = "executing"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_STATUSES = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)
ACTIVE_STATUSES = (JobStatus.READY, JobStatus.EXECUTING, JobStatus.WAITING)


class WorkerStatus(StrEnum):
    RUNNING = "running"
    STOPPED = "stopped"
    DEAD = "dead"
