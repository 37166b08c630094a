"""FastAPI integration (the optional extra ``acta-sqla[fastapi]``).

* :func:`enqueuer` -- a dependency that hands an endpoint the request's ``AsyncSession`` and
  an :class:`Enqueuer` bound to it, and commits when the endpoint returns (rolls back when it
  raises), BEFORE the response is sent: the app's rows and its jobs commit together or not at
  all, and a commit that fails is a 500, never a 200 for rows that do not exist.
* :func:`in_process_worker` / :func:`worker_lifespan` -- run an acta worker (the same
  pipeline as ``acta worker``) as an asyncio task of the web process, stopped gracefully at
  shutdown. For single-process deployments; separate ``acta worker`` processes stay the
  recommended production shape (docs/fastapi.md says why).

Nothing in the core or the worker imports this module: FastAPI is never needed to run jobs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

try:
    from fastapi import Depends
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("acta_sqla.fastapi needs FastAPI: pip install 'acta-sqla[fastapi]'") from exc
from loguru import logger

from .app import Acta, EnqueueResult, JobBatch
from .errors import ConfigurationError, WorkerCrashed
from .settings import (
    DEFAULT_GRACE_SECONDS,
    ActaSettings,
    check_executors,
    check_grace,
    load_settings,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    from .models import Job
    from .worker import Worker

__all__ = ["Enqueuer", "enqueuer", "in_process_worker", "worker_lifespan"]

log = logger.bind(stage="fastapi")


@dataclass(frozen=True, slots=True)
class Enqueuer:
    """The request's session and acta's enqueue bound to it. Whatever the endpoint adds to
    ``session`` and enqueues here commits in one transaction when the endpoint returns."""

    acta: Acta
    session: AsyncSession

    async def enqueue(self, job: Job) -> Job:
        """Add ``job`` to the request's transaction and flush, so that ``job.id`` is set
        (an endpoint usually answers with it). When the job's ``unique_key`` is held by a
        non-terminal job, that job is returned instead (see ``Acta.enqueue``)."""
        added = await self.acta.enqueue(self.session, job)
        await self.session.flush()
        return added

    async def enqueue_many(self, jobs: Sequence[Job] | JobBatch) -> list[EnqueueResult]:
        """Insert many jobs in one statement, in the request's transaction (see
        ``Acta.enqueue_many``); their ids in input order."""
        return await self.acta.enqueue_many(self.session, jobs)


@asynccontextmanager
async def _transaction(acta: Acta, session: AsyncSession) -> AsyncIterator[Enqueuer]:
    try:
        yield Enqueuer(acta, session)
    except BaseException:
        # An endpoint that raised (HTTPException included) has not done what it answers:
        # none of its rows, and none of its jobs, may commit.
        await session.rollback()
        raise
    await session.commit()


def enqueuer(
    acta: Acta,
    *,
    sessionmaker: async_sessionmaker[AsyncSession] | None = None,
    session: Callable[..., Any] | None = None,
) -> Any:
    """A FastAPI dependency (``Depends(...)``) yielding an :class:`Enqueuer`, for
    ``Annotated`` aliases::

        Jobs = Annotated[Enqueuer, enqueuer(acta, sessionmaker=Session)]   # acta opens it
        Jobs = Annotated[Enqueuer, enqueuer(acta, session=get_session)]    # or wraps yours

    ``sessionmaker``: the app's own ``async_sessionmaker``; acta opens a session per request
    and closes it after the commit. ``session``: the app's existing dependency that provides
    an ``AsyncSession``; acta uses that session (FastAPI hands the same one to every other
    use of the dependency in the request) and leaves closing it to the app's dependency.

    Either way the transaction commits when the endpoint returns, and rolls back when it
    raises, before the response is sent.
    """
    if (sessionmaker is None) == (session is None):
        raise ConfigurationError(
            "enqueuer(acta, ...): pass exactly one of sessionmaker= (the app's "
            "async_sessionmaker; acta opens the request's session) or session= (the app's "
            "dependency that yields its AsyncSession; acta wraps it)"
        )
    if not isinstance(acta, Acta):
        raise ConfigurationError(
            f"enqueuer(acta, ...): acta must be an acta_sqla.Acta, got {type(acta).__name__}"
        )

    dependency: Callable[..., AsyncIterator[Enqueuer]]
    if sessionmaker is not None:
        factory = sessionmaker

        async def acta_session() -> AsyncIterator[Enqueuer]:
            async with factory() as opened, _transaction(acta, opened) as bound:
                yield bound

        dependency = acta_session
    else:
        provided = Depends(session)

        async def acta_wraps_session(opened: Any = provided) -> AsyncIterator[Enqueuer]:
            async with _transaction(acta, opened) as bound:
                yield bound

        dependency = acta_wraps_session
    # scope="function" (FastAPI >= 0.121) runs the code after `yield` when the endpoint
    # returns, BEFORE the response is sent. With the default ("request") scope it runs after
    # the response went out: a commit that then failed would leave the client holding a 200
    # and ids of rows that never existed.
    return Depends(dependency, scope="function")


@asynccontextmanager
async def in_process_worker(
    acta: Acta,
    *,
    settings: ActaSettings | None = None,
    executors: int | None = None,
    grace: float = DEFAULT_GRACE_SECONDS,
) -> AsyncIterator[Worker]:
    """Run an acta worker for ``acta``'s namespace as a task of this event loop while the
    block runs; at its end stop it as SIGTERM stops ``acta worker`` (stop claiming, hand back
    unstarted rows, running handlers get ``grace`` seconds, flush, mark the worker stopped).

    Entering waits until the worker has checked the schema and registered, so that a
    misconfiguration (schema missing or behind, wrong namespace) fails the app's start-up
    instead of leaving a web process whose jobs never run. A database that is down is waited
    out, as ``acta worker`` does (logging why). Use it inside the app's own lifespan::

        @asynccontextmanager
        async def lifespan(app):
            async with in_process_worker(acta):
                yield
    """
    from .worker import Worker

    # The rules of `acta worker --grace` and `--executors`, whether the settings are given
    # or read: model_copy(update=...) below does not validate what it sets.
    check_grace(grace, f"in_process_worker(grace={grace:g})")
    if executors is not None:
        check_executors(executors, f"in_process_worker(executors={executors!r})")
    if settings is None:
        settings = load_settings(namespace=acta.namespace, executors=executors)
    elif executors is not None:
        settings = settings.model_copy(update={"executors": executors})
    worker = Worker(acta, settings, grace=grace)
    task = asyncio.create_task(worker.run(), name=f"acta-worker-{acta.namespace}")
    stopping = False

    def ended(done: asyncio.Task[None]) -> None:
        # The web process lives on without a worker: say so loudly, since nothing else would.
        if stopping or done.cancelled():
            return
        exc = done.exception()
        log.bind(event="in_process_worker_ended").opt(exception=exc).critical(
            "the in-process acta worker of namespace {!r} ended while the app runs ({}); "
            "jobs are no longer run by this process",
            acta.namespace,
            exc or ("crashed" if worker.crashed else "returned"),
        )

    try:
        # Worker.started is set once the schema is checked and the worker row registered;
        # the task is watched meanwhile, so that a start-up error is raised here at once.
        started = asyncio.create_task(worker.started.wait(), name="acta-worker-started")
        try:
            await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            started.cancel()
        if task.done():
            stopping = True
            task.result()  # the start-up error, e.g. ConfigurationError
            raise WorkerCrashed(
                f"the in-process acta worker of namespace {acta.namespace!r} stopped during "
                "start-up"
            )
        # Only now: a start-up error is raised above, not also logged as a worker that died.
        task.add_done_callback(ended)
        yield worker
    finally:
        stopping = True
        worker.request_stop()
        if not task.done():
            await task
        if worker.crashed:
            log.bind(event="in_process_worker_crashed").error(
                "the in-process acta worker of namespace {!r} stopped after an internal "
                "error (see the log above)",
                acta.namespace,
            )


def worker_lifespan(
    acta: Acta,
    *,
    settings: ActaSettings | None = None,
    executors: int | None = None,
    grace: float = DEFAULT_GRACE_SECONDS,
) -> Callable[[Any], AbstractAsyncContextManager[None]]:
    """``FastAPI(lifespan=worker_lifespan(acta))``: an app whose only start-up work is the
    in-process worker. An app with start-up work of its own enters
    :func:`in_process_worker` inside its own lifespan instead."""

    @asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        async with in_process_worker(acta, settings=settings, executors=executors, grace=grace):
            yield

    return lifespan
