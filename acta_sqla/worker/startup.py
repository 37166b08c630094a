"""The worker's start-up and re-registration: the supervisor calls, this module writes.

Start-up (:func:`register`): the schema checked, the worker row registered (``started``
set), the stage connections warmed beside it, the code's definitions stored and the stored
ones applied (``worker/definitions.py`` decides what they change), the declared schedules
stored -- all on the admin connection, waiting out a database that is down until it
answers or a stop is requested. Re-registration (:func:`register_again`): after a long
silence, a new worker row replaces the old, with no restart.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import TYPE_CHECKING, Any, Protocol

from loguru import logger

from ..database import database_url
from ..errors import StoreUnavailable
from ..settings import ActaSettings, Timings
from ..store import Definitions, WorkerStore
from . import definitions

if TYPE_CHECKING:
    from .supervisor import Worker

log = logger.bind(stage="worker")

RETRY_FIRST_SECONDS = 1.0
"""The first wait before start-up asks a database that is down again (then doubled)."""
RETRY_MAX_SECONDS = 30.0
"""The longest wait between two start-up tries."""


class StartupStore(Protocol):
    """The store's start-up statements (``store_lifecycle.py``; the two connection ones are
    ``store.py``'s)."""

    def preconnect(self) -> asyncio.Future[Any]: ...
    async def check_schema(self) -> None: ...
    async def register_worker(
        self, hostname: str, pid: int, executors: int, kinds: list[str], version: str
    ) -> int: ...
    async def open_stage_connections(self) -> None: ...
    async def store_definitions(self, declared: dict[str, dict[str, Any]]) -> None: ...
    async def load_definitions(self) -> Definitions: ...
    async def stop_worker(self, worker_id: int | None = None) -> None: ...


def next_delay(delay: float) -> float:
    """The wait before the next start-up try, after one of ``delay`` seconds."""
    return min(delay * 2, RETRY_MAX_SECONDS)


async def connect(settings: ActaSettings, namespace: str, timings: Timings) -> WorkerStore:
    """The worker's store; the embedded default database is started and migrated first."""
    url = await asyncio.to_thread(database_url, settings)
    if not settings.database_url:
        from .. import migrate

        await asyncio.to_thread(migrate.upgrade, url, "head", settings.db_schema)
    return WorkerStore(url, settings.db_schema, namespace, timings)


async def register(worker: Worker, store: WorkerStore) -> None:
    """Register the worker row and store definitions, waiting out a database that is
    down (logging why) until it answers or a stop is requested."""
    delay = RETRY_FIRST_SECONDS
    while True:
        # The stages' connections open while start-up runs on the admin connection; a
        # role that cannot connect now connects again on first use.
        connecting = store.preconnect()
        try:
            await store.check_schema()
            worker.worker_id = await register_row(worker, store)
            worker.started.set()
            # Not awaited: a statement that waits on a table lock must hold up the
            # first claim (which queues behind it on its connection), not start-up.
            worker._spawn(warm_stages(store))
            await store.store_definitions(
                {k: h.policy.to_json() for k, h in worker.acta.handlers.items()}
            )
            await reload_definitions(worker)
            await worker.fires.store_declared(store)
            return
        except StoreUnavailable as exc:
            log.bind(event="database_unavailable").warning(
                "database unavailable, retrying in {:.0f}s: {}", delay, exc
            )
            if await worker.clock.wait(worker._stop_requested, delay):
                raise
            delay = next_delay(delay)
        finally:
            await connecting


async def register_row(worker: Worker, store: StartupStore) -> int:
    """A new worker row for this process (at start-up, and after a long silence)."""
    return await store.register_worker(
        hostname=socket.gethostname(),
        pid=os.getpid(),
        executors=worker.executors_count,
        kinds=sorted(worker.acta.handlers),
        version=_version(),
    )


async def register_again(worker: Worker, seconds: float) -> None:
    """The worker went silent for 7 beats (the process was suspended, or cut off from
    the database; the lifeline keeps a merely blocked loop from it): recovery may have
    marked it dead, freeing its locks and slots, and every lease it held has run out
    (its attempts were cancelled at their deadlines). It does not carry on under the
    old identity: its old row is marked stopped, it registers a new one and goes on
    claiming under the new id, with no restart (a database outage must not need one)."""
    store = worker.store
    assert store is not None
    old = worker.worker_id
    try:
        worker.worker_id = await register_row(worker, store)
        # A beat already queued with the old id would set the old row back to
        # running: one beat under the new id first (the heartbeat connection runs them
        # in order), then the old row is marked stopped.
        await worker.heartbeat.run_once()
        await store.stop_worker(old)
    except Exception as exc:
        log.bind(event="register_again_failed").error(
            "worker {} could not register again after its silence: {}", old, exc
        )
        return
    worker.lifeline.stale_store = True
    await warm_stages(store)  # names the stage connections after the new id
    await worker.listener.stop()
    worker._listen()
    log.bind(event="registered_again", worker_id=worker.worker_id, old=old).warning(
        "worker {} went {:.1f}s without a confirmed lease renewal (the worker-dead limit "
        "is {:g}s): recovery may have marked it dead and everything it held has run out "
        "of its lease; registered again as worker {}",
        old,
        seconds,
        worker.timings.worker_dead_after,
        worker.worker_id,
    )


async def warm_stages(store: StartupStore) -> None:
    try:
        await store.open_stage_connections()
    except Exception as exc:  # each role connects and prepares on first use instead
        log.bind(event="warm_up_failed").debug("stage connections not warmed: {}", exc)


async def reload_definitions(worker: Worker) -> None:
    """Load the stored definitions, apply them (``worker/definitions.py`` decides)."""
    store = worker.store
    assert store is not None
    try:
        stored = await store.load_definitions()
    except Exception as exc:
        log.warning("could not load definitions: {}", exc)
        return
    declared = {kind: handler.policy for kind, handler in worker.acta.handlers.items()}
    new = definitions.reload(declared, stored, worker.policies, worker.definitions_version)
    for kind, why in new.refused.items():
        log.bind(event="bad_override", kind=kind).error(
            "ignoring the stored overrides of {!r}: {}", kind, why
        )
    for kind, diff in new.diffs.items():
        log.bind(event="policy_changed", kind=kind).info("kind {!r}: policy now {}", kind, diff)
    worker.policies = new.policies
    store.paused = new.paused
    worker.definitions_version = new.version
    if new.changed:
        log.bind(event="definitions_reloaded", paused=new.paused).info(
            "definitions of namespace {!r} reloaded (version {}){}",
            worker.namespace,
            new.version,
            f"; paused: {', '.join(new.paused)}" if new.paused else "",
        )
        claimer = getattr(worker, "claimer", None)
        if claimer is not None:
            claimer.wake()  # a resumed kind's jobs may be due now


def _version() -> str:
    from .. import __version__

    return __version__
