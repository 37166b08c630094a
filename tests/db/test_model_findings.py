"""What the protocol model (tests/model, docs/reliability.md "Model check") found in the
code, each shrunk sequence kept as a regular test."""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy.orm import Session

from acta_sqla import Job
from acta_sqla.store import WorkerStore
from acta_sqla.worker import completions


@pytest.mark.xfail(
    strict=True,
    reason=(
        "a signal wait with no timeout parks the job with run_at = 'infinity' "
        "(queries/complete.py), which psycopg 3 cannot load as a datetime (DataError: "
        "timestamp too large): a synchronous application on psycopg cannot load such a job "
        "through the ORM (session.get, select(Job), session.delete of it). asyncpg loads "
        "it as datetime.max. The fix is not local: a psycopg loader for the application's "
        "engine, or another encoding of 'no timeout' in the completion and wait statements."
    ),
)
async def test_a_job_waiting_for_a_signal_forever_loads_through_the_sync_orm(
    conn: asyncpg.Connection, store: WorkerStore, sync_session: Session
) -> None:
    """The model's shrunk sequence: enqueue a job whose first run waits for a signal,
    claim it, start it, complete it with ``wait_for_signal(timeout=None)``, then the
    application deletes it (``session.delete(session.get(Job, id))``): the load fails."""
    job_id = await conn.fetchval("INSERT INTO acta.job (kind) VALUES ('k') RETURNING id")
    [job] = await store.claim_jobs(1)
    parked = completions.wait_for_signal(job, "go", None, 0.01)
    assert await store.complete_executions([parked]) == {job_id}
    assert await conn.fetchval("SELECT status FROM acta.job WHERE id = $1", job_id) == "waiting"
    loaded = sync_session.get(Job, job_id)
    assert loaded is not None and loaded.status == "waiting"
