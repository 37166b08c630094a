"""Every error acta-sqla raises on purpose. Each says what was wrong and what to do."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any


class ActaError(Exception):
    """Base class of acta-sqla's own errors."""


class ConfigurationError(ActaError):
    """A setting or option has a value acta cannot use."""


class InvalidJob(ActaError):
    """A job cannot be enqueued as given (bad args, bad options, unknown kind)."""


class InvalidJobArgs(InvalidJob):
    """The args of a job failed validation against its handler's signature, or are not JSON."""


class UnknownJobKind(InvalidJob):
    """`acta.enqueue` was given a kind this Acta has no handler for."""


class PayloadTooLarge(InvalidJob):
    """Args or a result exceed the size acta stores."""


class DuplicateJob(ActaError):
    """A non-terminal job already holds this unique key.

    Raised when a plain ``session.add`` inserts a job whose ``unique_key`` is held;
    ``acta.enqueue`` returns the existing job instead.
    """

    def __init__(self, namespace: str, unique_key: str) -> None:
        self.namespace = namespace
        self.unique_key = unique_key
        super().__init__(
            f"a job with unique_key={unique_key!r} is already ready, executing or waiting in "
            f"namespace {namespace!r}; use `await acta.enqueue(session, job)` to get the existing "
            "job back instead of an error"
        )


class UniqueKeyHeld(DuplicateJob):
    """A finished job cannot be retried while another job holds its unique key."""

    def __init__(self, job_id: int, holder_id: int, namespace: str, unique_key: str) -> None:
        ActaError.__init__(
            self,
            f"job {job_id} cannot be retried: job {holder_id} holds its unique_key="
            f"{unique_key!r} in namespace {namespace!r} (ready, executing or waiting); cancel "
            "that job or wait for it to finish, then retry",
        )
        self.namespace = namespace
        self.unique_key = unique_key
        self.job_id = job_id
        self.holder_id = holder_id


class JobNotFound(ActaError):
    """No job has this id (it never existed, or finished and was pruned)."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        super().__init__(f"no job with id {job_id}")


class JobFinished(ActaError):
    """The job has already reached a terminal state: there is nothing left to signal."""

    def __init__(self, job_id: int, status: str) -> None:
        self.job_id = job_id
        self.status = status
        super().__init__(
            f"job {job_id} has already finished ({status}); a signal reaches only a ready, "
            "executing or waiting job"
        )


class JobActive(ActaError):
    """An unfinished job (ready, executing or waiting) cannot be deleted: its parent would
    wait for it, or its lane behind it, for ever. Cancel it, then delete it once finished
    (or leave it to the prune)."""

    def __init__(self, job_id: int, status: str) -> None:
        self.job_id = job_id
        self.status = status
        super().__init__(
            f"job {job_id} is {status}: deleting an unfinished job would strand its parent "
            f"or its lane; cancel it first (`await acta.cancel(session, {job_id})`, or "
            f"`acta jobs cancel {job_id}`), then delete it once it has finished, or leave it "
            "to the prune. Nothing was deleted; the session is as before the delete"
        )


class DeadlockDetected(ActaError):
    """A parent waited for a child queued in a lane whose head waits, through its own
    children, for that parent: a cycle no job of it could leave. The recovery pass fails
    one parent of the cycle (the youngest) with this error so the lanes move; the job's
    ``last_error`` names this class (docs/waits.md)."""


class InvalidSignal(ActaError):
    """A signal's name or payload cannot be stored (the message says which and why)."""


class DatabaseUnavailable(ActaError):
    """The database could not be reached."""


class StoreUnavailable(ActaError):
    """A worker statement could not run because its connection failed (or was killed, or
    the driver lost track of it); the caller backs off and tries again, and the store opens
    a new connection on the next call."""


class StatementRefused(ActaError):
    """The database answered a worker statement with an error (not a lost connection).

    ``sqlstate`` is PostgreSQL's code. Only ``data_unwritable`` errors prove that the
    statement's *data* can never be stored (a string PostgreSQL cannot hold, a number out of
    range, a value too large): those take the finalizer's isolate-and-fail path. Any other
    refusal (a revoked privilege, an internal error, a lock or serialization failure) may
    pass, so the write repeats until it lands.
    """

    DATA_CLASSES = ("22", "54")
    """22: data exception; 54: program limit exceeded (a value too large to store)."""

    def __init__(self, message: str, sqlstate: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate

    @property
    def data_unwritable(self) -> bool:
        return self.sqlstate[:2] in self.DATA_CLASSES


class WorkerCrashed(ActaError):
    """A stage of the worker died of an internal error, and the worker stopped."""


class HandlerError(ActaError):
    """Base of the exceptions a handler raises to steer its job's outcome."""


class Retry(HandlerError):
    """Raised by a handler: retry this job later (charged to the failure budget).

    ``after`` is seconds (``Retry(after=30)``), a ``timedelta``, or a timezone-aware
    ``datetime`` to retry at (``Retry(after=datetime(2030, 1, 1, tzinfo=UTC))``); a time
    already past, or ``after=0``, retries as soon as a worker is free. A naive datetime is
    refused (ValueError): acta cannot tell which clock it means.

    The worker reads :attr:`after`, in seconds. For a datetime it is computed when the
    exception is raised, on the worker's clock (``at - now``); the delay is then counted on
    the database clock, as every due time is, so a worker clock off by N seconds moves the
    retry by N seconds. :attr:`at` keeps the datetime given (None otherwise).
    """

    def __init__(self, after: float | timedelta | datetime = 0.0, reason: str = "") -> None:
        from .durations import MAX_TEXT, SPAN_TEXT, due_in_range
        from .durations import seconds as bounded
        from .policy import shown

        self.at: datetime | None = None
        if isinstance(after, datetime):
            if after.tzinfo is None or after.utcoffset() is None:
                raise ValueError(
                    f"Retry(after={after!r}): the datetime has no timezone; give an aware one, "
                    "e.g. datetime.now(UTC) + timedelta(minutes=5)"
                )
            if not due_in_range(after):
                raise ValueError(
                    f"Retry(after={after!r}): the datetime must be within {SPAN_TEXT} of now"
                )
            self.at = after
            seconds = max(0.0, (after - datetime.now(UTC)).total_seconds())
            said = f"retry requested at {after.isoformat()}"
        else:
            if isinstance(after, bool) or not isinstance(after, int | float | timedelta):
                raise TypeError(
                    f"Retry(after={after!r}): after must be seconds, a timedelta or a "
                    "timezone-aware datetime"
                )
            checked = bounded(after)
            if checked is None:
                raise ValueError(
                    f"Retry(after={shown(after)}): after must be seconds (or a timedelta), "
                    f"finite, >= 0 and {MAX_TEXT}"
                )
            seconds = checked
            said = f"retry requested after {seconds:g}s"
        self.after = seconds
        self.reason = reason
        super().__init__(reason or said)


class LockUnavailable(Retry):
    """``ctx.lock(name, wait=...)`` could not take the lock in time.

    Uncaught, it retries the job after a second (charged, like any ``Retry``)."""

    def __init__(self, name: str, waited: float) -> None:
        super().__init__(after=1.0, reason=f"lock {name!r} is held elsewhere (waited {waited:g}s)")
        self.name = name


class Fail(HandlerError):
    """Raised by a handler: end this job ``failed`` now, without using the rest of its budget."""


class Cancel(HandlerError):
    """Raised by a handler: end this job ``cancelled`` now."""


# ------------------------------------------------------------------ describing an error
# One line for a person (the CLI, the dashboard) and one for a log line (the store, the
# listener): in this module so that neither side imports the other for it.

_MAX_MESSAGE_CHARS = 500


def brief(exc: BaseException) -> str:
    """``Type: first line of the message``, for one log line."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _driver_error(exc: BaseException) -> bool:
    """An asyncpg error (named by its type), without importing asyncpg to ask."""
    import sys

    asyncpg = sys.modules.get("asyncpg")
    return asyncpg is not None and isinstance(exc, asyncpg.PostgresError | asyncpg.InterfaceError)


def describe_error(exc: BaseException) -> str:
    """One line for a person: the driver's own message (not SQLAlchemy's wrapper with its
    SQL and background link), whitespace collapsed, cut to a readable length."""
    inner: BaseException = exc
    orig = getattr(exc, "orig", None)  # SQLAlchemy's DBAPIError wraps the driver's error
    if isinstance(orig, BaseException):
        inner = orig
        # SQLAlchemy's asyncpg adaptor wraps the asyncpg exception as the cause.
        if inner.__cause__ is not None:
            inner = inner.__cause__
    import subprocess

    if isinstance(inner, subprocess.CalledProcessError):
        detail = inner.stderr or inner.stdout or ""
        if isinstance(detail, bytes):
            detail = detail.decode(errors="replace")
        text = f"{_program(inner.cmd)} failed (exit {inner.returncode}) {detail}"
    else:
        text = str(inner)
    text = " ".join(text.split())
    if not text:
        text = type(inner).__name__
    elif isinstance(inner, OSError) or _driver_error(inner):
        text = f"{type(inner).__name__}: {text}"
    if len(text) > _MAX_MESSAGE_CHARS:
        text = text[: _MAX_MESSAGE_CHARS - 1] + "…"
    return text


def _program(cmd: Any) -> str:
    first = cmd[0] if isinstance(cmd, list | tuple) and cmd else cmd
    return str(first).rsplit("/", 1)[-1]
