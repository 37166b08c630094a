"""Transactional enqueue: a job exists if and only if the session's transaction commits.

Covered for both session kinds (AsyncSession on asyncpg, Session on psycopg 3), through
``handler.job(...)`` and through ``Job(kind=..., args=...)`` directly, plus unique keys
(``acta.enqueue`` returns the holder, a plain ``session.add`` raises ``DuplicateJob``) and
the refusals that happen before anything reaches the database.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from acta_sqla import (
    Acta,
    Context,
    DuplicateJob,
    InvalidJobArgs,
    Job,
    JobStatus,
    PayloadTooLarge,
    UniqueKeyHeld,
    UnknownJobKind,
)
from acta_sqla.settings import MAX_ARGS_BYTES

acta = Acta(namespace="default")


@acta.job(max_attempts=5, priority=3)
async def send_welcome(ctx: Context, user_id: int, template: str = "basic") -> dict[str, Any]:
    return {"sent": True}


@acta.job
def resize(ctx: Context, image: str, width: int) -> None:
    return None


async def _jobs(engine: AsyncEngine) -> list[Job]:
    """Jobs as another connection sees them (committed rows only)."""
    async with AsyncSession(engine) as other:
        return list((await other.scalars(select(Job).order_by(Job.id))).all())


def _sync_jobs(engine: Engine) -> list[Job]:
    with Session(engine) as other:
        return list(other.scalars(select(Job).order_by(Job.id)).all())


# ----------------------------------------------------------------------- AsyncSession


async def test_a_flushed_job_knows_its_database_times_from_the_insert_itself(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    """``run_at`` and ``created_at`` come from the database's clock through the INSERT's
    RETURNING (the columns have server defaults only, so the ORM caches one INSERT instead
    of building one per job): readable right after the flush, with no further query, and
    the same as what the row holds; unset key columns are stored as NULL."""
    job = send_welcome.job(user_id=7)
    async_session.add(job)
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    sync_engine = async_engine.sync_engine
    event.listen(sync_engine, "before_cursor_execute", seen)
    try:
        await async_session.flush()
        due, created = job.run_at, job.created_at  # no lazy load: AsyncSession would raise
    finally:
        event.remove(sync_engine, "before_cursor_execute", seen)
    [insert] = statements
    assert "RETURNING" in insert and "run_at" in insert.split("RETURNING")[1]
    assert "created_at" not in insert.split("RETURNING")[0]
    db_now = await async_session.scalar(text("SELECT now()"))  # the same transaction
    assert due == created == db_now
    await async_session.commit()
    [stored] = await _jobs(async_engine)
    assert (stored.run_at, stored.created_at) == (due, created)
    assert (stored.unique_key, stored.lane_key, stored.concurrency_key) == (None, None, None)


async def test_async_add_is_visible_only_after_commit(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    job = send_welcome.job(user_id=42)
    async_session.add(job)
    await async_session.flush()
    assert await _jobs(async_engine) == []  # flushed, not committed: invisible to others

    await async_session.commit()

    [stored] = await _jobs(async_engine)
    assert stored.id == job.id
    assert stored.kind == "send_welcome"
    assert stored.args == {"user_id": 42}
    assert stored.namespace == "default"
    assert stored.status is JobStatus.READY
    assert stored.priority == 3
    assert stored.attempts == 0
    assert stored.execution_id is None


async def test_async_rollback_leaves_nothing(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    async_session.add(send_welcome.job(user_id=1))
    async_session.add(Job(kind="send_welcome", args={"user_id": 2}))
    await async_session.flush()

    await async_session.rollback()

    assert await _jobs(async_engine) == []


async def test_async_job_commits_with_the_applications_own_rows(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    await async_session.execute(text("CREATE TEMP TABLE app_row (id int)"))
    await async_session.execute(text("INSERT INTO app_row VALUES (1)"))
    async_session.add(send_welcome.job(user_id=1))
    await async_session.rollback()
    assert await _jobs(async_engine) == []

    async_session.add(send_welcome.job(user_id=2))
    await async_session.commit()
    assert [j.args for j in await _jobs(async_engine)] == [{"user_id": 2}]


async def test_job_model_directly_in_async_session(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    async_session.add(Job(kind="report", args={"month": "2026-11"}, priority=-1, max_attempts=2))
    await async_session.commit()

    [stored] = await _jobs(async_engine)
    assert (stored.kind, stored.args, stored.priority, stored.max_attempts) == (
        "report",
        {"month": "2026-11"},
        -1,
        2,
    )
    assert stored.namespace == "default"


async def test_handler_options_beside_args(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    async_session.add(send_welcome.job(user_id=7, template="fancy", priority=-5, run_at=when))
    async_session.add(send_welcome.job(user_id=8, max_attempts=9))
    await async_session.commit()

    first, second = await _jobs(async_engine)
    assert first.args == {"user_id": 7, "template": "fancy"}
    assert (first.priority, first.run_at) == (-5, when)
    assert second.max_attempts == 9


@pytest.mark.parametrize("delay", [60, 2.5, timedelta(minutes=5)])
async def test_delay_is_counted_on_the_database_clock(
    async_session: AsyncSession, async_engine: AsyncEngine, delay: float | timedelta
) -> None:
    async_session.add(send_welcome.job(user_id=1, delay=delay))
    await async_session.commit()

    [stored] = await _jobs(async_engine)
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
    # created_at and run_at both come from the same transaction's now(): the difference is
    # exactly the delay, whatever this process's clock says.
    assert stored.run_at - stored.created_at == timedelta(seconds=seconds)


# ----------------------------------------------------------------------- sync Session


def test_sync_add_is_visible_only_after_commit(sync_session: Session, sync_engine: Engine) -> None:
    job = send_welcome.job(user_id=42)
    sync_session.add(job)
    sync_session.flush()
    assert _sync_jobs(sync_engine) == []

    sync_session.commit()

    [stored] = _sync_jobs(sync_engine)
    assert stored.id == job.id
    assert (stored.kind, stored.args, stored.status) == (
        "send_welcome",
        {"user_id": 42},
        JobStatus.READY,
    )


def test_sync_rollback_leaves_nothing(sync_session: Session, sync_engine: Engine) -> None:
    sync_session.add(resize.job(image="a.png", width=100))
    sync_session.add(Job(kind="resize", args={"image": "b.png", "width": 5}))
    sync_session.flush()

    sync_session.rollback()

    assert _sync_jobs(sync_engine) == []


def test_job_model_directly_in_sync_session(sync_session: Session, sync_engine: Engine) -> None:
    sync_session.add(Job(kind="resize", args={"image": "a.png", "width": 100}, delay=30))
    sync_session.commit()

    [stored] = _sync_jobs(sync_engine)
    assert stored.args == {"image": "a.png", "width": 100}
    assert stored.run_at - stored.created_at == timedelta(seconds=30)


async def test_job_added_through_psycopg_is_read_through_asyncpg(
    sync_session: Session, async_engine: AsyncEngine
) -> None:
    sync_session.add(send_welcome.job(user_id=3))
    sync_session.commit()
    assert [j.args for j in await _jobs(async_engine)] == [{"user_id": 3}]


# ----------------------------------------------------------------------- unique keys


async def test_enqueue_returns_the_job_holding_the_key(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    first = await acta.enqueue(async_session, send_welcome.job(user_id=1, unique_key="welcome:1"))
    await async_session.commit()

    again = await acta.enqueue(async_session, send_welcome.job(user_id=99, unique_key="welcome:1"))
    await async_session.commit()

    assert again.id == first.id
    assert again.args == {"user_id": 1}
    assert [j.id for j in await _jobs(async_engine)] == [first.id]


async def test_enqueue_inserts_again_once_the_holder_is_terminal(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    first = await acta.enqueue(async_session, send_welcome.job(user_id=1, unique_key="k"))
    await async_session.commit()
    await async_session.execute(
        update(Job).where(Job.id == first.id).values(status=JobStatus.SUCCEEDED)
    )
    await async_session.commit()

    second = await acta.enqueue(async_session, send_welcome.job(user_id=2, unique_key="k"))
    await async_session.commit()

    assert second.id != first.id
    assert [(j.id, j.status) for j in await _jobs(async_engine)] == [
        (first.id, JobStatus.SUCCEEDED),
        (second.id, JobStatus.READY),
    ]


async def test_retrying_a_finished_job_whose_key_is_held_says_which_job_holds_it(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    first = await acta.enqueue(async_session, send_welcome.job(user_id=1, unique_key="k"))
    await async_session.commit()
    await async_session.execute(
        update(Job).where(Job.id == first.id).values(status=JobStatus.FAILED)
    )
    await async_session.commit()
    second = await acta.enqueue(async_session, send_welcome.job(user_id=2, unique_key="k"))
    await async_session.commit()
    with pytest.raises(
        UniqueKeyHeld, match=rf"job {first.id} cannot be retried: job {second.id} holds"
    ):
        await acta.retry(async_session, first.id)
    # Nothing changed, and the transaction is still usable.
    assert await acta.retry(async_session, second.id) is False  # not finished
    await async_session.commit()
    assert [(j.id, j.status) for j in await _jobs(async_engine)] == [
        (first.id, JobStatus.FAILED),
        (second.id, JobStatus.READY),
    ]
    # Once the holder has finished, the retry goes through.
    await async_session.execute(
        update(Job).where(Job.id == second.id).values(status=JobStatus.SUCCEEDED)
    )
    assert await acta.retry(async_session, first.id) is True
    await async_session.commit()


async def test_enqueue_without_a_unique_key_is_a_plain_add(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    a = await acta.enqueue(async_session, send_welcome.job(user_id=1))
    b = await acta.enqueue(async_session, send_welcome.job(user_id=1))
    await async_session.commit()
    assert a.id != b.id
    assert len(await _jobs(async_engine)) == 2


async def test_enqueue_is_rolled_back_with_the_transaction(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    await acta.enqueue(async_session, send_welcome.job(user_id=1, unique_key="k"))
    await async_session.rollback()
    assert await _jobs(async_engine) == []


def test_enqueue_sync_returns_the_job_holding_the_key(
    sync_session: Session, sync_engine: Engine
) -> None:
    first = acta.enqueue_sync(sync_session, resize.job(image="a", width=1, unique_key="img:a"))
    sync_session.commit()
    first_id = first.id

    again = acta.enqueue_sync(sync_session, resize.job(image="a", width=2, unique_key="img:a"))
    sync_session.commit()

    assert again.id == first_id
    assert [j.id for j in _sync_jobs(sync_engine)] == [first_id]


async def test_async_session_add_of_a_duplicate_raises_duplicate_job(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    async_session.add(send_welcome.job(user_id=1, unique_key="welcome:1"))
    await async_session.commit()

    async_session.add(send_welcome.job(user_id=1, unique_key="welcome:1"))
    with pytest.raises(DuplicateJob) as caught:
        await async_session.commit()
    await async_session.rollback()

    assert not isinstance(caught.value, IntegrityError)
    assert caught.value.unique_key == "welcome:1"
    assert caught.value.namespace == "default"
    assert "unique_key='welcome:1'" in str(caught.value)
    assert "acta.enqueue" in str(caught.value)
    assert len(await _jobs(async_engine)) == 1


def test_sync_session_add_of_a_duplicate_raises_duplicate_job(
    sync_session: Session, sync_engine: Engine
) -> None:
    sync_session.add(resize.job(image="a", width=1, unique_key="img:a"))
    sync_session.commit()

    sync_session.add(Job(kind="resize", args={"image": "a", "width": 1}, unique_key="img:a"))
    with pytest.raises(DuplicateJob) as caught:
        sync_session.commit()
    sync_session.rollback()

    assert not isinstance(caught.value, IntegrityError)
    assert caught.value.unique_key == "img:a"
    assert "unique_key='img:a'" in str(caught.value)
    assert len(_sync_jobs(sync_engine)) == 1


async def test_duplicate_inside_one_flush_raises_duplicate_job(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    async_session.add(send_welcome.job(user_id=1, unique_key="same"))
    async_session.add(send_welcome.job(user_id=2, unique_key="same"))
    with pytest.raises(DuplicateJob, match="'same'"):
        await async_session.commit()
    await async_session.rollback()
    assert await _jobs(async_engine) == []


def test_session_add_of_a_freed_key_succeeds(sync_session: Session, sync_engine: Engine) -> None:
    holder = Job(kind="resize", args={}, unique_key="k")
    sync_session.add(holder)
    sync_session.commit()
    sync_session.execute(update(Job).where(Job.id == holder.id).values(status=JobStatus.FAILED))
    sync_session.commit()

    sync_session.add(Job(kind="resize", args={}, unique_key="k"))
    sync_session.commit()

    assert [j.status for j in _sync_jobs(sync_engine)] == [JobStatus.FAILED, JobStatus.READY]


async def test_same_key_in_two_namespaces_is_no_conflict(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    async_session.add(Job(kind="x", args={}, unique_key="k", namespace="one"))
    async_session.add(Job(kind="x", args={}, unique_key="k", namespace="two"))
    await async_session.commit()
    assert len(await _jobs(async_engine)) == 2


# ----------------------------------------------------------------------- refusals


async def test_unknown_kind_is_refused_by_enqueue(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    with pytest.raises(UnknownJobKind, match="'no_such_kind'") as caught:
        await acta.enqueue(async_session, Job(kind="no_such_kind", args={}))
    assert "send_welcome" in str(caught.value)  # names the kinds it does know

    with pytest.raises(UnknownJobKind):
        await acta.enqueue_many(
            async_session, [send_welcome.job(user_id=1), Job(kind="no_such_kind")]
        )
    await async_session.commit()
    assert await _jobs(async_engine) == []


async def test_allow_unknown_kinds_takes_other_services_kinds(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    producer = Acta(namespace="default", allow_unknown_kinds=True)
    await producer.enqueue(async_session, Job(kind="theirs", args={"a": 1}))
    await async_session.commit()
    assert [j.kind for j in await _jobs(async_engine)] == ["theirs"]


@pytest.mark.parametrize(
    "args",
    [
        {"when": datetime(2026, 1, 1, tzinfo=UTC)},
        {"blob": b"bytes"},
        {"ids": {1, 2}},
        {"ratio": float("nan")},
    ],
    ids=["datetime", "bytes", "set", "nan"],
)
async def test_unserializable_args_are_refused_before_the_database(
    async_session: AsyncSession, async_engine: AsyncEngine, args: dict[str, Any]
) -> None:
    with pytest.raises(InvalidJobArgs, match="JSON-serializable"):
        async_session.add(Job(kind="send_welcome", args=args))
    await async_session.commit()
    assert await _jobs(async_engine) == []


async def test_oversized_args_are_refused(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    with pytest.raises(PayloadTooLarge, match="limit is") as caught:
        resize.job(image="x" * (MAX_ARGS_BYTES + 1), width=1)
    assert f"{MAX_ARGS_BYTES:,}" in str(caught.value)
    await async_session.commit()
    assert await _jobs(async_engine) == []


def test_args_reassigned_to_garbage_are_refused(sync_session: Session) -> None:
    job = Job(kind="resize", args={"image": "a", "width": 1})
    with pytest.raises(InvalidJobArgs):
        job.args = {"image": object()}
    sync_session.add(job)
    sync_session.commit()
    assert job.args == {"image": "a", "width": 1}
