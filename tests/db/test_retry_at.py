"""``raise Retry(after=<datetime>)`` through the real worker pipeline: the job is ready
again, charged, and due at that time (as the database counts it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from acta_sqla import Acta, Context, Job, JobStatus, Retry
from acta_sqla.testing import drain

app = Acta(namespace="retry_at")


@app.job(max_attempts=5)
async def call_partner(ctx: Context, at: str) -> None:
    raise Retry(after=datetime.fromisoformat(at), reason="partner API closed until then")


async def test_retry_at_a_datetime_makes_the_job_due_then(
    db: str, async_session: AsyncSession
) -> None:
    at = datetime.now(UTC) + timedelta(hours=2)
    job = await app.enqueue(async_session, call_partner.job(at=at.isoformat()))
    await async_session.commit()

    result = await drain(app, database_url=db)

    assert not result.crashed and result.claimed == 1
    row = (
        await async_session.execute(
            select(Job.status, Job.attempts, Job.run_at - func.now()).where(Job.id == job.id)
        )
    ).one()
    status, attempts, due_in = row
    assert (status, attempts) == (JobStatus.READY, 1)
    # Two hours on the database clock, less the time the drain took.
    assert timedelta(hours=2) - timedelta(seconds=30) < due_in <= timedelta(hours=2)


async def test_retry_at_a_past_time_runs_again_at_once(
    db: str, async_session: AsyncSession
) -> None:
    past = datetime.now(UTC) - timedelta(days=1)
    job = await app.enqueue(async_session, call_partner.job(at=past.isoformat()))
    await async_session.commit()

    result = await drain(app, database_url=db)

    # Due at once every time: the drain runs it until its budget of 5 is spent.
    assert result.claimed == 5
    status = await async_session.scalar(select(Job.status).where(Job.id == job.id))
    assert status == JobStatus.FAILED
