"""The attempt history after migration 0015: the attempt that ends a job is kept on the job
row (no Execution row for it), and ``acta.attempt`` reads every attempt of every job."""

from __future__ import annotations

from collections.abc import Callable

import asyncpg
import psycopg
from sqlalchemy.ext.asyncio import AsyncSession

from acta_sqla import inspect, migrate
from acta_sqla.session import retry
from acta_sqla.store import WorkerStore
from acta_sqla.values import Outcome
from acta_sqla.worker import completions
from acta_sqla.worker.completions import handback
from tests.db.test_worker_sql import completion, insert, row


async def history(conn: asyncpg.Connection, job_id: int) -> list[tuple[object, ...]]:
    return [
        tuple(r)
        for r in await conn.fetch(
            "SELECT id, attempt, outcome, error_type, error_message, traceback, worker_id "
            "FROM acta.attempt WHERE job_id = $1 ORDER BY finished_at, attempt",
            job_id,
        )
    ]


async def test_the_attempt_that_ends_a_job_is_on_its_row_and_the_view_reads_all_attempts(
    conn: asyncpg.Connection, store: WorkerStore, async_session: AsyncSession
) -> None:
    [job_id] = await insert(conn)
    [first] = await store.claim_jobs(1)
    err = completions.ErrorFields("E", "boom", "tb1")
    await store.complete_executions(
        [
            completion(
                first,
                Outcome.FAILED,
                "ready",
                delay=0.0,
                error_type=err.type,
                error_message=err.message,
                traceback=err.traceback,
                ran_seconds=0.1,
            )
        ]
    )
    [second] = await store.claim_jobs(1)
    await store.complete_executions([completions.succeeded(second, None, 30.0)])

    # One Execution row: the retried attempt; the final one sits on the job row.
    assert await conn.fetchval("SELECT count(*) FROM acta.execution") == 1
    r = await row(conn, job_id)
    assert (r["status"], r["outcome"], r["attempt_error"]) == ("succeeded", "succeeded", None)
    assert r["worker_id"] == store.worker_id and r["execution_id"] == second.execution_id
    took = await conn.fetchval(
        "SELECT extract(epoch FROM finished_at - started_at) FROM acta.job WHERE id = $1", job_id
    )
    assert 29 < took <= 31  # dated from how long the handler ran, as an Execution row is
    w = store.worker_id
    assert await history(conn, job_id) == [
        (first.execution_id, 1, "failed", "E", "boom", "tb1", w),
        (second.execution_id, 2, "succeeded", None, None, None, w),
    ]
    # `acta jobs show` and the dashboard read the same view.
    detail = await inspect.job_detail(async_session, job_id)
    assert detail is not None
    assert [(e.id, e.attempt, e.outcome) for e in detail.executions] == [
        (first.execution_id, 1, "failed"),
        (second.execution_id, 2, "succeeded"),
    ]
    # The dashboard's run time of a kind's last attempts reads the job row's too.
    rates = await inspect.kind_rates(async_session, "default", 300.0)
    assert rates["k"].p50 is not None and 29 < rates["k"].p50 <= 31


async def test_a_failed_final_attempt_keeps_its_error_and_traceback(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    [job_id] = await insert(conn)
    [job] = await store.claim_jobs(1)
    err = completions.ErrorFields("Fatal", "no", "tb")
    await store.complete_executions([completions.fail_now(job, err, None)])
    assert await conn.fetchval("SELECT count(*) FROM acta.execution") == 0
    assert await history(conn, job_id) == [
        (job.execution_id, 1, "fail", "Fatal", "no", "tb", store.worker_id)
    ]
    assert (await row(conn, job_id))["started_at"] is None  # it never started here


async def test_an_operator_retry_moves_the_final_attempt_into_execution_first(
    conn: asyncpg.Connection, store: WorkerStore, sync_session: object
) -> None:
    """The next attempt rewrites the job row's attempt columns: the BEFORE UPDATE trigger
    copies the final attempt out before the row leaves its terminal state, whoever moves it
    (an operator's retry here, a hand-written UPDATE below)."""
    [job_id] = await insert(conn)
    [job] = await store.claim_jobs(1)
    err = completions.ErrorFields("E", "first", None)
    await store.complete_executions([completions.fail_now(job, err, None)])
    assert retry(sync_session, job_id)  # type: ignore[arg-type]
    sync_session.commit()  # type: ignore[attr-defined]
    r = await row(conn, job_id)
    assert (r["status"], r["outcome"], r["attempt_error"]) == ("ready", None, None)
    [again] = await store.claim_jobs(1)
    await store.complete_executions([completions.succeeded(again, None, 0.01)])
    await conn.execute("UPDATE acta.job SET status = 'ready', attempts = 0 WHERE id = $1", job_id)
    w = store.worker_id
    assert await history(conn, job_id) == [
        (job.execution_id, 1, "fail", "E", "first", None, w),
        (again.execution_id, 1, "succeeded", None, None, None, w),
    ]
    assert await conn.fetchval("SELECT count(*) FROM acta.execution") == 2


async def test_an_uncharged_attempt_that_ends_the_job_keeps_its_execution_row(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    """A hand-back of a job an operator asked to cancel ends it cancelled with its attempt
    given back: the row's count no longer names the attempt, so its record is an Execution
    row (none here: a hand-back is no attempt), and the job row holds no outcome."""
    [job_id] = await insert(conn)
    [job] = await store.claim_jobs(1)
    await conn.execute("UPDATE acta.job SET cancel_requested = true WHERE id = $1", job_id)
    [back] = [handback(job, 0.0)._replace(cancel_wins=True, record=True)]
    await store.complete_executions([back])
    r = await row(conn, job_id)
    assert (r["status"], r["attempts"], r["outcome"]) == ("cancelled", 0, None)
    assert await history(conn, job_id) == [
        (job.execution_id, 1, "handback", None, None, None, store.worker_id)
    ]


def test_the_migration_carries_finished_jobs_history_over(
    scratch_database: Callable[[], str],
) -> None:
    """Jobs finished before migration 0015 keep their Execution rows; the view shows each
    attempt once, and a downgrade writes the job rows' final attempts back as rows."""
    url = scratch_database()
    migrate.upgrade(url, "0014")
    with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as c:
        job_id = c.execute(
            "INSERT INTO acta.job (kind, status, attempts, execution_id, finished_at) "
            "VALUES ('k', 'succeeded', 2, 22, now()) RETURNING id"
        ).fetchone()[0]  # type: ignore[index]
        c.execute(
            "INSERT INTO acta.execution (job_id, id, attempt, outcome) "
            "VALUES (%s, 21, 1, 'failed'), (%s, 22, 2, 'succeeded')",
            (job_id, job_id),
        )
        migrate.upgrade(url)
        # The job table leaves half of each page for its rows' next versions.
        assert c.execute(
            "SELECT reloptions FROM pg_class WHERE oid = 'acta.job'::regclass"
        ).fetchone() == (["fillfactor=50"],)
        rows = c.execute(
            "SELECT id, attempt, outcome FROM acta.attempt WHERE job_id = %s ORDER BY id",
            (job_id,),
        ).fetchall()
        assert rows == [(21, 1, "failed"), (22, 2, "succeeded")]
        # A job finished after the migration: its final attempt only on its row ...
        c.execute(
            "INSERT INTO acta.job (kind, status, attempts, execution_id, finished_at, outcome)"
            " VALUES ('k', 'succeeded', 1, 31, now(), 'succeeded')"
        )
        migrate.downgrade(url, "0014")
        # ... written back as an Execution row by the downgrade.
        assert c.execute("SELECT id, outcome FROM acta.execution ORDER BY id").fetchall() == [
            (21, "failed"),
            (22, "succeeded"),
            (31, "succeeded"),
        ]
