"""An operator's retry racing another retry, or an enqueue, of the same unique key.

Both transactions see no holder when their statement begins; the one that commits second
would fail on the unique index. Real concurrent connections, made deterministic by holding
the first transaction open until the second is queued on its lock: the loser must raise
``UniqueKeyHeld`` naming the holder with its own transaction still usable, and the
dashboard's bulk retry must skip it and go on.
"""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from acta_sqla import Acta, Context, Job, JobStatus, UniqueKeyHeld
from acta_sqla.dashboard.app import _apply
from acta_sqla.database import asyncpg_dsn
from tests.waiting import until_lock_waiters

acta = Acta(namespace="default")


@acta.job
async def keyed(ctx: Context, n: int) -> None:
    return None


async def _failed(engine: AsyncEngine, n: int, key: str = "k") -> int:
    """A job with unique key ``key``, enqueued and then failed (so none holds the key)."""
    async with AsyncSession(engine, expire_on_commit=False) as s:
        job = await acta.enqueue(s, keyed.job(n=n, unique_key=key))
        await s.commit()
        await s.execute(update(Job).where(Job.id == job.id).values(status=JobStatus.FAILED))
        await s.commit()
        return job.id


async def _statuses(engine: AsyncEngine) -> dict[int, JobStatus]:
    async with AsyncSession(engine) as s:
        return dict((await s.execute(select(Job.id, Job.status))).all())  # type: ignore[arg-type]


@pytest.fixture
async def watcher(db: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(asyncpg_dsn(db))
    yield conn
    await conn.close()


@pytest.mark.parametrize("first", ["retry", "enqueue"])
async def test_a_retry_that_loses_the_race_names_the_holder_and_leaves_the_transaction_usable(
    async_engine: AsyncEngine, watcher: asyncpg.Connection, first: str
) -> None:
    a = await _failed(async_engine, 1)
    b = await _failed(async_engine, 2)
    async with (
        AsyncSession(async_engine, expire_on_commit=False) as winner,
        AsyncSession(async_engine, expire_on_commit=False) as loser,
    ):
        if first == "retry":
            assert await acta.retry(winner, a) is True
            holder = a
        else:
            holder = (await acta.enqueue(winner, keyed.job(n=3, unique_key="k"))).id
        await loser.execute(text("SELECT 1"))  # the loser's transaction is open before
        racing = asyncio.create_task(acta.retry(loser, b))
        await until_lock_waiters(watcher)  # queued on the winner's index entry
        await winner.commit()
        with pytest.raises(UniqueKeyHeld, match=rf"job {b} cannot be retried: job {holder} holds"):
            await racing
        # The loser's transaction goes on: it reads and writes, and commits.
        assert (await loser.execute(text("SELECT 1"))).scalar() == 1
        await loser.execute(update(Job).where(Job.id == a).values(priority=5))
        await loser.commit()
    statuses = await _statuses(async_engine)
    assert statuses[b] is JobStatus.FAILED
    assert statuses[holder] is JobStatus.READY


async def test_a_retry_whose_racing_holder_rolled_back_goes_through(
    async_engine: AsyncEngine, watcher: asyncpg.Connection
) -> None:
    a = await _failed(async_engine, 1)
    b = await _failed(async_engine, 2)
    async with (
        AsyncSession(async_engine) as winner,
        AsyncSession(async_engine) as loser,
    ):
        assert await acta.retry(winner, a) is True
        racing = asyncio.create_task(acta.retry(loser, b))
        await until_lock_waiters(watcher)
        await winner.rollback()
        assert await racing is True
        await loser.commit()
    statuses = await _statuses(async_engine)
    assert (statuses[a], statuses[b]) == (JobStatus.FAILED, JobStatus.READY)


async def test_the_dashboards_bulk_retry_skips_a_job_that_loses_the_race_and_goes_on(
    async_engine: AsyncEngine, watcher: asyncpg.Connection
) -> None:
    a = await _failed(async_engine, 1)
    b = await _failed(async_engine, 2)
    c = await _failed(async_engine, 3, key="other")
    async with (
        AsyncSession(async_engine) as winner,
        AsyncSession(async_engine) as dashboard,
    ):
        assert await acta.retry(winner, a) is True
        bulk = asyncio.create_task(_apply(dashboard, "retry", [b, c]))
        await until_lock_waiters(watcher)
        await winner.commit()
        done, held = await bulk
        await dashboard.commit()
    assert done == 1
    assert [(e.job_id, e.holder_id) for e in held] == [(b, a)]
    statuses = await _statuses(async_engine)
    assert (statuses[a], statuses[b], statuses[c]) == (
        JobStatus.READY,
        JobStatus.FAILED,
        JobStatus.READY,
    )
