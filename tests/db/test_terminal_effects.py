"""The terminal-effects path (migration 0003's trigger): every way out of ``executing`` or
into a terminal state frees the attempt's concurrency slots, whichever of the three writers
ended it (complete_executions, recovery, the session's cancel), and only that attempt's."""

from __future__ import annotations

import asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from acta_sqla import Acta
from acta_sqla.policy import Policy
from acta_sqla.store import WorkerStore
from acta_sqla.values import ClaimedJob
from acta_sqla.worker import completions
from acta_sqla.worker.recovery import decide_expired


async def claim_keyed(conn: asyncpg.Connection, store: WorkerStore, key: str) -> ClaimedJob:
    """One job with concurrency key ``key``, claimed, holding its slot (as admission takes it)."""
    await conn.execute("INSERT INTO acta.job (kind, concurrency_key) VALUES ('k', $1)", key)
    [job] = await store.claim_jobs(1)
    await hold(conn, job.id, job.execution_id, key)
    return job


async def hold(conn: asyncpg.Connection, job_id: int, execution_id: int, key: str) -> None:
    await conn.execute(
        "INSERT INTO acta.concurrency_slot (namespace, key, job_id, execution_id) "
        "VALUES ('default', $1, $2, $3)",
        key,
        job_id,
        execution_id,
    )


async def slots(conn: asyncpg.Connection) -> set[tuple[str, int, int]]:
    rows = await conn.fetch("SELECT key, job_id, execution_id FROM acta.concurrency_slot")
    return {(r["key"], r["job_id"], r["execution_id"]) for r in rows}


async def test_a_completion_frees_the_attempts_slot_whatever_its_shape(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    done = await claim_keyed(conn, store, "a")
    retried = await claim_keyed(conn, store, "b")
    handed = await claim_keyed(conn, store, "c")
    running = await claim_keyed(conn, store, "d")
    err = completions.ErrorFields("E", "m", "")
    batch = [
        completions.succeeded(done, None, 0.1),
        completions.failed(retried, Policy(max_attempts=5), err, 0.1),
        completions.handback(handed, 0.0),
    ]
    assert await store.complete_executions(batch) == {done.id, retried.id, handed.id}
    # Every way out of executing frees the slot (a retry or a hand-back too: the next
    # attempt takes one of its own); the attempt still running keeps its slot.
    assert await slots(conn) == {("d", running.id, running.execution_id)}


async def test_a_stale_completion_frees_nothing(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    job = await claim_keyed(conn, store, "a")
    stale = completions.succeeded(job, None, 0.1)._replace(execution_id=job.execution_id + 1)
    assert await store.complete_executions([stale]) == set()
    assert await slots(conn) == {("a", job.id, job.execution_id)}


async def test_a_slot_of_another_execution_of_the_same_job_is_not_freed(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    await conn.execute("INSERT INTO acta.job (kind, concurrency_key) VALUES ('k', 'a')")
    [job] = await store.claim_jobs(1)
    # A slot left by an earlier execution of this job (not this attempt's).
    await hold(conn, job.id, job.execution_id - 1, "a")
    assert await store.complete_executions([completions.succeeded(job, None, 0.1)]) == {job.id}
    assert await slots(conn) == {("a", job.id, job.execution_id - 1)}


async def test_recovery_of_an_expired_lease_frees_the_slot(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    lost = await claim_keyed(conn, store, "a")
    alive = await claim_keyed(conn, store, "b")
    await conn.execute(
        "UPDATE acta.job SET lease_expires_at = now() - interval '1 second' WHERE id = $1",
        lost.id,
    )
    assert await store.recover_expired(100, decide_expired) == [(lost.id, "ready", False)]
    assert await slots(conn) == {("b", alive.id, alive.execution_id)}


async def test_a_cancel_that_ends_a_job_frees_its_slot(
    conn: asyncpg.Connection, store: WorkerStore, async_engine: AsyncEngine
) -> None:
    # A job suspended between attempts ('waiting') that holds a slot of its last
    # execution: the cancel ends it, and the slot goes with it.
    job_id = await conn.fetchval(
        "INSERT INTO acta.job (kind, concurrency_key, status, execution_id) "
        "VALUES ('k', 'a', 'waiting', 42) RETURNING id"
    )
    await hold(conn, job_id, 42, "a")
    other = await claim_keyed(conn, store, "b")  # another job's slot stays
    async with AsyncSession(async_engine) as session:
        assert await Acta(allow_unknown_kinds=True).cancel(session, job_id) == "cancelled"
        await session.commit()
    assert await conn.fetchval("SELECT status FROM acta.job WHERE id = $1", job_id) == "cancelled"
    assert await slots(conn) == {("b", other.id, other.execution_id)}


async def test_a_plain_job_without_a_concurrency_key_never_calls_the_trigger(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    """The WHEN clause keeps plain jobs off the trigger function: the drain pays one
    expression per row, no call (pg_stat_user_functions counts the calls)."""
    calls_sql = (
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions "
        "WHERE schemaname = 'acta' AND funcname = 'job_terminal_effects'"
    )
    await store.complete_conn.execute("SET track_functions = 'pl'")
    await store.complete_conn.execute("SELECT pg_stat_force_next_flush()")
    before = await conn.fetchval(calls_sql)
    await conn.execute("INSERT INTO acta.job (kind) SELECT 'k' FROM generate_series(1, 5)")
    jobs = await store.claim_jobs(5)
    await store.complete_executions([completions.succeeded(j, None, 0.1) for j in jobs])
    keyed = await claim_keyed(conn, store, "a")
    await store.complete_executions([completions.succeeded(keyed, None, 0.1)])
    # Pending statistics are flushed when the backend goes idle after this statement.
    await store.complete_conn.execute("SELECT pg_stat_force_next_flush()")
    assert await conn.fetchval(calls_sql) - before == 1  # the keyed job's, only
