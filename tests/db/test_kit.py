"""acta_sqla.testing and acta_sqla.testing.faults, piece by piece, on a real PostgreSQL
(tests/kit/test_user_suite.py runs them as a user's suite does, through the plugin)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from acta_sqla import (
    Acta,
    ConfigurationError,
    Context,
    Job,
    WaitForSignal,
)
from acta_sqla import _faults as seam
from acta_sqla.models import attempt_history
from acta_sqla.testing import (
    assert_enqueued,
    assert_enqueued_sync,
    assert_not_enqueued,
    assert_not_enqueued_sync,
    drain,
    faults,
    inline,
    perform,
    perform_sync,
    running_worker,
)
from tests.waiting import until

app = Acta(namespace="kit")


@app.job
async def sees_the_mark(ctx: Context) -> bool:
    """Whether the process is marked as an ``acta worker``'s while a handler runs."""
    seen = seam.worker_process
    if seen:
        with pytest.raises(ConfigurationError, match="runs an acta worker"), inline(app):
            pass
    return seen


ran: list[tuple[int, int]] = []


@app.job(max_attempts=3)
async def step(ctx: Context, n: int) -> int:
    ran.append((ctx.job_id, ctx.attempt))
    return n + 1


@app.job
def sync_step(ctx: Context, n: int) -> int:
    assert threading.current_thread() is not threading.main_thread() or ctx.should_stop is False
    return n * 2


@app.job
async def approval(ctx: Context) -> object:
    if ctx.resumed is None:
        return WaitForSignal("approved", timeout=3600)
    return {"resumed": ctx.resumed, "signals": ctx.signals}


@app.job(concurrency_key="shop", priority=3)
async def keyed(ctx: Context, shop: str) -> None:
    return None


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()
    assert seam.active is None  # no fault left armed by an earlier test


async def _zero(count: object) -> bool:
    return await count == 0  # type: ignore[misc]


async def history(session: AsyncSession, job_id: int) -> list[Any]:
    """Every attempt of the job, through the ``acta.attempt`` view (migration 0015)."""
    rows = await session.execute(
        select(attempt_history)
        .where(attempt_history.c.job_id == job_id)
        .order_by(attempt_history.c.id)
    )
    return list(rows.all())


async def status(session: AsyncSession, job_id: int) -> str:
    return str(
        (await session.execute(text(f"SELECT status FROM acta.job WHERE id = {job_id}"))).scalar()
    )


# ---------------------------------------------------------------------- perform


async def test_perform_gives_a_real_context_and_validates_args() -> None:
    assert await perform(step, n=1) == 2
    ((job_id, attempt),) = ran
    assert attempt == 1 and job_id > 0
    assert await perform(sync_step, n=4) == 8
    assert perform_sync(sync_step, n=5) == 10
    waited = await perform(approval)
    assert isinstance(waited, WaitForSignal)
    assert await perform(approval, ctx={"resumed": "signal", "signals": {"approved": 1}}) == {
        "resumed": "signal",
        "signals": {"approved": 1},
    }
    with pytest.raises(Exception, match="n"):
        await perform(step, n="x")
    with pytest.raises(ConfigurationError, match="unknown field"):
        await perform(step, n=1, ctx={"colour": 1})


# ---------------------------------------------------------------------- assertions


async def test_assert_enqueued_matches_args_and_options(
    db: str, async_session: AsyncSession
) -> None:
    await app.enqueue(async_session, keyed.job(shop="a"))
    await app.enqueue(async_session, step.job(n=1, lane="l1"))  # not committed: the session sees it
    await assert_enqueued(
        async_session, keyed, args={"shop": "a"}, concurrency_key="shop", priority=3
    )
    await assert_enqueued(async_session, step, count=1, lane="l1")
    await assert_enqueued(async_session, "step", args={"n": 1})
    await assert_not_enqueued(async_session, step, args={"n": 2})
    with pytest.raises(AssertionError) as failed:
        await assert_enqueued(async_session, step, args={"n": 1}, lane="other")
    assert "found 0 matching" in str(failed.value) and "lane='l1'" in str(failed.value)
    with pytest.raises(AssertionError, match="expected no job"):
        await assert_not_enqueued(async_session, step)
    with pytest.raises(ConfigurationError, match="unknown option"):
        await assert_enqueued(async_session, step, colour="red")


def test_assert_enqueued_sync(db: str, sync_session: Session) -> None:
    app.enqueue_sync(sync_session, step.job(n=3))
    assert_enqueued_sync(sync_session, step, args={"n": 3}, count=1)
    assert_not_enqueued_sync(sync_session, sync_step)


# ---------------------------------------------------------------------- crashes


@pytest.mark.parametrize(
    ("point", "handler_ran", "started"),
    [
        ("after_claim", False, False),
        ("in_handler", False, True),
        ("before_completion_commit", True, None),
    ],
)
async def test_crash_leaves_what_a_sigkill_leaves(
    db: str, async_session: AsyncSession, point: str, handler_ran: bool, started: bool | None
) -> None:
    job = step.job(n=1)
    async_session.add(job)
    await async_session.commit()
    with faults.crash_at(point) as crash:
        result = await drain(app, database_url=db)
    assert result.killed and crash.happened and crash.job_ids == [job.id]
    assert bool(ran) is handler_ran
    row = (
        await async_session.execute(
            text(
                "SELECT j.status, j.started_at IS NOT NULL, j.lease_expires_at > now(), "
                "w.status, w.stopped_at FROM acta.job j JOIN acta.worker w ON w.id = j.worker_id "
                f"WHERE j.id = {job.id}"
            )
        )
    ).one()
    # Nothing was handed back or marked stopped: the row is held until its lease runs out.
    assert row[0] == "executing" and row[2] is True
    assert row[3] == "running" and row[4] is None
    if started is not None:
        assert row[1] is started
    assert await history(async_session, job.id) == []

    async def connections() -> int:
        found = await async_session.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name LIKE 'acta:%'"
            )
        )
        count = int(found.scalar() or 0)
        # A transaction reads pg_stat_activity once and keeps that snapshot: end it (a
        # commit of reads; expire_on_commit=False keeps the job loaded), or every poll
        # after the first would see the backends still there.
        await async_session.commit()
        return count

    # Every connection of the dead worker is gone (the server ends them as it notices).
    await until(lambda: _zero(connections()), timeout=10, what="the dead worker's connections")

    await faults.expire_lease(async_session, job.id)
    await drain(app, database_url=db)
    lost, done = await history(async_session, job.id)
    assert (lost.outcome, lost.error_type, done.outcome) == (
        "lost",
        "acta.LeaseExpired",
        "succeeded",
    )
    assert await status(async_session, job.id) == "succeeded"


async def test_crash_at_rejects_unknown_points() -> None:
    with pytest.raises(ConfigurationError, match="after_claim"), faults.crash_at("sometime"):
        pass


async def test_expire_lease_needs_an_executing_job(db: str, async_session: AsyncSession) -> None:
    job = step.job(n=1)
    async_session.add(job)
    await async_session.commit()
    with pytest.raises(ValueError, match="not executing"):
        await faults.expire_lease(async_session, job.id)


# ---------------------------------------------------------------------- failed writes, outage


async def test_failed_completion_writes_are_repeated(db: str, async_session: AsyncSession) -> None:
    job = step.job(n=1)
    async_session.add(job)
    await async_session.commit()
    with faults.fail_completion_writes(1) as writes:
        await drain(app, database_url=db)
    assert writes.failed == 1
    assert len(ran) == 1  # the write was repeated, the handler was not
    assert [e.outcome for e in await history(async_session, job.id)] == ["succeeded"]


async def test_database_outage_is_ridden_out(db: str, async_session: AsyncSession) -> None:
    async with running_worker(app, database_url=db) as worker:
        await faults.database_outage(1.5, database_url=db)
        job = step.job(n=1)
        async_session.add(job)
        await async_session.commit()
        await until(lambda: status(async_session, job.id), timeout=60, what="the job")

        async def done() -> bool:
            return await status(async_session, job.id) == "succeeded"

        await until(done, timeout=60, what="the job to succeed after the outage")
        assert not worker.crashed


# ---------------------------------------------------------------------- time


async def test_make_due_wakes_signal_timeouts_and_delays(
    db: str, async_session: AsyncSession
) -> None:
    waiting = approval.job()
    later = step.job(n=5, delay=3600)
    async_session.add_all([waiting, later])
    await async_session.commit()
    await drain(app, database_url=db)
    assert await status(async_session, waiting.id) == "waiting"
    assert await faults.make_due(async_session, app) == 2
    await drain(app, database_url=db)
    assert await status(async_session, later.id) == "succeeded"
    assert await status(async_session, waiting.id) == "succeeded"
    result = (
        await async_session.execute(text(f"SELECT result FROM acta.job WHERE id = {waiting.id}"))
    ).scalar()
    assert result["resumed"] == "timeout"


# ---------------------------------------------------------------------- inline mode


async def test_inline_runs_enqueued_jobs_at_commit(
    db: str, async_session: AsyncSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACTA_DATABASE_URL", db)
    job = step.job(n=1)
    with inline(app):
        await app.enqueue(async_session, job)
        await async_session.commit()
        assert await status(async_session, job.id) == "succeeded"
    other = step.job(n=2)
    await app.enqueue(async_session, other)
    await async_session.commit()
    assert await status(async_session, other.id) == "ready"  # off again


def test_inline_with_a_sync_session(
    db: str, sync_session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACTA_DATABASE_URL", db)
    with inline(app):
        app.enqueue_many_sync(sync_session, [step.job(n=1), step.job(n=2)])
        sync_session.commit()
    statuses = sync_session.scalars(select(Job.status)).all()
    assert statuses == ["succeeded", "succeeded"]


async def test_inline_is_refused_where_a_worker_runs(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(seam, "worker_process", True)
    with pytest.raises(ConfigurationError, match="runs an acta worker"), inline(app):
        pass


@pytest.mark.parametrize(("point", "second_attempt"), [("after_claim", 1), ("in_handler", 2)])
async def test_a_loss_is_charged_once_the_start_is_known(
    db: str, async_session: AsyncSession, point: str, second_attempt: int
) -> None:
    job = step.job(n=1)
    async_session.add(job)
    await async_session.commit()
    with faults.crash_at(point):
        await drain(app, database_url=db)
    await faults.expire_lease(async_session, job.id)
    await drain(app, database_url=db)
    assert ran == [(job.id, second_attempt)]


@app.job(max_attempts=1)
async def tries_inline(ctx: Context) -> None:
    with inline(app):
        pass


async def test_inline_is_refused_inside_a_worker(db: str, async_session: AsyncSession) -> None:
    job = tries_inline.job()
    async_session.add(job)
    await async_session.commit()
    await drain(app, database_url=db)
    (failed,) = await history(async_session, job.id)
    assert failed.error_type == "acta_sqla.errors.ConfigurationError"
    assert "runs an acta worker" in (failed.error_message or "")


async def test_the_worker_command_marks_its_process(
    db: str, async_session: AsyncSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``acta worker`` (run_worker, here in burst mode) marks the process while it runs:
    inline refuses then; the mark is set back when the command returns (a command run
    in-process, as a test does, leaves nothing behind)."""
    from acta_sqla.cli.worker import run_worker

    monkeypatch.setattr(seam, "worker_process", False)
    monkeypatch.setenv("ACTA_DATABASE_URL", db)
    job = await app.enqueue(async_session, sees_the_mark.job())
    await async_session.commit()
    await run_worker(app, burst=True)
    await async_session.refresh(job)
    assert job.result is True  # the handler ran while the process was marked
    assert seam.worker_process is False


async def test_a_crash_kills_a_running_worker_too(db: str, async_session: AsyncSession) -> None:
    """The acta_worker fixture's worker (running_worker): killed where it stands, and
    leaving the block after its death stops nothing more and writes nothing."""
    with faults.crash_at("in_handler") as crash:
        async with running_worker(app, database_url=db) as worker:
            job = step.job(n=1)
            async_session.add(job)
            await async_session.commit()
            await until(lambda: crash.happened, timeout=30, what="the crash")
            await until(lambda: worker.stopped.is_set(), timeout=30, what="the worker's death")
    assert worker.killed and crash.job_ids == [job.id]
    assert await status(async_session, job.id) == "executing"
    stopped = await async_session.execute(
        text(f"SELECT status, stopped_at FROM acta.worker WHERE id = {crash.worker_id}")
    )
    assert tuple(stopped.one()) == ("running", None)
