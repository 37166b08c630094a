"""The worker's store against a real PostgreSQL: driver errors become acta errors (a lost
connection is replaced at once), the heartbeat's one row of honest columns, and the
recovery pass's due time in a namespace that mixes heartbeat settings."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from acta_sqla.database import asyncpg_dsn
from acta_sqla.errors import ConfigurationError, StatementRefused, StoreUnavailable
from acta_sqla.settings import Timings
from acta_sqla.store import RoleConnection, WorkerStore, connection_lost
from tests.waiting import until

LONG = Timings.from_heartbeat(45.0)  # recovery every 180 s
SHORT = Timings.from_heartbeat(0.5)  # recovery every 2 s


@pytest.fixture
async def role(db: str) -> AsyncIterator[RoleConnection]:
    rc = RoleConnection(asyncpg_dsn(db), "claim", timeout=10.0)
    try:
        yield rc
    finally:
        await rc.close()


async def backend(rc: RoleConnection) -> int:
    return int((await rc.fetch("SELECT pg_backend_pid()"))[0][0])


async def test_a_killed_connection_is_replaced_on_the_next_call(
    conn: asyncpg.Connection, role: RoleConnection
) -> None:
    """Killed under a call: that call raises StoreUnavailable and the connection is
    discarded; the next call runs on a new backend. (Killed while idle, the driver may
    notice before the next call or not: a noticed one is replaced without an error, the
    next test; one not yet noticed fails one call, as here.)"""
    first = await backend(role)
    call = asyncio.ensure_future(role.fetch("SELECT pg_sleep(30)"))
    await until(
        lambda: conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'PgSleep'",
            first,
        ),
        10,
        "the call to be running on the server",
    )
    await conn.execute("SELECT pg_terminate_backend($1, 10000)", first)
    with pytest.raises(StoreUnavailable):
        await call
    assert role.conn is None  # discarded: nothing waits for a reconnect timer
    assert await backend(role) != first


async def test_a_connection_killed_while_idle_is_replaced_without_an_error(
    conn: asyncpg.Connection, role: RoleConnection
) -> None:
    first = await backend(role)
    held = role.conn
    assert held is not None
    # With a timeout the call returns once the backend has exited.
    await conn.execute("SELECT pg_terminate_backend($1, 10000)", first)
    await until(held.is_closed, 10, "the driver to read the server's goodbye")
    assert await backend(role) != first


async def test_any_driver_error_for_a_broken_connection_drops_it(role: RoleConnection) -> None:
    """After pg_terminate_backend asyncpg may raise InternalClientError ("cannot switch to
    state 12; another operation (2) is in progress") rather than a connection error; the
    connection is unusable all the same (issue 10, item 7)."""

    class Confused(asyncpg.Connection):  # type: ignore[misc]
        async def fetch(self, *args: object, **kwargs: object) -> list[asyncpg.Record]:
            raise asyncpg.exceptions.InternalClientError(
                "cannot switch to state 12; another operation (2) is in progress"
            )

    role.conn = broken = await asyncpg.connect(role.dsn, connection_class=Confused)
    first = broken.get_server_pid()
    with pytest.raises(StoreUnavailable, match="InternalClientError"):
        await backend(role)
    assert role.conn is None
    assert await backend(role) != first


@pytest.mark.parametrize(
    ("error", "lost"),
    [
        (asyncpg.exceptions.InternalClientError("cannot switch to state 12"), True),
        (asyncpg.exceptions.ConnectionDoesNotExistError("closed in the middle"), True),
        (asyncpg.exceptions.AdminShutdownError("terminating connection"), True),
        (asyncpg.exceptions.ReadOnlySQLTransactionError("read-only"), True),
        (ConnectionResetError("reset by peer"), True),
        (TimeoutError(), True),
        (asyncpg.exceptions.InsufficientPrivilegeError("permission denied"), False),
        (asyncpg.exceptions.InternalServerError("internal"), False),
        (asyncpg.exceptions.UntranslatableCharacterError("\\u0000"), False),
    ],
)
def test_which_driver_errors_mean_a_lost_connection(error: Exception, lost: bool) -> None:
    assert connection_lost(error) is lost


async def test_a_refused_statement_keeps_its_connection_and_names_its_sqlstate(
    role: RoleConnection,
) -> None:
    first = await backend(role)
    with pytest.raises(StatementRefused) as refused:
        await role.fetch("SELECT 1 / 0")
    assert refused.value.sqlstate == "22012"
    assert refused.value.data_unwritable
    with pytest.raises(StatementRefused) as refused:
        await role.fetch("DO $$ BEGIN RAISE EXCEPTION 'no' USING ERRCODE = '42501'; END $$")
    assert refused.value.sqlstate == "42501"
    assert not refused.value.data_unwritable
    assert await backend(role) == first


async def test_check_schema_names_what_to_do_on_an_unmigrated_schema(db: str) -> None:
    store = WorkerStore(db, "not_migrated", "default", LONG)
    try:
        with pytest.raises(ConfigurationError, match="acta db upgrade"):
            await store.check_schema()
    finally:
        await store.close()


async def registered(db: str, timings: Timings) -> WorkerStore:
    store = WorkerStore(db, "acta", "mixed", timings)
    await store.register_worker("test-host", 1, 8, ["k"], "test")
    return store


async def due_in(conn: asyncpg.Connection) -> float:
    return float(
        await conn.fetchval(
            "SELECT extract(epoch FROM recovery_due_at - now())::float8 FROM acta.namespace "
            "WHERE name = 'mixed'"
        )
    )


async def test_the_recovery_pass_moves_on_by_the_shortest_running_interval(
    db: str, conn: asyncpg.Connection
) -> None:
    """A 45 s worker that takes the pass next to 0.5 s workers moves it 2 s on, not 180 s:
    their leases must be recovered within one lease of expiring (issue 10, item 6)."""
    long, short = await registered(db, LONG), await registered(db, SHORT)
    try:
        await conn.execute("UPDATE acta.namespace SET recovery_due_at = now() WHERE name = 'mixed'")
        report = await long.heartbeat([])
        assert report.recovery_due
        assert 0 < await due_in(conn) <= SHORT.recovery_interval
        assert not (await short.heartbeat([])).recovery_due  # one worker per pass
        # Once the short worker has stopped, the long one's own interval applies again.
        await short.stop_worker()
        await conn.execute("UPDATE acta.namespace SET recovery_due_at = now() WHERE name = 'mixed'")
        assert (await long.heartbeat([])).recovery_due
        assert SHORT.recovery_interval < await due_in(conn) <= LONG.recovery_interval
    finally:
        await long.close()
        await short.close()


async def test_a_registering_worker_pulls_a_later_pass_in_to_its_own_interval(
    db: str, conn: asyncpg.Connection
) -> None:
    long = await registered(db, LONG)
    try:
        await conn.execute(
            "UPDATE acta.namespace SET recovery_due_at = now() + interval '180 seconds' "
            "WHERE name = 'mixed'"
        )
        other_long = await registered(db, LONG)
        await other_long.close()
        assert await due_in(conn) > SHORT.recovery_interval  # not pulled in by a peer
        short = await registered(db, SHORT)
        await short.close()
        assert 0 < await due_in(conn) <= SHORT.recovery_interval
    finally:
        await long.close()


async def test_the_heartbeat_answers_one_row_of_named_columns(
    db: str, conn: asyncpg.Connection
) -> None:
    store = await registered(db, LONG)
    try:
        ids = [
            await conn.fetchval(
                "INSERT INTO acta.job (namespace, kind) VALUES ('mixed', 'k') RETURNING id"
            )
            for _ in range(3)
        ]
        jobs = {j.id: j for j in await store.claim_jobs(3)}
        a, b, c = (jobs[i] for i in ids)
        await conn.execute("UPDATE acta.job SET cancel_requested = true WHERE id = $1", b.id)
        await conn.execute("UPDATE acta.namespace SET definitions_version = 7 WHERE name = 'mixed'")
        assert await store.take_lock("L", a.id, a.execution_id)
        rows = await store.heartbeat_conn.fetch(
            store.sql.heartbeat,
            "mixed",
            [a.id, b.id, c.id],
            [a.execution_id, b.execution_id, c.execution_id + 1],  # c's pair is stale
            [True, False, False],
            LONG.lease,
            store.worker_id,
            LONG.recovery_interval,
            ["L"],
            [a.id],
            [a.execution_id],
            4.0,
        )
        assert len(rows) == 1
        r = dict(rows[0])
        assert sorted(zip(r["renewed_ids"], r["renewed_execution_ids"], strict=True)) == sorted(
            [(a.id, a.execution_id), (b.id, b.execution_id)]
        )
        assert r["cancel_requested_ids"] == [b.id]
        assert sorted(r["present_ids"]) == sorted([a.id, b.id])
        assert (r["lock_names"], r["lock_job_ids"]) == (["L"], [a.id])
        assert r["definitions_version"] == 7
        assert r["worker_found"] is True
        assert isinstance(r["recovery_due"], bool)
    finally:
        await store.close()
