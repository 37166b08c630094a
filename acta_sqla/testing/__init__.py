"""Helpers for your own tests (docs/testing.md).

* ``await drain(acta, database_url=...)`` runs every due job in-process through the same
  pipeline ``acta worker`` uses (claimer, executors, finalizer), and returns when no job is
  due and nothing is in flight. It first runs a recovery pass, so a job whose lease ran out
  (a crashed worker's, or one ``faults.expire_lease`` ended) is taken back. Jobs scheduled
  for later (including retries whose backoff has not passed) are left for a later drain;
  pass ``include_scheduled=True`` (or call ``faults.make_due``) to make them due first.
  Jobs that admission bounced (a busy concurrency key, a rate window) are run to the end.
* ``await perform(handler, **args)`` runs one handler inline, with a real ``Context``.
* ``await assert_enqueued(session, handler, args=..., count=..., **options)``,
  ``assert_not_enqueued`` and ``enqueued``: what the session sees enqueued.
* ``inline(acta)``: a testing mode where a commit that enqueued jobs of ``acta`` runs them
  before ``commit()`` returns.
* ``acta_sqla.testing.faults``: crashes, failed writes, outages, expired leases, time.

The pytest fixtures (``acta_database_url``, ``acta_session``, ``acta_worker``...) come from
the plugin ``acta_sqla.pytest_plugin``, active wherever acta-sqla is installed.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import asyncpg
from pydantic_core import to_jsonable_python
from sqlalchemy import event, select

from .. import _faults
from ..app import Acta
from ..context import Context
from ..database import asyncpg_dsn
from ..database import database_url as resolve_url
from ..errors import ConfigurationError
from ..handler import Handler
from ..models import Job
from ..queries import admin
from ..settings import ActaSettings, load_settings

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

    from ..worker import Worker

__all__ = [
    "DrainResult",
    "assert_enqueued",
    "assert_enqueued_sync",
    "assert_not_enqueued",
    "assert_not_enqueued_sync",
    "drain",
    "enqueued",
    "enqueued_sync",
    "inline",
    "perform",
    "perform_sync",
    "running_worker",
]


@dataclass(frozen=True, slots=True)
class DrainResult:
    claimed: int
    """Rows the drain claimed (a job retried within the drain counts each time)."""
    batches: int
    """complete_executions calls made."""
    crashed: bool
    """True if a stage of the worker died of an internal error (a bug in acta)."""
    killed: bool = False
    """True if ``faults.crash_at`` killed the drain's worker."""


async def drain(
    acta: Acta,
    *,
    database_url: str | None = None,
    settings: ActaSettings | None = None,
    include_scheduled: bool = False,
    executors: int | None = None,
) -> DrainResult:
    """Run every due job of ``acta``'s namespace to completion, in this process."""
    from ..worker import Worker

    settings = settings or load_settings(
        database_url=database_url, namespace=acta.namespace, executors=executors
    )
    if include_scheduled:
        await _make_due(settings, acta.namespace)
    worker = Worker(acta, settings, burst=True, grace=0, recover_first=True)
    await worker.run()
    return DrainResult(
        claimed=worker.claimer.claimed_rows,
        batches=worker.finalizer.batches,
        crashed=worker.crashed,
        killed=worker.killed,
    )


async def _make_due(settings: ActaSettings, namespace: str) -> None:
    conn = await asyncpg.connect(asyncpg_dsn(resolve_url(settings)))
    try:
        await conn.execute(admin.make_due(settings.db_schema), namespace)
    finally:
        await conn.close()


@asynccontextmanager
async def running_worker(
    acta: Acta,
    *,
    database_url: str | None = None,
    settings: ActaSettings | None = None,
    executors: int | None = None,
    grace: float = 5.0,
) -> AsyncIterator[Worker]:
    """A worker for ``acta``'s namespace as a task of this event loop while the block runs
    (what the ``acta_worker`` fixture starts): entering waits until it has registered
    (a start-up error is raised here), leaving stops it as SIGTERM would (unless
    ``faults.crash_at`` killed it first)."""
    from ..worker import Worker

    settings = settings or load_settings(
        database_url=database_url, namespace=acta.namespace, executors=executors
    )
    worker = Worker(acta, settings, grace=grace)
    task = asyncio.create_task(worker.run(), name=f"acta-test-worker-{acta.namespace}")
    try:
        while worker.worker_id is None and not task.done():
            await asyncio.wait({task}, timeout=0.01)
        if task.done():
            task.result()  # the start-up error
        yield worker
    finally:
        worker.request_stop()
        if not task.done():
            await task
        elif not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


# ---------------------------------------------------------------------- perform

_job_ids = itertools.count(1)


def _context(handler: Handler[Any, Any], args_json: str, ctx: Mapping[str, Any] | None) -> Context:
    fields = dict(ctx or {})
    unknown = set(fields) - {"job_id", "attempt", "signals", "children", "resumed", "scheduled_at"}
    if unknown:
        raise ConfigurationError(
            f"perform({handler.kind}, ctx=...): unknown field(s) {sorted(unknown)}; settable: "
            "job_id, attempt, signals, children, resumed, scheduled_at"
        )
    job_id = fields.get("job_id") or next(_job_ids)
    signals = fields.get("signals")
    return Context(
        job_id=job_id,
        kind=handler.kind,
        args_json=args_json,
        attempt=fields.get("attempt", 1),
        execution_id=job_id,
        namespace=handler.acta.namespace,
        resumed=fields.get("resumed"),
        scheduled_at=fields.get("scheduled_at"),
        children=tuple(fields.get("children", ())),
        signals_json=None if signals is None else json.dumps(to_jsonable_python(signals)),
        _stop=None if handler.is_async else threading.Event(),
    )


def _prepare(
    handler: Handler[Any, Any], args: dict[str, Any], ctx: Mapping[str, Any] | None
) -> tuple[Context, dict[str, Any]]:
    if not isinstance(handler, Handler):
        raise ConfigurationError(
            f"perform(): the first argument must be a handler registered with @acta.job, got "
            f"{type(handler).__name__}"
        )
    # As enqueue validates them, then as the worker loads them from the stored JSON.
    args_json = json.dumps(handler.validate_args(args), separators=(",", ":"))
    return _context(handler, args_json, ctx), handler.load_args(args_json)


async def perform(
    handler: Handler[Any, Any], /, *, ctx: Mapping[str, Any] | None = None, **args: Any
) -> Any:
    """Run ``handler`` now, in this process, as a worker would run its first attempt: the
    args validated as enqueue validates them (``InvalidJobArgs`` if they do not fit), a
    real ``Context`` (attempt 1, a job id of its own, ``ctx.log``); ``ctx={"signals":
    {...}, "children": [...], "resumed": ..., "attempt": n, "job_id": n}`` sets what a
    later run would see. Returns what the handler returned (a ``WaitForSignal`` too) and
    raises what it raised (``Retry``, ``Fail``...). No job row is written; ``ctx.lock``
    is not available (it needs a worker). A sync handler runs in a thread, as in a worker.
    """
    context, kwargs = _prepare(handler, args, ctx)
    if handler.is_async:
        return await handler.fn(context, **kwargs)
    return await asyncio.to_thread(handler.fn, context, **kwargs)


def perform_sync(
    handler: Handler[Any, Any], /, *, ctx: Mapping[str, Any] | None = None, **args: Any
) -> Any:
    """:func:`perform` for code without an event loop (an async handler is run with
    ``asyncio.run``; inside a running loop, await ``perform`` instead)."""
    context, kwargs = _prepare(handler, args, ctx)
    if not handler.is_async:
        return handler.fn(context, **kwargs)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(handler.fn(context, **kwargs))
    raise ConfigurationError(
        f"perform_sync({handler.kind}): an event loop is running here; use "
        "`await perform(...)` for an async handler"
    )


# ---------------------------------------------------------------------- assertions

_OPTION_COLUMNS = {
    "lane": "lane_key",
    "concurrency_key": "concurrency_key",
    "rate_key": "rate_key",
    "unique_key": "unique_key",
    "priority": "priority",
    "max_attempts": "max_attempts",
    "status": "status",
    "run_at": "run_at",
    "parent_id": "parent_id",
    "schedule_name": "schedule_name",
    "namespace": "namespace",
}
RUN_AT_TOLERANCE = timedelta(seconds=1)
"""``run_at=`` matches a job due within this much of the time given (the database's
``now()`` and the test's clock are not the same instant)."""
_LISTED = 20


def _kind(handler_or_kind: Handler[Any, Any] | str) -> tuple[str, str | None]:
    if isinstance(handler_or_kind, Handler):
        return handler_or_kind.kind, handler_or_kind.acta.namespace
    if isinstance(handler_or_kind, str):
        return handler_or_kind, None
    raise ConfigurationError(
        "expected a handler registered with @acta.job or a kind (str), got "
        f"{type(handler_or_kind).__name__}"
    )


def _check_options(options: Mapping[str, Any]) -> None:
    unknown = set(options) - set(_OPTION_COLUMNS)
    if unknown:
        raise ConfigurationError(
            f"assert_enqueued: unknown option(s) {sorted(unknown)}; known: "
            f"{', '.join(sorted(_OPTION_COLUMNS))}"
        )


def _select(handler_or_kind: Handler[Any, Any] | str) -> Any:
    kind, namespace = _kind(handler_or_kind)
    query = select(Job).where(Job.kind == kind)
    if namespace is not None:
        query = query.where(Job.namespace == namespace)
    return query.order_by(Job.id)


def _value(job: Job, column: str) -> Any:
    value = getattr(job, column)
    return getattr(value, "value", value)  # a status enum as its text


def _matches(job: Job, args: Mapping[str, Any] | None, options: Mapping[str, Any]) -> bool:
    if args:
        stored = job.args or {}
        for name, want in to_jsonable_python(dict(args)).items():
            if name not in stored or stored[name] != want:
                return False
    for option, want in options.items():
        have = _value(job, _OPTION_COLUMNS[option])
        if option == "run_at":
            if have is None or not isinstance(want, datetime):
                return False
            if abs(have - want) > RUN_AT_TOLERANCE:
                return False
        elif option == "status":
            if have != getattr(want, "value", want):
                return False
        elif have != want:
            return False
    return True


def _shown(job: Job) -> str:
    parts = [f"#{job.id} {job.kind} args={json.dumps(job.args, sort_keys=True)}"]
    for option, column in _OPTION_COLUMNS.items():
        if option in ("namespace", "status"):
            continue
        value = _value(job, column)
        if value is None or (option == "priority" and value == 0):
            continue
        parts.append(f"{option}={value.isoformat() if isinstance(value, datetime) else value!r}")
    parts.append(f"status={_value(job, 'status')}")
    return " ".join(parts)


def _verdict(
    what: str,
    all_jobs: Sequence[Job],
    handler_or_kind: Handler[Any, Any] | str,
    args: Mapping[str, Any] | None,
    count: int | None,
    options: Mapping[str, Any],
    negate: bool,
) -> list[Job]:
    _check_options(options)
    kind, namespace = _kind(handler_or_kind)
    matching = [j for j in all_jobs if j.kind == kind and _matches(j, args, options)]
    if negate:
        ok = not matching
    else:
        ok = len(matching) == count if count is not None else bool(matching)
    if ok:
        return matching
    wanted = [f"kind {kind!r}"]
    if args:
        wanted.append(
            f"args including {json.dumps(to_jsonable_python(dict(args)), sort_keys=True)}"
        )
    wanted += [f"{k}={v!r}" for k, v in options.items()]
    if negate:
        head = f"{what}: expected no job with {', '.join(wanted)}; found {len(matching)}:"
        listed = matching
    else:
        expected = f"exactly {count}" if count is not None else "a job"
        head = (
            f"{what}: expected {expected} with {', '.join(wanted)}; found {len(matching)} "
            "matching. Enqueued"
            + (f" in namespace {namespace!r}" if namespace else "")
            + (":" if all_jobs else ": nothing at all")
        )
        listed = list(all_jobs)
    lines = [head] + [f"  {_shown(j)}" for j in listed[:_LISTED]]
    if len(listed) > _LISTED:
        lines.append(f"  ... and {len(listed) - _LISTED} more")
    raise AssertionError("\n".join(lines))


def _everything(handler_or_kind: Handler[Any, Any] | str) -> Any:
    _kind_name, namespace = _kind(handler_or_kind)
    query = select(Job)
    if namespace is not None:
        query = query.where(Job.namespace == namespace)
    return query.order_by(Job.id)


async def enqueued(session: AsyncSession, handler_or_kind: Handler[Any, Any] | str) -> list[Job]:
    """The jobs of this kind the session sees (what its open transaction enqueued and
    everything committed; the plugin empties acta's tables between tests), oldest first.
    Flushes the session first."""
    await session.flush()
    return list((await session.scalars(_select(handler_or_kind))).all())


def enqueued_sync(session: Session, handler_or_kind: Handler[Any, Any] | str) -> list[Job]:
    """:func:`enqueued` for a synchronous ``Session``."""
    session.flush()
    return list(session.scalars(_select(handler_or_kind)).all())


async def assert_enqueued(
    session: AsyncSession,
    handler_or_kind: Handler[Any, Any] | str,
    args: Mapping[str, Any] | None = None,
    count: int | None = None,
    **options: Any,
) -> list[Job]:
    """Assert that the session sees a job of this handler (or kind) whose args include
    ``args`` (a subset match) and whose options equal ``options`` (``lane``,
    ``concurrency_key``, ``priority``, ``run_at`` (to within a second), ``unique_key``,
    ``max_attempts``, ``status``...); ``count``: exactly that many. The failure lists what
    was enqueued instead. Returns the matching jobs."""
    await session.flush()
    jobs = list((await session.scalars(_everything(handler_or_kind))).all())
    return _verdict("assert_enqueued", jobs, handler_or_kind, args, count, options, False)


async def assert_not_enqueued(
    session: AsyncSession,
    handler_or_kind: Handler[Any, Any] | str,
    args: Mapping[str, Any] | None = None,
    **options: Any,
) -> None:
    """Assert that the session sees no job that :func:`assert_enqueued` would match."""
    await session.flush()
    jobs = list((await session.scalars(_everything(handler_or_kind))).all())
    _verdict("assert_not_enqueued", jobs, handler_or_kind, args, None, options, True)


def assert_enqueued_sync(
    session: Session,
    handler_or_kind: Handler[Any, Any] | str,
    args: Mapping[str, Any] | None = None,
    count: int | None = None,
    **options: Any,
) -> list[Job]:
    """:func:`assert_enqueued` for a synchronous ``Session``."""
    session.flush()
    jobs = list(session.scalars(_everything(handler_or_kind)).all())
    return _verdict("assert_enqueued", jobs, handler_or_kind, args, count, options, False)


def assert_not_enqueued_sync(
    session: Session,
    handler_or_kind: Handler[Any, Any] | str,
    args: Mapping[str, Any] | None = None,
    **options: Any,
) -> None:
    """:func:`assert_not_enqueued` for a synchronous ``Session``."""
    session.flush()
    jobs = list(session.scalars(_everything(handler_or_kind)).all())
    _verdict("assert_not_enqueued", jobs, handler_or_kind, args, None, options, True)


# ---------------------------------------------------------------------- inline mode


@contextmanager
def inline(acta: Acta, *, database_url: str | None = None) -> Iterator[None]:
    """Testing mode: while the block runs, every commit of a session (async or sync) that
    added jobs of ``acta``'s namespace runs them before ``commit()`` returns, with a
    :func:`drain` of the namespace (the real pipeline: results, retries' records and
    children as a worker writes them; jobs scheduled for later stay). Like Oban's
    ``:inline``, for application tests that should not run a worker. Off by default, and
    refused in a process that runs a worker (``acta worker``, ``in_process_worker``): there
    the worker runs the jobs. A job enqueued by a handler inside the drain is run by that
    same drain, not by a nested one."""
    from sqlalchemy.orm import Session as SyncSession

    if _faults.worker_process or _faults.current.get() is not None:
        raise ConfigurationError(
            "acta_sqla.testing.inline(): this process runs an acta worker; inline mode is "
            "for tests without one (the worker runs the jobs)"
        )
    key = f"acta_inline_{id(acta)}"

    def flushed(session: SyncSession, _context: Any, _instances: Any) -> None:
        if any(isinstance(o, Job) and o.namespace == acta.namespace for o in session.new):
            session.info[key] = True

    def executed(orm_execute_state: Any) -> None:
        # enqueue_many and unique enqueues insert with a statement, not session.add.
        table = getattr(orm_execute_state.statement, "table", None)
        if orm_execute_state.is_insert and table is Job.__table__:
            orm_execute_state.session.info[key] = True

    def committed(session: SyncSession) -> None:
        if not session.info.pop(key, False) or _faults.current.get() is not None:
            return
        from sqlalchemy.exc import MissingGreenlet
        from sqlalchemy.util import await_only

        try:
            await_only(drain(acta, database_url=database_url))  # an AsyncSession's commit
            return
        except MissingGreenlet:
            pass  # a sync Session's commit
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(drain(acta, database_url=database_url))
            return
        raise ConfigurationError(
            "acta_sqla.testing.inline(): a sync Session committed inside a running event "
            "loop; drain it yourself (await drain(acta)) or use an AsyncSession"
        )

    def rolled_back(session: SyncSession) -> None:
        session.info.pop(key, None)

    listeners: list[tuple[str, Callable[..., Any]]] = [
        ("before_flush", flushed),
        ("do_orm_execute", executed),
        ("after_commit", committed),
        ("after_rollback", rolled_back),
    ]
    for name, fn in listeners:
        event.listen(SyncSession, name, fn)
    try:
        yield
    finally:
        for name, fn in listeners:
            event.remove(SyncSession, name, fn)
