"""The wake-up trigger: a committed statement that leaves a job ready and due now NOTIFYs
the channel ``acta.<namespace>`` once, whichever driver committed it.

Absence is proven without sleeping: after the action under test, a barrier notification is
sent on the same channel from another session. PostgreSQL delivers notifications in commit
order, so once the barrier arrives, anything the action had sent would already be there.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy import func, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from acta_sqla import Acta, Context, Job
from acta_sqla.models import SCHEMA

acta = Acta(namespace="default")
CHANNEL = f"{SCHEMA}.default"
BARRIER = "test-barrier"
DEADLINE_SECONDS = 10.0


@acta.job
async def ping(ctx: Context, n: int) -> None:
    return None


class Listener:
    """Collects the payloads of one channel; ``until(payload)`` waits for one to arrive."""

    def __init__(self, dsn: str, channel: str) -> None:
        self.dsn = dsn
        self.channel = channel
        self.payloads: list[str] = []
        self._arrived = asyncio.Event()

    def __call__(self, conn: object, pid: int, channel: str, payload: str) -> None:
        self.payloads.append(payload)
        self._arrived.set()

    async def until(self, payload: str) -> list[str]:
        """Wait (with a deadline) until ``payload`` arrives; return what came before it."""

        async def arrived() -> None:
            while payload not in self.payloads:
                self._arrived.clear()
                await self._arrived.wait()

        try:
            await asyncio.wait_for(arrived(), DEADLINE_SECONDS)
        except TimeoutError:
            pytest.fail(f"no {payload!r} on {self.channel!r} within {DEADLINE_SECONDS}s")
        index = self.payloads.index(payload)
        before, self.payloads = self.payloads[:index], self.payloads[index + 1 :]
        return before

    async def barrier(self) -> list[str]:
        """Send the barrier from another session; return what arrived before it."""
        sender = await asyncpg.connect(self.dsn)
        try:
            await sender.execute("SELECT pg_notify($1, $2)", self.channel, BARRIER)
        finally:
            await sender.close()
        return await self.until(BARRIER)


async def _listen(db: str, channel: str) -> AsyncIterator[Listener]:
    conn = await asyncpg.connect(db)
    listener = Listener(db, channel)
    await conn.add_listener(channel, listener)
    try:
        yield listener
    finally:
        await conn.close()


@pytest.fixture
async def listener(db: str) -> AsyncIterator[Listener]:
    async for item in _listen(db, CHANNEL):
        yield item


@pytest.fixture
async def other_listener(db: str) -> AsyncIterator[Listener]:
    async for item in _listen(db, f"{SCHEMA}.other"):
        yield item


async def test_commit_of_a_due_job_notifies(
    async_session: AsyncSession, listener: Listener
) -> None:
    async_session.add(ping.job(n=1))
    await async_session.flush()
    assert await listener.barrier() == []  # NOTIFY is delivered at commit, not at insert

    await async_session.commit()

    assert await listener.until("") == []


async def test_rollback_sends_nothing(async_session: AsyncSession, listener: Listener) -> None:
    async_session.add(ping.job(n=1))
    await async_session.flush()
    await async_session.rollback()

    assert await listener.barrier() == []


async def test_a_job_due_later_sends_nothing(
    async_session: AsyncSession, listener: Listener
) -> None:
    async_session.add(ping.job(n=1, delay=3600))
    await async_session.commit()

    assert await listener.barrier() == []


async def test_a_bulk_enqueue_sends_one_notification(
    async_session: AsyncSession, listener: Listener
) -> None:
    await acta.enqueue_many(async_session, [ping.job(n=i) for i in range(5000)])
    await async_session.commit()

    assert await listener.barrier() == [""]


async def test_a_row_that_becomes_due_notifies(
    async_session: AsyncSession, listener: Listener
) -> None:
    job = ping.job(n=1, delay=3600)
    async_session.add(job)
    await async_session.commit()
    assert await listener.barrier() == []

    await async_session.execute(update(Job).where(Job.id == job.id).values(run_at=func.now()))
    await async_session.commit()

    assert await listener.until("") == []


async def test_commit_through_psycopg_notifies(sync_session: Session, listener: Listener) -> None:
    sync_session.add(Job(kind="ping", args={"n": 1}))
    sync_session.commit()

    assert await listener.until("") == []


async def test_each_namespace_has_its_own_channel(
    async_session: AsyncSession, listener: Listener, other_listener: Listener
) -> None:
    async_session.add(Job(kind="ping", args={"n": 1}, namespace="other"))
    await async_session.commit()

    assert await other_listener.until("") == []
    assert await listener.barrier() == []
