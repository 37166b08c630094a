"""A pause (or a worker's drop) of a schedule racing its fire's completion, forced in
both orders by a second connection holding one side's transaction open (issue 28, item
3): once the pause has committed, no new fire of the schedule exists that could run.

Before, the completion's ``next_fire`` read the schedule without a lock: a completion
whose snapshot predated the pause enqueued the successor after the pause had cancelled
the pending fires (23 of 240 pauses let one more fire run). Now every statement that
writes a fire reads the schedule's row ``FOR SHARE`` and the pause (or the drop) locks it
before it reads the fires to cancel."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import asyncpg
import pytest

from acta_sqla import schedules
from acta_sqla.database import asyncpg_dsn
from acta_sqla.queries import complete
from acta_sqla.store import WorkerStore
from acta_sqla.worker import completions
from acta_sqla.worker.fires import ensure_fires
from tests.db.conftest import new_store
from tests.db.test_schedules import MINUTELY, SCHEDULES, chained, claim_fire
from tests.waiting import until


@pytest.fixture
async def other(db: str) -> AsyncIterator[asyncpg.Connection]:
    """The second connection: holds one side of the race open."""
    c = await asyncpg.connect(asyncpg_dsn(db))
    try:
        yield c
    finally:
        await c.close()


async def statuses(conn: asyncpg.Connection) -> list[str]:
    rows = await conn.fetch(
        "SELECT status FROM acta.job WHERE schedule_name = 'minutely' ORDER BY scheduled_at"
    )
    return [r[0] for r in rows]


async def waits_or_ends(conn: asyncpg.Connection, task: asyncio.Task[Any]) -> bool:
    """Until ``task`` ends or a statement waits on a lock; whether it waits."""

    async def waiting() -> bool:
        return bool(await conn.fetchval("SELECT count(*) FROM pg_locks WHERE NOT granted"))

    async def either() -> bool:
        return task.done() or await waiting()

    await until(either, timeout=10, what="the racing statement to wait or end")
    return not task.done()


def start(work: Awaitable[Any]) -> asyncio.Task[Any]:
    return asyncio.ensure_future(work)


async def running_fire(conn: asyncpg.Connection, store: WorkerStore) -> completions.Completion:
    await store.store_schedules([MINUTELY])
    await ensure_fires(store, SCHEDULES)
    fire = await claim_fire(conn, store)
    return chained(fire, completions.succeeded(fire, None, 0.1))


async def hold_completion(
    other: asyncpg.Connection, store: WorkerStore, done: completions.Completion
) -> asyncpg.transaction.Transaction:
    """The fire's completion (the worker's own statement) written on ``other`` and left
    uncommitted: its successor exists, unseen by anyone else."""
    core, features = complete.encode([done])
    tx = other.transaction()
    await tx.start()
    rows = await other.fetch(store.sql.complete_executions, core, store.worker_id, features)
    assert [r[0] for r in rows] == [done.job_id]
    return tx


async def test_a_pause_waits_for_a_fire_s_completion_and_cancels_its_successor(
    conn: asyncpg.Connection, other: asyncpg.Connection, store: WorkerStore, db: str
) -> None:
    done = await running_fire(conn, store)
    held = await hold_completion(other, store, done)
    pauser = await asyncpg.connect(asyncpg_dsn(db))
    try:
        pausing = start(schedules.pause(pauser, "acta", "default", "minutely"))
        assert await waits_or_ends(conn, pausing), "the pause did not wait for the completion"
        await held.commit()
        assert await pausing is True
    finally:
        await pauser.close()
    # The successor committed before the pause read the pending fires: it cancelled it.
    assert await statuses(conn) == ["succeeded", "cancelled"]


async def test_a_completion_waits_for_a_pause_and_enqueues_no_successor(
    conn: asyncpg.Connection, other: asyncpg.Connection, store: WorkerStore
) -> None:
    done = await running_fire(conn, store)
    held = other.transaction()
    await held.start()
    assert await schedules.pause(other, "acta", "default", "minutely") is True
    completing = start(store.complete_executions([done]))
    assert await waits_or_ends(conn, completing), "the completion did not wait for the pause"
    await held.commit()
    assert await completing == {done.job_id}
    # The completion re-read the schedule after the pause: paused, no successor.
    assert await statuses(conn) == ["succeeded"]


async def test_a_recovery_pass_waits_for_a_pause_and_enqueues_no_fire(
    conn: asyncpg.Connection, other: asyncpg.Connection, store: WorkerStore
) -> None:
    await store.store_schedules([MINUTELY])  # no fire yet: the pass would enqueue one
    held = other.transaction()
    await held.start()
    assert await schedules.pause(other, "acta", "default", "minutely") is True
    ensuring = start(ensure_fires(store, SCHEDULES))
    assert await waits_or_ends(conn, ensuring), "the pass did not wait for the pause"
    await held.commit()
    assert await ensuring == []
    assert await statuses(conn) == []


async def test_a_worker_dropping_a_schedule_waits_for_a_completion_and_cancels_its_successor(
    conn: asyncpg.Connection, other: asyncpg.Connection, store: WorkerStore, db: str
) -> None:
    done = await running_fire(conn, store)
    held = await hold_completion(other, store, done)
    newer = await new_store(db)  # a worker of code that no longer declares the schedule
    try:
        dropping = start(newer.store_schedules([]))
        assert await waits_or_ends(conn, dropping), "the drop did not wait for the completion"
        await held.commit()
        assert await dropping == ["minutely"]
    finally:
        await newer.close()
    assert await statuses(conn) == ["succeeded", "cancelled"]
