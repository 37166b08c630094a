"""Live definitions in the database: an operator's override moves the namespace's
definitions version in the same transaction, reset drops it, a bad value changes nothing,
and a paused kind is skipped by the claim."""

from __future__ import annotations

import asyncpg
import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from acta_sqla import Acta, ConfigurationError, Context
from acta_sqla import inspect as read
from acta_sqla.cli import app as cli_app
from acta_sqla.store import WorkerStore
from acta_sqla.testing import drain

APP = Acta()


@APP.job(timeout=60)
async def mail(ctx: Context) -> None: ...


async def stored(conn: asyncpg.Connection, store: WorkerStore) -> None:
    await conn.execute(
        "INSERT INTO acta.namespace (name) VALUES ('default') ON CONFLICT DO NOTHING"
    )
    await store.store_definitions({"mail": mail.policy.to_json()})


async def version(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval("SELECT definitions_version FROM acta.namespace"))


async def test_a_change_moves_the_version_in_the_same_transaction(
    conn: asyncpg.Connection, store: WorkerStore, async_engine: AsyncEngine
) -> None:
    await stored(conn, store)
    before = await version(conn)
    async with AsyncSession(async_engine) as session:
        assert await APP.set_policy(session, "mail", timeout="30", rate="10/s") == {
            "timeout": 30.0,
            "rate": "10/s",
        }
        # Not committed: another session sees neither the override nor the version.
        assert await version(conn) == before
        await session.commit()
    assert await version(conn) == before + 1
    defs = await store.load_definitions()
    assert defs.overrides["mail"] == {"timeout": 30.0, "rate": "10/s"}
    async with AsyncSession(async_engine) as session:
        [row] = await read.definitions(session, "default")
    assert row.overridden == {"timeout", "rate"}
    assert row.effective["timeout"] == 30.0 and row.effective["max_attempts"] == 20
    async with AsyncSession(async_engine) as session:
        assert await APP.reset_policy(session, "mail", "rate") == {"timeout": 30.0}
        await session.commit()
    assert await version(conn) == before + 2
    async with AsyncSession(async_engine) as session:
        assert await APP.reset_policy(session, "mail") == {}
        await session.commit()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"timeout": "-5"}, r"mail: timeout='-5' must be"),
        ({"colour": "red"}, r"mail: colour='red' is not a field an operator can set"),
        ({"backoff_base": 7200}, r"need backoff_base <= backoff_max"),
    ],
)
async def test_a_bad_change_changes_nothing(
    conn: asyncpg.Connection,
    store: WorkerStore,
    async_engine: AsyncEngine,
    fields: dict[str, object],
    message: str,
) -> None:
    await stored(conn, store)
    before = await version(conn)
    async with AsyncSession(async_engine) as session:
        with pytest.raises(ConfigurationError, match=message):
            await APP.set_policy(session, "mail", **fields)
    assert await version(conn) == before
    assert (await store.load_definitions()).overrides["mail"] == {}


async def test_an_unknown_kind_is_named_with_the_stored_ones(
    conn: asyncpg.Connection, store: WorkerStore, async_engine: AsyncEngine
) -> None:
    await stored(conn, store)
    async with AsyncSession(async_engine) as session:
        with pytest.raises(ConfigurationError, match=r"no kind 'mial' .*stored: mail"):
            await APP.pause(session, "mial")


async def test_a_paused_kind_is_not_claimed(conn: asyncpg.Connection, store: WorkerStore) -> None:
    await conn.execute(
        "INSERT INTO acta.job (kind) VALUES ('paused'), ('other'), ('paused'), ('other')"
    )
    store.paused = ["paused"]
    claimed = await store.claim_plain(10)
    assert sorted(j.kind for j in claimed) == ["other", "other"]
    assert await store.claim_jobs(10) == []
    assert await store.next_due_in() is None  # the paused kind's due rows do not count
    store.paused = []
    assert sorted(j.kind for j in await store.claim_plain(10)) == ["paused", "paused"]


HELD = Acta(namespace="held")


@HELD.job(paused=True)
async def launch(ctx: Context) -> str:
    return "launched"


async def test_a_kind_declared_paused_stays_queued_until_resumed(
    db: str, conn: asyncpg.Connection, async_session: AsyncSession
) -> None:
    job = launch.job()
    async_session.add(job)
    await async_session.commit()
    result = await drain(HELD, database_url=db)
    assert result.claimed == 0  # declared paused: the worker's claim skips it
    assert await conn.fetchval("SELECT status FROM acta.job WHERE id = $1", job.id) == "ready"
    # Resumed (the declaration stays paused: the operator's override lifts it), it runs.
    await HELD.resume(async_session, "launch")
    await async_session.commit()
    [(overrides,)] = await conn.fetch(
        "SELECT overrides::text FROM acta.definition WHERE namespace = 'held'"
    )
    assert overrides == '{"paused": false}'
    assert (await drain(HELD, database_url=db)).claimed == 1
    assert await conn.fetchval("SELECT status FROM acta.job WHERE id = $1", job.id) == "succeeded"
    # Reset, the declaration holds again.
    await HELD.reset_policy(async_session, "launch", "paused")
    await async_session.commit()
    again = launch.job()
    async_session.add(again)
    await async_session.commit()
    assert (await drain(HELD, database_url=db)).claimed == 0


async def test_resuming_a_kind_an_operator_paused_drops_the_override(
    conn: asyncpg.Connection, store: WorkerStore, async_engine: AsyncEngine
) -> None:
    await stored(conn, store)
    async with AsyncSession(async_engine) as session:
        await APP.pause(session, "mail")
        await session.commit()
        await APP.resume(session, "mail")
        await session.commit()
    assert await conn.fetchval("SELECT overrides::text FROM acta.definition") == "{}"


async def test_the_sync_twins_pause_resume_and_retry(
    conn: asyncpg.Connection, store: WorkerStore, sync_session: Session
) -> None:
    await stored(conn, store)
    APP.pause_sync(sync_session, "mail")
    sync_session.commit()
    assert await conn.fetchval("SELECT overrides::text FROM acta.definition") == '{"paused": true}'
    APP.resume_sync(sync_session, "mail")
    sync_session.commit()
    assert await conn.fetchval("SELECT overrides::text FROM acta.definition") == "{}"
    job_id = await conn.fetchval(
        "INSERT INTO acta.job (kind, status, finished_at) VALUES ('mail', 'failed', now()) "
        "RETURNING id"
    )
    assert APP.retry_sync(sync_session, job_id) is True
    sync_session.commit()
    assert await conn.fetchval("SELECT status FROM acta.job WHERE id = $1", job_id) == "ready"


def test_definitions_reset_of_paused_returns_a_declared_pause(db: str) -> None:
    # `acta resume` lifts a declared pause with an override; `acta definitions reset KIND
    # paused` drops that override, and the declaration (paused) holds again.
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("INSERT INTO acta.namespace (name) VALUES ('held2')")
        conn.execute(
            "INSERT INTO acta.definition (namespace, kind, declared, overrides) "
            """VALUES ('held2', 'launch', '{"paused": true}', '{"paused": false}')"""
        )
        env = {"ACTA_DATABASE_URL": db}
        args = ["definitions", "reset", "launch", "paused", "--namespace", "held2"]
        result = CliRunner().invoke(cli_app, args, env=env)
        assert result.exit_code == 0, result.output
        stored = conn.execute("SELECT overrides::text FROM acta.definition").fetchone()
        assert stored == ("{}",)
        result = CliRunner().invoke(cli_app, ["resume", "launch", "--namespace", "held2"], env=env)
        assert result.exit_code == 0, result.output
        stored = conn.execute("SELECT overrides::text FROM acta.definition").fetchone()
        assert stored == ('{"paused": false}',)
