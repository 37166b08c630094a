"""A user's own test file: it uses only acta's public test kit, as an application would
(copied into a temporary project and run by tests/kit/test_user_suite.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from acta_sqla import Acta, Context, InvalidJobArgs, Job, Retry
from acta_sqla.models import attempt_history
from acta_sqla.testing import (
    assert_enqueued,
    assert_enqueued_sync,
    assert_not_enqueued,
    drain,
    enqueued,
    faults,
    perform,
)

acta = Acta(namespace="shop")
RUNS = Path(__file__).with_name("runs.log")


@acta.job(max_attempts=3)
async def send_receipt(ctx: Context, order_id: int, email: str) -> dict[str, int]:
    with RUNS.open("a") as f:
        f.write(f"{ctx.job_id} {ctx.attempt}\n")
    return {"order": order_id}


@acta.job
async def charge(ctx: Context, order_id: int) -> str:
    if ctx.attempt < 2:
        raise Retry(after=3600)  # a retry far in the future: make_due brings it now
    return "charged"


async def place_order(session, order_id: int) -> None:
    """The application's code under test: enqueue in the caller's transaction."""
    await acta.enqueue(session, send_receipt.job(order_id=order_id, email="a@example.com"))
    await acta.enqueue(session, charge.job(order_id=order_id, lane=f"order-{order_id}"))
    await session.commit()


def runs() -> list[str]:
    return RUNS.read_text().splitlines() if RUNS.exists() else []


@pytest.fixture(autouse=True)
def _fresh_runs():
    RUNS.unlink(missing_ok=True)


async def test_perform_runs_the_handler_inline():
    assert await perform(send_receipt, order_id=7, email="b@example.com") == {"order": 7}
    with pytest.raises(Retry):
        await perform(charge, order_id=7)
    assert await perform(charge, order_id=7, ctx={"attempt": 2}) == "charged"
    with pytest.raises(InvalidJobArgs):
        await perform(send_receipt, order_id="not a number", email="x")


async def test_assert_enqueued(acta_session):
    await place_order(acta_session, 42)
    await assert_enqueued(acta_session, send_receipt, args={"order_id": 42})
    await assert_enqueued(acta_session, charge, args={"order_id": 42}, lane="order-42", count=1)
    await assert_not_enqueued(acta_session, charge, args={"order_id": 43})
    with pytest.raises(AssertionError) as failed:
        await assert_enqueued(acta_session, send_receipt, args={"order_id": 99})
    message = str(failed.value)
    assert "expected a job with kind 'send_receipt'" in message
    assert '"order_id": 42' in message  # what was enqueued instead is listed
    assert "charge" in message
    (job,) = await enqueued(acta_session, send_receipt)
    assert job.args == {"order_id": 42, "email": "a@example.com"}


async def test_the_tables_are_empty_again(acta_session):
    assert await enqueued(acta_session, send_receipt) == []


async def test_a_worker_runs_them(acta_session, acta_worker):
    await acta_worker(acta)
    await acta.enqueue(acta_session, send_receipt.job(order_id=1, email="c@example.com"))
    await acta_session.commit()
    import asyncio

    for _ in range(500):
        (job,) = await enqueued(acta_session, send_receipt)
        await acta_session.refresh(job)
        if job.status == "succeeded":
            break
        await asyncio.sleep(0.02)
    assert job.result == {"order": 1}


async def test_crash_before_the_completion_commit(acta_session):
    await place_order(acta_session, 5)
    (job,) = await enqueued(acta_session, send_receipt)
    with faults.crash_at("before_completion_commit") as crash:
        result = await drain(acta)
    assert result.killed and crash.happened and job.id in crash.job_ids
    assert len(runs()) >= 1  # the handler ran; its success was never written
    await acta_session.refresh(job)
    assert job.status == "executing"  # as a SIGKILL leaves it, until the lease runs out

    await faults.expire_lease(acta_session, *crash.job_ids)
    await drain(acta)
    await acta_session.refresh(job)
    assert job.status == "succeeded"
    assert [line.split()[0] for line in runs()].count(str(job.id)) == 2  # at least once
    history = (
        await acta_session.execute(
            select(attempt_history)
            .where(attempt_history.c.job_id == job.id)
            .order_by(attempt_history.c.id)
        )
    ).all()
    assert [e.outcome for e in history] == ["lost", "succeeded"]
    assert history[0].error_type == "acta.LeaseExpired"


async def test_make_due_brings_a_retry_now(acta_session):
    await place_order(acta_session, 6)
    await drain(acta)
    (job,) = await enqueued(acta_session, charge)
    await acta_session.refresh(job)
    assert job.status == "ready" and job.attempts == 1  # retrying in an hour
    assert await faults.make_due(acta_session, acta) == 1
    await drain(acta)
    await acta_session.refresh(job)
    assert job.status == "succeeded" and job.result == "charged"
    assert (await acta_session.get(Job, job.id)).attempts == 2


def test_a_sync_enqueue_path(acta_sync_session, acta_database_url):
    assert acta_database_url.startswith("postgresql://")
    acta.enqueue_sync(acta_sync_session, send_receipt.job(order_id=2, email="d@example.com"))
    acta_sync_session.commit()
    assert_enqueued_sync(acta_sync_session, send_receipt, args={"order_id": 2}, count=1)
