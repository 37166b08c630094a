"""`acta_sqla.testing.drain`, the examples, and the metrics, against a real PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from acta_sqla import Acta, Context, Job, JobStatus
from acta_sqla.testing import drain
from tests.telemetry import points as _points

app = Acta(namespace="drained")
seen: list[int] = []


@app.job(max_attempts=2, backoff_base=0)
async def record(ctx: Context, n: int) -> int:
    seen.append(n)
    if n == 13 and ctx.attempt == 1:
        raise RuntimeError("unlucky")
    return n * n


async def test_drain_runs_every_due_job_in_process(db: str, async_session: AsyncSession) -> None:
    seen.clear()
    await app.enqueue_many(async_session, [record.job(n=n) for n in range(20)])
    later = record.job(n=99, delay=3600)
    async_session.add(later)
    await async_session.commit()
    result = await drain(app, database_url=db)
    assert not result.crashed
    # n=13 failed once and, with no backoff, was retried within the same drain.
    assert sorted(seen) == sorted([*range(20), 13])
    assert result.claimed == 21 and result.batches >= 1
    counts = dict(
        (await async_session.execute(select(Job.status, func.count()).group_by(Job.status))).all()
    )
    assert counts == {JobStatus.SUCCEEDED: 20, JobStatus.READY: 1}
    # Scheduled jobs are left for later unless asked for.
    await drain(app, database_url=db, include_scheduled=True)
    assert 99 in seen


async def test_the_quickstart_example_runs(db: str, async_session: AsyncSession) -> None:
    from examples.quickstart import acta, resize_avatar, send_welcome

    async_session.add(send_welcome.job(user_id=42))
    async_session.add(resize_avatar.job(user_id=42))
    await async_session.commit()
    await drain(acta, database_url=db)
    # resize_avatar asked for a retry 0.2 s later on its first attempt: run it now.
    await drain(acta, database_url=db, include_scheduled=True)
    results = dict((await async_session.execute(select(Job.kind, Job.result))).all())
    assert results == {
        "send_welcome": {"sent": True, "user_id": 42, "template": "basic"},
        "resize_avatar": {"user_id": 42, "sizes": [64, 128, 256]},
    }


async def test_metrics_report_batches_outcomes_and_inflight(
    db: str, async_session: AsyncSession
) -> None:
    await app.enqueue_many(async_session, [record.job(n=n) for n in range(5)])
    await async_session.commit()
    await drain(app, database_url=db)
    batch_points = _points("acta.completions.batch")
    assert batch_points and sum(p.count for p in batch_points) >= 1  # type: ignore[attr-defined]
    succeeded = sum(
        p.value  # type: ignore[attr-defined]
        for p in _points("acta.completions")
        if p.attributes == {"acta.job.outcome": "succeeded", "acta.namespace": "drained"}  # type: ignore[attr-defined]
    )
    assert succeeded >= 5
    states = {p.attributes["acta.claim.state"] for p in _points("acta.jobs.inflight")}  # type: ignore[attr-defined]
    assert states == {"claimed", "executing", "finalizing"}
    assert sum(p.value for p in _points("acta.claims")) >= 5  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _quiet_seen() -> None:
    seen.clear()


async def test_the_orders_example_waits_for_children_then_a_signal(
    db: str, async_session: AsyncSession
) -> None:
    from examples.orders import acta, fulfil_order

    order = fulfil_order.job(order_id=7, skus=["a", "b", "c"])
    async_session.add(order)
    await async_session.commit()
    # One drain: the order spawns 3 children, they run, the order resumes and parks
    # waiting for "shipped".
    await drain(acta, database_url=db)
    row = (await async_session.execute(select(Job).where(Job.id == order.id))).scalar_one()
    await async_session.refresh(row)
    assert (row.status, row.awaited_signal) == (JobStatus.WAITING, "shipped")
    await acta.signal(async_session, order.id, "shipped", {"tracking": "1Z999"})
    await async_session.commit()
    await drain(acta, database_url=db)
    await async_session.refresh(row)
    assert row.status is JobStatus.SUCCEEDED
    assert row.result == {"order_id": 7, "items": 3, "tracking": "1Z999"}
