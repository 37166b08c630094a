"""The one place that talks to PostgreSQL at run time: URLs, connections, the statements of
`queries`, rows turned into frozen values, and database errors turned into acta errors."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import asyncpg
from loguru import logger

from .errors import ActaError, ConfigurationError, DuplicateJob
from .queries import WorkerSQL
from .settings import (
    SCHEMA_HEAD,
    SCHEMA_VERSION_TABLE,
    WORKER_DEAD_BEATS,
    ActaSettings,
    Timings,
)
from .values import ClaimedJob, Completion, HeartbeatReport

if TYPE_CHECKING:
    from sqlalchemy.engine import URL, ExceptionContext
    from sqlalchemy.ext.asyncio import AsyncEngine

# SQLAlchemy is imported inside the functions that need it: the worker's own path (asyncpg
# only) never loads it.


def database_url(settings: ActaSettings) -> str:
    """The configured URL, or the embedded default's (started on demand)."""
    if settings.database_url:
        return settings.database_url
    from . import embedded

    return embedded.start(settings.data_dir)


_SCHEME = re.compile(r"^(postgresql|postgres)(\+[A-Za-z0-9_]+)?://")


def async_url(url: str | URL) -> str:
    """The URL with the asyncpg driver, as SQLAlchemy's async engine wants it."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url) if isinstance(url, str) else url
    return parsed.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)


def asyncpg_dsn(url: str | URL) -> str:
    """The URL as a plain libpq-style DSN, as ``asyncpg.connect`` wants it: the same URL with
    the scheme ``postgresql://`` (SQLAlchemy URLs and libpq URIs quote alike)."""
    text = url if isinstance(url, str) else url.render_as_string(hide_password=False)
    return _SCHEME.sub("postgresql://", text, count=1)


# ---------------------------------------------------------------- database errors → acta errors

_UNIQUE_INDEX = "job_unique_key_idx"
_KEY_DETAIL = re.compile(
    r"Key \(namespace, unique_key\)=\((?P<ns>.*?), (?P<key>.*)\) already exists"
)


def _db_error_fields(exc: BaseException | None) -> tuple[str | None, str | None]:
    """(constraint name, detail) of a driver error, for asyncpg and psycopg alike."""
    seen = 0
    while exc is not None and seen < 5:
        seen += 1
        constraint = getattr(exc, "constraint_name", None)
        detail = getattr(exc, "detail", None)
        diag = getattr(exc, "diag", None)
        if diag is not None:
            constraint = constraint or getattr(diag, "constraint_name", None)
            detail = detail or getattr(diag, "message_detail", None)
        if constraint:
            return constraint, detail
        exc = exc.__cause__ or getattr(exc, "orig", None)
    return None, None


def _translate_error(context: ExceptionContext) -> BaseException | None:
    constraint, detail = _db_error_fields(context.original_exception)
    if constraint != _UNIQUE_INDEX:
        return None
    match = _KEY_DETAIL.search(detail or "")
    if match is None:
        return DuplicateJob("?", "?")
    return DuplicateJob(match["ns"], match["key"])


def install_error_translation() -> None:
    """Make a plain ``session.add`` of a duplicate unique job raise ``DuplicateJob`` (naming
    the key) instead of a bare IntegrityError, on every engine, sync or async."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if not event.contains(Engine, "handle_error", _translate_error):
        event.listen(Engine, "handle_error", _translate_error)


# ---------------------------------------------------------------- the worker's store


class StoreUnavailable(ActaError):
    """A statement could not run because the connection failed; the caller backs off and
    tries again (a new connection is opened on the next call)."""


_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    ConnectionError,
    asyncio.TimeoutError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.ReadOnlySQLTransactionError,
    asyncpg.exceptions.TooManyConnectionsError,
)


def app_name(role: str, worker_id: object = None) -> str:
    """A connection's ``application_name``: ``acta:<role>:<worker id>`` once the worker
    has an id, so an operator (or a test) finds every connection of one worker."""
    return f"acta:{role}" if worker_id is None else f"acta:{role}:{worker_id}"


class RoleConnection:
    """One connection of one role (claim, complete, heartbeat, listen), opened on demand.

    A connection error discards the connection (it may be pointed at a demoted primary or
    half dead) and raises ``StoreUnavailable``; the next call connects afresh.
    """

    def __init__(
        self, dsn: str, role: str, timeout: float, settings: dict[str, str] | None = None
    ) -> None:
        self.dsn = dsn
        self.role = role
        self.timeout = timeout
        self.settings = settings or {}
        self.conn: asyncpg.Connection | None = None
        self.application_name = app_name(role)
        self._connected_as = ""
        # One statement at a time: asyncpg refuses a second operation on a busy connection
        # (the admin role is shared by start-up, recovery and definition reloads).
        self._busy = asyncio.Lock()
        self._connecting = asyncio.Lock()

    async def get(self) -> asyncpg.Connection:
        conn = self.conn
        if conn is not None and not conn.is_closed():
            return conn
        async with self._connecting:  # one connection, however many callers ask at once
            if self.conn is None or self.conn.is_closed():
                self.conn = None
                name = self.application_name
                try:
                    self.conn = await asyncpg.connect(
                        self.dsn,
                        timeout=self.timeout,
                        server_settings={"application_name": name, **self.settings},
                    )
                except _CONNECTION_ERRORS as exc:
                    raise StoreUnavailable(f"{self.role}: cannot connect: {_brief(exc)}") from exc
                self._connected_as = name
            return self.conn

    async def rename(self) -> None:
        """Give an open connection the role's current ``application_name`` (it was opened
        before the worker's id was known)."""
        if self.conn is not None and self._connected_as != self.application_name:
            name = self.application_name
            await self.execute("SELECT set_config('application_name', $1, false)", name)
            self._connected_as = name

    async def discard(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None and not conn.is_closed():
            conn.terminate()

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        return await self._run("fetch", sql, args)  # type: ignore[no-any-return]

    async def execute(self, sql: str, *args: Any) -> str:
        return await self._run("execute", sql, args)  # type: ignore[no-any-return]

    async def _run(self, method: str, sql: str, args: tuple[Any, ...]) -> Any:
        async with self._busy:
            conn = await self.get()
            try:
                return await getattr(conn, method)(sql, *args, timeout=self.timeout)
            except _CONNECTION_ERRORS as exc:
                await self.discard()
                raise StoreUnavailable(f"{self.role}: {_brief(exc)}") from exc

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None and not conn.is_closed():
            try:
                await asyncio.wait_for(conn.close(), timeout=2)
            except (*_CONNECTION_ERRORS, asyncio.CancelledError):
                conn.terminate()


def _brief(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True, slots=True)
class Definitions:
    version: int
    declared: dict[str, dict[str, Any]]
    overrides: dict[str, dict[str, Any]]


class WorkerStore:
    """What a worker's stages call. Each stage has its own connection, so a busy claim never
    delays a completion write or a heartbeat."""

    def __init__(self, url: str, schema: str, namespace: str, timings: Timings) -> None:
        dsn = asyncpg_dsn(url)
        self.sql = WorkerSQL(schema)
        self.namespace = namespace
        self.timings = timings
        self.worker_id: int | None = None
        # The claim commits durably (the server's synchronous_commit) before any handler
        # starts: an asynchronous commit saved a WAL flush per claim, but a database crash
        # could then lose a claim whose handler already ran, and another worker would run
        # the same job at the same time (tests/faults/test_lost_claim.py).
        # The claim and the completion run thousands of times with the same plan: plan
        # them once (generic plans) instead of at every call. Both look their rows up by
        # primary key whatever the plan; tests/db/test_worker_sql.py checks the plans.
        generic = {"plan_cache_mode": "force_generic_plan"}
        self.claim_conn = RoleConnection(dsn, "claim", timeout=30.0, settings=generic)
        self.complete_conn = RoleConnection(dsn, "complete", timeout=60.0, settings=generic)
        self.heartbeat_conn = RoleConnection(dsn, "heartbeat", timeout=max(10.0, timings.heartbeat))
        self.admin_conn = RoleConnection(dsn, "admin", timeout=30.0)
        self.lock_conn = RoleConnection(dsn, "lock", timeout=30.0)
        self.dsn = dsn
        self.channel = f"{schema}.{namespace}"

    def twin(self, role: str = "lifeline") -> WorkerStore:
        """A second store of this worker for another thread's event loop (the lifeline):
        the same worker id and statements, connections of its own (opened on first use,
        named ``acta:<role>:<id>``). asyncpg connections and locks belong to one loop."""
        twin = WorkerStore(self.dsn, self.sql.schema, self.namespace, self.timings)
        twin.sql, twin.worker_id = self.sql, self.worker_id
        for rc in twin._roles():
            rc.role = role if rc is twin.heartbeat_conn else f"{role}-{rc.role}"
        if self.worker_id is not None:
            twin._name(self.worker_id)
        return twin

    def _name(self, worker_id: int) -> None:
        for rc in self._roles():
            rc.application_name = app_name(rc.role, worker_id)

    async def close(self) -> None:
        for rc in self._roles():
            await rc.close()

    def _roles(self) -> tuple[RoleConnection, ...]:
        return (
            self.claim_conn,
            self.complete_conn,
            self.heartbeat_conn,
            self.admin_conn,
            self.lock_conn,
        )

    # -------------------------------------------------------------- start and stop

    async def register_worker(
        self, hostname: str, pid: int, executors: int, kinds: list[str], version: str
    ) -> int:
        rows = await self.admin_conn.fetch(
            self.sql.register_worker,
            self.namespace,
            hostname,
            pid,
            executors,
            json.dumps(kinds),
            version,
            self.timings.heartbeat,
            app_name(self.admin_conn.role, ""),  # the statement appends the new id
        )
        self.worker_id = int(rows[0]["id"])
        self._name(self.worker_id)
        self.admin_conn._connected_as = rows[0]["application_name"]  # renamed in place
        return self.worker_id

    def preconnect(self) -> asyncio.Future[Any]:
        """Start connecting the claim, complete and heartbeat roles now, in the background,
        while start-up runs on the admin connection (a failure only means the role
        connects on first use)."""
        return asyncio.gather(
            self.claim_conn.get(),
            self.complete_conn.get(),
            self.heartbeat_conn.get(),
            return_exceptions=True,
        )

    async def open_stage_connections(self) -> None:
        """Name the stage connections after the worker, and prepare the hot statements by
        running them on nothing (a claim of 0 rows, an empty batch)."""

        async def ready(rc: RoleConnection, sql: str | None = None, *args: Any) -> None:
            await rc.get()
            await rc.rename()
            if sql is not None:
                await rc.fetch(sql, *args)

        lease = self.timings.lease
        await asyncio.gather(
            ready(self.claim_conn, self.sql.claim_jobs, self.namespace, 0, self.worker_id, lease),
            ready(self.complete_conn, self.sql.complete_executions, "[]", self.worker_id),
            ready(self.heartbeat_conn),
        )

    async def store_definitions(self, declared: dict[str, dict[str, Any]]) -> None:
        kinds = sorted(declared)
        await self.admin_conn.fetch(
            self.sql.store_definitions,
            self.namespace,
            kinds,
            [json.dumps(declared[k], sort_keys=True) for k in kinds],
        )

    async def load_definitions(self) -> Definitions:
        rows = await self.admin_conn.fetch(self.sql.load_definitions, self.namespace)
        version = int(rows[0]["definitions_version"]) if rows else 0
        declared: dict[str, dict[str, Any]] = {}
        overrides: dict[str, dict[str, Any]] = {}
        for r in rows:
            if r["kind"] is not None:
                declared[r["kind"]] = json.loads(r["declared"])
                overrides[r["kind"]] = json.loads(r["overrides"])
        return Definitions(version, declared, overrides)

    async def stop_worker(self) -> None:
        if self.worker_id is not None:
            await self.admin_conn.execute(self.sql.stop_worker, self.worker_id)

    # -------------------------------------------------------------- the hot path

    async def claim_jobs(self, limit: int) -> list[ClaimedJob]:
        rows = await self.claim_conn.fetch(
            self.sql.claim_jobs, self.namespace, limit, self.worker_id, self.timings.lease
        )
        make = ClaimedJob._make
        return [make(r) for r in rows]

    async def next_due_in(self) -> float | None:
        rows = await self.claim_conn.fetch(self.sql.next_due_in, self.namespace)
        return rows[0][0] if rows else None

    async def complete_executions(self, batch: Sequence[Completion]) -> set[int]:
        """Write every completion of ``batch`` in one round trip; the ids of the jobs whose
        write applied (the others' leases were lost, or an earlier try landed)."""
        # Completion is a NamedTuple whose fields are the statement's JSON items, in order:
        # json.dumps writes each one as an array, in C.
        rows = await self.complete_conn.fetch(
            self.sql.complete_executions, json.dumps(batch), self.worker_id
        )
        return {r[0] for r in rows}

    # -------------------------------------------------------------- heartbeat and recovery

    async def heartbeat(
        self,
        held: Sequence[tuple[int, int, bool]],
        locks: Sequence[tuple[str, int, int]] = (),
    ) -> HeartbeatReport:
        """ONE call: renew ``held`` (job, execution, started) triples and the ``locks``
        (name, job, execution) they hold, refresh the worker row, take the recovery pass
        if due, and read the definitions version."""
        rows = await self.heartbeat_conn.fetch(
            self.sql.heartbeat,
            self.namespace,
            [h[0] for h in held],
            [h[1] for h in held],
            [h[2] for h in held],
            self.timings.lease,
            self.worker_id,
            self.timings.recovery_interval,
            [lk[0] for lk in locks],
            [lk[1] for lk in locks],
            [lk[2] for lk in locks],
        )
        renewed: set[tuple[int, int]] = set()
        locks_renewed: set[tuple[str, int, int]] = set()
        present: set[tuple[int, int]] = set()
        cancel: set[int] = set()
        version, recovery_due = 0, False
        for r in rows:
            what = r["what"]
            if what == "renewed":
                renewed.add((r["id"], r["execution_id"]))
                if r["flag"]:
                    cancel.add(r["id"])
            elif what == "present":
                present.add((r["id"], r["execution_id"]))
            elif what == "lock":
                locks_renewed.add((r["name"], r["id"], r["execution_id"]))
            else:
                version = int(r["id"] or 0)
                recovery_due = bool(r["flag"])
        return HeartbeatReport(
            renewed=frozenset(renewed),
            busy=frozenset(present - renewed),
            cancel_requested=frozenset(cancel),
            definitions_version=version,
            recovery_due=recovery_due,
            locks_renewed=frozenset(locks_renewed),
        )

    async def take_lock(self, name: str, job_id: int, execution_id: int) -> bool:
        rows = await self.lock_conn.fetch(
            self.sql.take_lock,
            self.namespace,
            name,
            job_id,
            execution_id,
            self.worker_id,
            self.timings.lease,
        )
        return bool(rows)

    async def release_lock(self, name: str, job_id: int, execution_id: int) -> None:
        await self.lock_conn.execute(
            self.sql.release_lock, self.namespace, name, job_id, execution_id
        )

    async def recover_expired(self, limit: int, default_budget: int) -> list[tuple[int, str, bool]]:
        rows = await self.admin_conn.fetch(
            self.sql.recover_expired, self.namespace, limit, default_budget
        )
        return [(r["id"], r["status"], r["charged"]) for r in rows]

    async def mark_dead_workers(self) -> list[int]:
        rows = await self.admin_conn.fetch(
            self.sql.mark_dead_workers, self.namespace, float(WORKER_DEAD_BEATS)
        )
        return [r["id"] for r in rows]

    async def prune_finished(self, limit: int, default_retention: float) -> int:
        rows = await self.admin_conn.fetch(
            self.sql.prune_finished, self.namespace, limit, default_retention
        )
        return int(rows[0][0]) if rows else 0

    async def check_schema(self) -> None:
        """Fail with what to do when acta's tables are missing or behind this code."""
        head = SCHEMA_HEAD
        try:
            found = await self.admin_conn.fetch(
                f'SELECT version_num FROM "{self.sql.schema}".{SCHEMA_VERSION_TABLE}'
            )
            current = found[0][0] if found else None
        except (asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError):
            current = None
        if current != head:
            raise ConfigurationError(
                f"acta's schema {self.sql.schema!r} is at revision {current or 'none'}, this "
                f"code needs {head}: run `acta db upgrade` (or `alembic upgrade head`)"
            )


class Listener:
    """LISTEN on the namespace's channel, on its own connection, re-established after a
    killed connection or a database restart; every notification (and every reconnect,
    which may have missed some) calls ``on_notify``."""

    def __init__(self, dsn: str, channel: str, on_notify: Callable[[], None]) -> None:
        self.dsn = dsn
        self.channel = channel
        self.on_notify = on_notify
        self.application_name = app_name("listen")
        self.connected = asyncio.Event()
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._conn: asyncpg.Connection | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="acta-listener")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            conn.terminate()

    def _notified(self, *_: Any) -> None:
        self.on_notify()

    def _terminated(self, *_: Any) -> None:
        self._lost.set()

    async def _run(self) -> None:
        delay = 0.5
        log = logger.bind(stage="listener")
        while True:
            try:
                conn = await asyncpg.connect(
                    self.dsn,
                    timeout=10,
                    server_settings={"application_name": self.application_name},
                )
                self._lost.clear()
                conn.add_termination_listener(self._terminated)
                await conn.add_listener(self.channel, self._notified)
                self._conn = conn
            except Exception as exc:
                self.connected.clear()
                log.bind(event="listen_failed").warning(
                    "cannot LISTEN, retrying in {:.1f}s: {}", delay, _brief(exc)
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            delay = 0.5
            self.connected.set()
            # Whatever was notified while we were not listening is picked up by one claim.
            self.on_notify()
            while not self._lost.is_set():
                # A silently dead socket never reports termination: probe it now and then.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(5.0):
                        await self._lost.wait()
                if self._lost.is_set():
                    break
                try:
                    await conn.execute("SELECT 1", timeout=5.0)
                except Exception:
                    break
            self.connected.clear()
            log.bind(event="listen_lost").warning("LISTEN connection lost; reconnecting")
            conn.terminate()
            self._conn = None


def engine_options(schema: str) -> dict[str, Any]:
    """Execution options that point acta's models at ``schema`` (ACTA_SCHEMA) when it is
    not the default ``acta``: ``create_async_engine(url, execution_options=...)``."""
    from .models import SCHEMA

    return {} if schema == SCHEMA else {"schema_translate_map": {SCHEMA: schema}}


def create_engine(url: str, schema: str) -> AsyncEngine:
    """An async engine (asyncpg) for acta's own commands."""
    from sqlalchemy.ext.asyncio import create_async_engine

    return create_async_engine(async_url(url), execution_options=engine_options(schema))
