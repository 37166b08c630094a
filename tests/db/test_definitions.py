"""Live definitions in the database: an operator's override moves the namespace's
definitions version in the same transaction, reset drops it, a bad value changes nothing,
and a paused kind is skipped by the claim."""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from acta_sqla import Acta, ConfigurationError, Context
from acta_sqla import inspect as read
from acta_sqla.store import WorkerStore

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
