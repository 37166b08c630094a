"""Who cancelled a job and why (issue 32), stored in ``last_error["cancel"]``: kept by the
completion (and recovery's) that ends an executing job the operator asked to stop."""

from __future__ import annotations

import json

import asyncpg
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from acta_sqla import session as acta_session
from acta_sqla.store import WorkerStore
from tests.db.conftest import new_store
from tests.db.test_worker_sql import insert, recover_20


def _cancel(engine: Engine, job_id: int, reason: str) -> str:
    with Session(engine) as s:
        outcome = acta_session.cancel(s, job_id, reason=reason, by="ops-ann")
        s.commit()
    return outcome


async def test_recovery_of_a_lost_cancel_requested_job_keeps_who_and_why(
    db: str, conn: asyncpg.Connection, store: WorkerStore, sync_engine: Engine
) -> None:
    other = await new_store(db)
    try:
        await insert(conn, 2, max_attempts=1)
        started, unstarted = sorted(await other.claim_jobs(2), key=lambda j: j.id)
    finally:
        await other.close()
    await conn.execute(
        "UPDATE acta.job SET started_at = now() - interval '5 seconds' WHERE id = $1", started.id
    )
    assert _cancel(sync_engine, started.id, "wrong customer") == "requested"
    assert _cancel(sync_engine, unstarted.id, "duplicate") == "requested"
    await conn.execute("UPDATE acta.job SET lease_expires_at = now() - interval '1 second'")
    await store.recover_expired(100, recover_20)
    for job_id, reason in ((started.id, "wrong customer"), (unstarted.id, "duplicate")):
        status, error = await conn.fetchrow(
            "SELECT status, last_error FROM acta.job WHERE id = $1", job_id
        )
        error = json.loads(error) if isinstance(error, str) else error
        assert status == "cancelled"
        assert error["cancel"]["by"] == "ops-ann" and error["cancel"]["reason"] == reason
    started_error = await conn.fetchval(
        "SELECT last_error->>'type' FROM acta.job WHERE id = $1", started.id
    )
    assert started_error == "acta.LeaseExpired"  # the loss, recorded beside the cancel
