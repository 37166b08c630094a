"""The worker's connections to PostgreSQL, one per role (claim, complete, heartbeat,
admin, lock, ...), opened on demand and replaced after any loss: what the driver raises
for a lost connection becomes ``StoreUnavailable`` (the next call connects afresh), what
the server answered a statement with becomes ``StatementRefused``. ``store.WorkerStore``
runs its statements on these; asyncpg only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import asyncpg

from . import _faults
from .errors import StatementRefused, StoreUnavailable, brief
from .queries.catalogue import WorkerSQL

__all__ = ["DEADLOCK_DETECTED", "RoleConnection", "app_name", "connection_lost"]

# ---------------------------------------------------------------- driver errors → acta errors

_LOST_CONNECTION_STATES = frozenset(
    {
        "57P01",  # admin_shutdown: pg_terminate_backend, a fast shutdown
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now: the server is starting or stopping
        "53300",  # too_many_connections
        # A demoted primary (after a failover) refuses writes; a new connection finds the
        # new primary behind the same address.
        "25006",  # read_only_sql_transaction
    }
)
"""SQLSTATEs that say the connection (or the server behind it) is gone or unfit, besides
class 08 (connection exception): the connection is replaced, the statement is not at
fault."""

_DRIVER_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,  # refused, reset, unreachable; TimeoutError and ConnectionError are OSErrors
    asyncio.TimeoutError,
    # The driver's own view of a broken connection. After pg_terminate_backend asyncpg
    # often raises InternalClientError ("cannot switch to state 12; another operation (2)
    # is in progress") instead of a connection error: the connection is unusable all the
    # same, and keeping it stalled every claim behind it (I8, liveness).
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.InternalClientError,
)


def connection_lost(exc: BaseException) -> bool:
    """True when ``exc`` means the connection is gone or unfit (replace it), False when the
    server answered the statement itself with an error, or when asyncpg refused the
    connection's own settings (``ClientConfigurationError``, an InterfaceError: an invalid
    ``sslmode``, a missing root certificate): connecting again will not mend those."""
    if isinstance(exc, asyncpg.ClientConfigurationError):
        return False
    if isinstance(exc, asyncpg.PostgresError):
        state = getattr(exc, "sqlstate", None) or ""
        return state[:2] == "08" or state in _LOST_CONNECTION_STATES
    return isinstance(exc, _DRIVER_CONNECTION_ERRORS)


def app_name(role: str, worker_id: object = None) -> str:
    """A connection's ``application_name``: ``acta:<role>:<worker id>`` once the worker
    has an id, so an operator (or a test) finds every connection of one worker."""
    return f"acta:{role}" if worker_id is None else f"acta:{role}:{worker_id}"


DEADLOCK_DETECTED = "40P01"


class RoleConnection:
    """One connection of one role (claim, complete, heartbeat, admin, lock), opened on
    demand.

    Whatever the driver raises for a lost connection discards the connection at once (it
    may be killed, half dead, or pointed at a demoted primary) and raises
    ``StoreUnavailable``: the next call connects afresh. An error the server answered the
    statement with raises ``StatementRefused`` carrying its SQLSTATE, and the connection is
    kept.
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
                    if _faults.active is not None:  # tests only: a simulated outage
                        _faults.active.connecting(name)
                    self.conn = await asyncpg.connect(
                        self.dsn,
                        timeout=self.timeout,
                        server_settings={"application_name": name, **self.settings},
                    )
                except Exception as exc:
                    message = f"{self.role}: cannot connect: {brief(exc)}"
                    if connection_lost(exc):  # refused, unreachable, starting up: may pass
                        raise StoreUnavailable(message) from exc
                    if isinstance(exc, asyncpg.PostgresError):
                        # A bad password, an unknown database: waiting will not mend it.
                        raise StatementRefused(message, exc.sqlstate or "XX000") from exc
                    raise
                self._connected_as = name
            return self.conn

    async def rename(self) -> None:
        """Give an open connection the role's current ``application_name`` (it was opened
        before the worker's id was known)."""
        if self.conn is not None and self._connected_as != self.application_name:
            name = self.application_name
            await self.execute(WorkerSQL.set_application_name, name)
            self._connected_as = name

    async def discard(self) -> None:
        self._drop()

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        return await self._run("fetch", sql, args)  # type: ignore[no-any-return]

    async def execute(self, sql: str, *args: Any) -> str:
        return await self._run("execute", sql, args)  # type: ignore[no-any-return]

    async def fetch_together(
        self, steps: Sequence[tuple[str, tuple[Any, ...]]]
    ) -> list[list[asyncpg.Record]]:
        """Several statements in ONE transaction, in order; each one's rows."""
        async with self._busy:
            conn = await self.get()
            try:
                async with conn.transaction():
                    return [
                        await conn.fetch(sql, *args, timeout=self.timeout) for sql, args in steps
                    ]
            except Exception as exc:
                translated = self._translated(exc)
                if translated is exc:
                    raise
                raise translated from exc

    async def _run(self, method: str, sql: str, args: tuple[Any, ...]) -> Any:
        async with self._busy:
            conn = await self.get()
            try:
                return await getattr(conn, method)(sql, *args, timeout=self.timeout)
            except Exception as exc:
                translated = self._translated(exc)
                if translated is exc:
                    raise
                raise translated from exc

    def _translated(self, exc: Exception) -> Exception:
        """The acta error for a driver error (the connection discarded when it is lost);
        anything else (a bug in acta) unchanged."""
        if connection_lost(exc):
            self._drop()
            return StoreUnavailable(f"{self.role}: {brief(exc)}")
        if isinstance(exc, asyncpg.PostgresError):
            state = getattr(exc, "sqlstate", None) or "XX000"
            return StatementRefused(f"{self.role}: {brief(exc)}", state)
        # Not the driver's error: keep it as it is, but do not trust a connection that was
        # in the middle of a statement when it was raised.
        self._drop()
        return exc

    def _drop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None and not conn.is_closed():
            conn.terminate()

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None and not conn.is_closed():
            try:
                await asyncio.wait_for(conn.close(), timeout=2)
            except (Exception, asyncio.CancelledError):
                conn.terminate()
