"""A suspect (a job lost with its worker before it was known to start) that becomes due
while a burst worker (``testing.drain``, ``acta worker --burst``) is busy is run before
the worker calls the queue empty: the plain claim cannot see suspects, so only a claim
that also probes for them may end a burst."""

from __future__ import annotations

import asyncio

import asyncpg
from sqlalchemy.ext.asyncio import AsyncSession

from acta_sqla import Acta, Context
from acta_sqla.testing import drain
from tests.waiting import until

app = Acta(namespace="suspects")
started = asyncio.Event()
release = asyncio.Event()


@app.job()
async def gated(ctx: Context) -> None:
    started.set()
    await release.wait()


@app.job()
async def lost_once(ctx: Context) -> str:
    return "ran"


async def test_a_burst_worker_runs_a_suspect_that_became_due_before_it_stops(
    db: str, conn: asyncpg.Connection, async_session: AsyncSession
) -> None:
    started.clear()
    release.clear()
    async_session.add(gated.job())
    await async_session.commit()
    burst = asyncio.create_task(drain(app, database_url=db))
    try:
        await until(started.is_set, 20, "the gated job to start")
        # Meanwhile another worker's recovery pass gave back a job lost before it was known
        # to start: ready, due, a suspect.
        suspect = await conn.fetchval(
            "INSERT INTO acta.job (namespace, kind, suspect) "
            "VALUES ('suspects', 'lost_once', true) RETURNING id"
        )
    finally:
        release.set()
    result = await asyncio.wait_for(burst, 30)
    assert not result.crashed and result.claimed == 2
    row = await conn.fetchrow("SELECT status, result::text FROM acta.job WHERE id = $1", suspect)
    assert tuple(row) == ("succeeded", '"ran"')
