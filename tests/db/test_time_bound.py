"""Due times against the database: the bound reaches PostgreSQL and reads back in Python on
every enqueue path, an operator's override past it is refused, and the readers survive a
stored timestamp out of Python's range (left by older code, here by a raw UPDATE).

Before: ``delay=10**12 - 1`` stored year 33715, then ``acta jobs ls`` and ``acta jobs show``
crashed with ``OverflowError``; a back-off of 1e13 s set with ``acta definitions set``
failed the job for good at attempt 1 of 3.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from acta_sqla import Acta, ConfigurationError, Context, Job, inspect
from acta_sqla.durations import MAX_SECONDS, SPAN
from acta_sqla.store import WorkerStore
from tests.harness import Sql, invoke_acta, one_line_error

APP = Acta()


@APP.job
async def later(ctx: Context, n: int = 0) -> None: ...


def _bound_year() -> int:
    return (datetime.now(UTC) + SPAN).year


async def test_a_delay_of_the_bound_is_stored_and_read_back_on_every_async_path(
    async_session: AsyncSession,
) -> None:
    one = later.job(n=1, delay=MAX_SECONDS)
    async_session.add(one)
    keyed = await APP.enqueue(async_session, later.job(n=2, delay=MAX_SECONDS, unique_key="u"))
    many = await APP.enqueue_many(async_session, later.jobs([{"n": 3}], delay=MAX_SECONDS))
    await async_session.flush()
    assert one.run_at.year == keyed.run_at.year == _bound_year()
    await async_session.commit()
    stored = (await async_session.scalars(select(Job).order_by(Job.id))).all()
    assert [j.run_at.year for j in stored] == [_bound_year()] * 3
    assert many[0].id == stored[2].id


def test_a_delay_of_the_bound_is_stored_and_read_back_by_a_sync_session(
    sync_session: Session,
) -> None:
    job = Job(kind="later", delay=timedelta(seconds=MAX_SECONDS))
    sync_session.add(job)
    sync_session.commit()
    assert sync_session.get(Job, job.id).run_at.year == _bound_year()  # type: ignore[union-attr]


async def _defined(conn: asyncpg.Connection, store: WorkerStore) -> None:
    await conn.execute(
        "INSERT INTO acta.namespace (name) VALUES ('default') ON CONFLICT DO NOTHING"
    )
    await store.store_definitions({"later": later.policy.to_json()})


@pytest.mark.parametrize("field", ["backoff_base", "backoff_max", "timeout", "retention"])
async def test_an_override_past_the_bound_is_refused_and_nothing_stored(
    conn: asyncpg.Connection, store: WorkerStore, async_engine: AsyncEngine, field: str
) -> None:
    await _defined(conn, store)
    async with AsyncSession(async_engine) as session:
        for value in ("1e13", 1e13, 10**400, float("inf")):
            with pytest.raises(ConfigurationError, match=rf"later: {field}=.* at most 1e10"):
                await APP.set_policy(session, "later", **{field: value})
        # The bound itself is taken (a back-off base with a maximum as large).
        both = {"backoff_max": MAX_SECONDS} if field == "backoff_base" else {}
        taken = await APP.set_policy(session, "later", **both, **{field: MAX_SECONDS})
        assert taken[field] == MAX_SECONDS
    overrides = await conn.fetchval("SELECT overrides FROM acta.definition")
    assert "1e13" not in str(overrides)


def test_definitions_set_past_the_bound_is_a_one_line_error(
    db: str, sql: Sql, tmp_path: Path
) -> None:
    sql("INSERT INTO acta.namespace (name) VALUES ('default')")
    sql(
        "INSERT INTO acta.definition (namespace, kind, declared) VALUES ('default', 'later', %s)",
        '{"max_attempts": 3}',
    )
    out = invoke_acta(db, "default", tmp_path, "definitions", "set", "later", "backoff_base=1e13")
    line = one_line_error(out, "definitions set")
    assert "backoff_base=" in line and "at most 1e10 seconds" in line, line
    assert sql("SELECT overrides::text FROM acta.definition") == [("{}",)]


@pytest.fixture
def far_job(sql: Sql) -> int:
    """A job whose due time and lease are out of Python's range, as older code stored them
    (``delay=10**12 - 1`` reached year 33715), and one before year 1."""
    rows = sql(
        "INSERT INTO acta.job (namespace, kind, run_at, lease_expires_at, status) VALUES "
        "('default', 'later', now() + make_interval(secs => 1e12 - 1), "
        " now() + make_interval(secs => 1e12), 'ready'), "
        "('default', 'later', '4000-01-01 BC', NULL, 'ready') RETURNING id"
    )
    return int(rows[0][0])


async def test_inspect_reads_a_job_whose_due_time_is_out_of_range(
    async_session: AsyncSession, far_job: int
) -> None:
    page = await inspect.list_jobs(async_session, namespace="default")
    assert [j.run_at.year for j in page.jobs] == [1, 9999]
    detail = await inspect.job_detail(async_session, far_job)
    assert detail is not None
    assert detail.run_at.year == 9999 and detail.lease_expires_at.year == 9999  # type: ignore[union-attr]
    assert detail.run_at.tzinfo is not None


def test_acta_jobs_ls_and_show_show_an_out_of_range_due_time(
    db: str, far_job: int, tmp_path: Path
) -> None:
    ls = invoke_acta(db, "default", tmp_path, "jobs", "ls")
    assert ls.returncode == 0, ls.stderr
    assert "beyond year 9999" in ls.stdout and "before 0001-01-02" in ls.stdout, ls.stdout
    show = invoke_acta(db, "default", tmp_path, "jobs", "show", str(far_job))
    assert show.returncode == 0, show.stderr
    assert "run_at: beyond year 9999" in show.stdout, show.stdout
