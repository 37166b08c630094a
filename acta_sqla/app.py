"""Acta: the handler registry and ``@acta.job``.

No I/O here: building jobs is ``handler.py``'s, validating options is ``policy.py``'s and
args ``payload.py``'s, and what runs in the application's session is ``session.py``'s;
Acta's enqueue/cancel/retry methods check the kinds against the registry and delegate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, overload

from . import session as _session
from .errors import ConfigurationError, InvalidJob, UnknownJobKind
from .handler import Handler as Handler  # re-exported: the worker imports it from here
from .handler import JobBatch as JobBatch
from .handler import Rows
from .policy import JOB_OPTIONS as JOB_OPTIONS
from .policy import Policy, Refused, check_key, shown
from .session import CancelOutcome as CancelOutcome
from .session import EnqueueResult as EnqueueResult
from .settings import NAMESPACE_PATTERN, NAMESPACE_RULE

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

    from .context import Context
    from .models import Job
    from .schedules import Schedule

P = ParamSpec("P")
R = TypeVar("R")


class Acta:
    """The registry of handlers for one namespace, and the enqueue helpers.

    ``allow_unknown_kinds=True`` lets ``enqueue`` take kinds this process has no handler
    for (jobs for workers of another service that shares the namespace).
    """

    def __init__(self, namespace: str = "default", *, allow_unknown_kinds: bool = False) -> None:
        if not NAMESPACE_PATTERN.match(namespace):
            raise ConfigurationError(f"namespace {namespace!r}: {NAMESPACE_RULE}")
        self.namespace = namespace
        self.allow_unknown_kinds = allow_unknown_kinds
        self.handlers: dict[str, Handler[Any, Any]] = {}
        self.schedules: dict[str, Schedule] = {}

    def __repr__(self) -> str:
        return f"<Acta namespace={self.namespace!r} kinds={sorted(self.handlers)}>"

    @overload
    def job(self, fn: Callable[Concatenate[Context, P], R], /) -> Handler[P, R]: ...

    @overload
    def job(
        self, fn: None = None, /, *, kind: str | None = None, **policy: Any
    ) -> Callable[[Callable[Concatenate[Context, P], R]], Handler[P, R]]: ...

    def job(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        kind: str | None = None,
        **policy: Any,
    ) -> Any:
        """Register a handler: ``@acta.job`` or ``@acta.job(max_attempts=5, timeout=60)``.

        Typed: the ``Handler[P, R]`` it returns carries the function's parameters after
        its ``Context`` (``P``) and its return type (``R``), so a type checker checks the
        args of ``handler.job(...)`` (docs/typing.md).

        Policy options (checked here, at declaration; see ``policy.POLICY_CHECKS``):
        max_attempts, timeout (seconds), priority, backoff_base, backoff_max,
        concurrency_key, concurrency_limit, rate (e.g. "100/min"), rate_key, lane,
        unique_key, retention (seconds)."""
        unknown = set(policy) - set(Policy.field_names())
        if unknown:
            raise ConfigurationError(
                f"@acta.job got unknown option(s) {sorted(unknown)}; known: "
                f"{', '.join(Policy.field_names())}"
            )

        def register(func: Callable[..., Any]) -> Handler[Any, Any]:
            name = kind or func.__name__
            try:
                check_key(name)
            except Refused as why:
                raise ConfigurationError(f"handler kind={shown(name)} {why}") from None
            try:
                resolved = Policy(**policy)
            except ConfigurationError as exc:  # name the kind: which decorator is wrong
                raise ConfigurationError(f"handler {name!r}: {exc}") from None
            if name in self.handlers:
                raise ConfigurationError(
                    f"kind {name!r} is registered twice in namespace {self.namespace!r}; "
                    "pass kind= to tell them apart"
                )
            handler: Handler[Any, Any] = Handler(self, func, name, resolved)
            self.handlers[name] = handler
            return handler

        return register(fn) if fn is not None else register

    def schedule(
        self,
        name: str,
        cron: str,
        handler: Handler[Any, Any],
        *,
        args: dict[str, Any] | None = None,
        timezone: str = "UTC",
        missed: str = "latest",
    ) -> Schedule:
        """Declare a recurring job: ``handler`` fires with ``args`` at every tick of ``cron``
        (5 fields, or 6 with a leading seconds field) in ``timezone``, exactly once per tick
        whatever the number of workers. ``missed``: what to do about ticks that passed while
        no worker ran (``latest``: one catch-up fire; ``skip``: wait for the next tick;
        ``all``: every missed tick, one after the other).
        Workers of this namespace store the schedules at start-up (docs/schedules.md)."""
        from .schedules import declare

        if name in self.schedules:
            raise ConfigurationError(
                f"schedule {name!r} is declared twice in namespace {self.namespace!r}"
            )
        if getattr(handler, "acta", None) is not self:
            raise ConfigurationError(
                f"schedule {name!r}: its handler must be registered on this Acta "
                f"(namespace {self.namespace!r})"
            )
        declared = declare(name, cron, handler, args=args, timezone=timezone, missed=missed)
        self.schedules[name] = declared
        return declared

    def _check_kind(self, job: Job) -> None:
        # A job's namespace is decided when it is built (``Job.__init__``), the same on
        # every path; a job of another namespace is refused, as a JobBatch is (_rows).
        if job.namespace != self.namespace and not self.allow_unknown_kinds:
            raise InvalidJob(
                f"{job.kind}: this job is for namespace {job.namespace!r} (a Job built "
                f"without namespace= is in 'default'), this Acta is for {self.namespace!r}; "
                f"build it with the handler's .job(...) or Job(..., "
                f"namespace={self.namespace!r})"
            )
        handler = self.handlers.get(job.kind)
        if handler is None:
            if self.allow_unknown_kinds:
                return
            known = ", ".join(sorted(self.handlers)) or "none registered"
            raise UnknownJobKind(
                f"no handler for kind {job.kind!r} in namespace {self.namespace!r} (known: "
                f"{known}); register it with @acta.job, or create Acta(allow_unknown_kinds=True) "
                "if another service's workers run it"
            )

    def _rows(self, jobs: Sequence[Job] | JobBatch) -> Rows:
        if isinstance(jobs, JobBatch):
            if jobs.namespace != self.namespace and not self.allow_unknown_kinds:
                raise InvalidJob(
                    f"this JobBatch is for namespace {jobs.namespace!r}, this Acta for "
                    f"{self.namespace!r}"
                )
        else:
            for job in jobs:
                self._check_kind(job)
        return _session.rows(jobs)

    # ------------------------------------------------------------------ in a session

    async def enqueue(self, session: AsyncSession, job: Job) -> Job:
        """Add ``job`` to the session's transaction. When its ``unique_key`` is held by a
        non-terminal job, return that job instead of inserting (no error)."""
        self._check_kind(job)
        return await session.run_sync(lambda s: _session.enqueue(s, job))

    def enqueue_sync(self, session: Session, job: Job) -> Job:
        """``enqueue`` for a synchronous ``Session``."""
        self._check_kind(job)
        return _session.enqueue(session, job)

    async def enqueue_many(
        self, session: AsyncSession, jobs: Sequence[Job] | JobBatch
    ) -> list[EnqueueResult]:
        """Insert ``jobs`` in one statement; results in input order. A job whose unique key
        is held (or repeated earlier in the batch) gets the holder's id, ``inserted=False``.

        ``jobs`` is a list of ``Job`` (any kinds), or -- fastest, for thousands -- the
        ``JobBatch`` of ``handler.jobs([...])``."""
        rows = self._rows(jobs)
        return await session.run_sync(lambda s: _session.enqueue_many(s, rows))

    def enqueue_many_sync(
        self, session: Session, jobs: Sequence[Job] | JobBatch
    ) -> list[EnqueueResult]:
        """``enqueue_many`` for a synchronous ``Session``."""
        return _session.enqueue_many(session, self._rows(jobs))

    async def cancel(
        self,
        session: AsyncSession,
        job_id: int,
        *,
        reason: str | None = None,
        by: str | None = "api",
    ) -> CancelOutcome:
        """Cancel a job in the session's transaction: a ready or waiting job ends
        ``cancelled`` at once ("cancelled"); an executing one is asked to stop, and its
        worker's next heartbeat cancels the handler ("requested"). "finished" means it had
        already ended, "missing" that no such job exists. Who cancelled it (``by``, at most
        200 characters) and why (``reason``, at most 1,000) are stored with the job and
        shown by the dashboard and ``acta jobs show`` (``ValueError`` for other text)."""
        return await session.run_sync(lambda s: _session.cancel(s, job_id, reason=reason, by=by))

    def cancel_sync(
        self, session: Session, job_id: int, *, reason: str | None = None, by: str | None = "api"
    ) -> CancelOutcome:
        """``cancel`` for a synchronous ``Session``."""
        return _session.cancel(session, job_id, reason=reason, by=by)

    async def retry(self, session: AsyncSession, job_id: int) -> bool:
        """Send a finished job (succeeded, failed or cancelled) back to ``ready`` now with a
        fresh failure budget; False when the job is not finished (or does not exist);
        ``UniqueKeyHeld`` while another job holds its unique key."""
        return await session.run_sync(lambda s: _session.retry(s, job_id))

    def retry_sync(self, session: Session, job_id: int) -> bool:
        """``retry`` for a synchronous ``Session``."""
        return _session.retry(session, job_id)

    async def signal(
        self, session: AsyncSession, job_id: int, name: str, payload: Any = None
    ) -> str:
        """Send signal ``name`` (with a JSON ``payload``) to job ``job_id``, in the session's
        transaction. When it commits, a job waiting for that name (``WaitForSignal``) becomes
        ready at once and its next run sees ``ctx.signals[name] == payload``; a job not yet
        waiting keeps the signal, and a later wait for the name is satisfied at once.
        Answers the job's status after the signal (``ready`` if it woke it). Raises
        ``JobNotFound`` or ``JobFinished`` (nothing changed) for a missing or finished job,
        ``InvalidSignal`` for a bad name or payload."""
        return await session.run_sync(lambda s: _session.signal(s, job_id, name, payload))

    def signal_sync(self, session: Session, job_id: int, name: str, payload: Any = None) -> str:
        """``signal`` for a synchronous ``Session``."""
        return _session.signal(session, job_id, name, payload)

    # ------------------------------------------------------------------ live definitions

    async def set_policy(self, session: AsyncSession, kind: str, **fields: Any) -> dict[str, Any]:
        """Override fields of ``kind``'s policy in this namespace, in the session's
        transaction: ``await acta.set_policy(session, "send_mail", timeout=30, rate="10/s")``.
        Overridable: max_attempts, timeout, backoff_base, backoff_max, concurrency_limit,
        rate, retention, paused, breaker. Each value is checked as ``@acta.job`` checks it
        (``ConfigurationError``, nothing changed); on commit every worker of the namespace
        applies it within one heartbeat. Answers the kind's overrides now stored."""
        return await session.run_sync(
            lambda s: _session.set_policy(s, self.namespace, kind, fields)
        )

    def set_policy_sync(self, session: Session, kind: str, **fields: Any) -> dict[str, Any]:
        return _session.set_policy(session, self.namespace, kind, fields)

    async def reset_policy(self, session: AsyncSession, kind: str, *names: str) -> dict[str, Any]:
        """Drop the overrides ``names`` of ``kind`` (none named: all of them): the declared
        policy applies again, within one heartbeat of the commit."""
        reset = list(names) or ["*"]
        return await session.run_sync(
            lambda s: _session.set_policy(s, self.namespace, kind, {}, reset)
        )

    def reset_policy_sync(self, session: Session, kind: str, *names: str) -> dict[str, Any]:
        return _session.set_policy(session, self.namespace, kind, {}, list(names) or ["*"])

    def pause_sync(self, session: Session, kind: str) -> None:
        """``pause`` for a synchronous ``Session``."""
        _session.set_policy(session, self.namespace, kind, {"paused": True})

    def resume_sync(self, session: Session, kind: str) -> None:
        """``resume`` for a synchronous ``Session``."""
        _session.resume_kind(session, self.namespace, kind)

    async def pause(self, session: AsyncSession, kind: str) -> None:
        """Pause ``kind``: its jobs stay queued and unclaimed until :meth:`resume` (running
        ones finish). Applied by every worker within one heartbeat of the commit."""
        await self.set_policy(session, kind, paused=True)

    async def resume(self, session: AsyncSession, kind: str) -> None:
        """Resume a paused kind (paused by an operator or declared ``paused=True``): its
        queued jobs are claimed again."""
        await session.run_sync(lambda s: _session.resume_kind(s, self.namespace, kind))

    async def close_breaker(
        self, session: AsyncSession, kind: str, key: str = "", by: str = ""
    ) -> str | None:
        """Close ``kind``'s circuit breaker by hand (``key``: one breaker per key), in the
        session's transaction: its counts and probes reset, its jobs start again at once.
        Answers the state it had (None: the kind has no breaker row yet). One log line,
        naming ``by`` (docs/breakers.md)."""
        from . import breakers

        return await session.run_sync(lambda s: breakers.close(s, self.namespace, kind, key, by))

    def close_breaker_sync(
        self, session: Session, kind: str, key: str = "", by: str = ""
    ) -> str | None:
        from . import breakers

        return breakers.close(session, self.namespace, kind, key, by)
