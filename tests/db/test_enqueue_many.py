"""``acta.enqueue_many``: one INSERT for the batch, results in input order, unique keys
resolved to their holders (an existing job, or an earlier row of the same batch)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from acta_sqla import Acta, Context, EnqueueResult, Job, JobStatus

acta = Acta(namespace="default")


@acta.job
async def notify(ctx: Context, user_id: int) -> None:
    return None


@pytest.fixture
def statements(async_engine: AsyncEngine) -> Iterator[list[str]]:
    """Every SQL statement sent through ``async_engine`` while the test runs."""
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    event.listen(async_engine.sync_engine, "before_cursor_execute", record)
    yield sent
    event.remove(async_engine.sync_engine, "before_cursor_execute", record)


async def _jobs(engine: AsyncEngine) -> list[Job]:
    async with AsyncSession(engine) as other:
        return list((await other.scalars(select(Job).order_by(Job.id))).all())


async def test_a_batch_is_one_statement_in_input_order(
    async_session: AsyncSession, async_engine: AsyncEngine, statements: list[str]
) -> None:
    jobs = [notify.job(user_id=i) for i in range(2000)]

    results = await acta.enqueue_many(async_session, jobs)

    assert len(statements) == 1
    assert statements[0].lstrip().upper().startswith("INSERT")
    await async_session.commit()
    stored = await _jobs(async_engine)
    assert [j.args["user_id"] for j in stored] == list(range(2000))
    assert [r.id for r in results] == [j.id for j in stored]
    assert all(r.inserted for r in results)


async def test_empty_batch_sends_nothing(
    async_session: AsyncSession, statements: list[str]
) -> None:
    assert await acta.enqueue_many(async_session, []) == []
    assert statements == []


async def test_batch_is_rolled_back_with_the_transaction(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    await acta.enqueue_many(async_session, [notify.job(user_id=i) for i in range(10)])
    await async_session.rollback()
    assert await _jobs(async_engine) == []


async def test_options_survive_the_bulk_insert(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    when = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    await acta.enqueue_many(
        async_session,
        [
            notify.job(user_id=1, priority=-3, max_attempts=4, run_at=when),
            notify.job(user_id=2, delay=90),
            Job(kind="notify", args={"user_id": 3}, lane_key="lane", concurrency_key="c"),
        ],
    )
    await async_session.commit()

    first, second, third = await _jobs(async_engine)
    assert (first.priority, first.max_attempts, first.run_at) == (-3, 4, when)
    # Due time on the database clock: exactly the delay after the transaction's now().
    assert second.run_at - second.created_at == timedelta(seconds=90)
    assert (third.lane_key, third.concurrency_key) == ("lane", "c")
    assert {j.status for j in (first, second, third)} == {JobStatus.READY}


async def test_text_and_args_arrive_exactly_as_given(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    """The batch travels as JSON text: quotes, backslashes, non-ASCII and JSON-looking
    strings in keys and args arrive as given, never re-read as JSON."""
    odd = 'say "hi" \\ żółw ✓ 🐢 [1, {"a": null}] \\u0041'
    args = {"nested": {"list": [odd, 1.5, None, True], "empty": {}}, "n": 2**53 + 1}
    await acta.enqueue_many(
        async_session,
        [
            Job(kind="notify", args=args, concurrency_key=odd, rate_key="null", unique_key=odd),
            Job(kind="notify", args={}, lane_key="[]", trace_context='{"x": 1}'),
        ],
    )
    await async_session.commit()

    first, second = await _jobs(async_engine)
    assert first.args == args
    assert (first.concurrency_key, first.rate_key, first.unique_key) == (odd, "null", odd)
    assert (second.args, second.lane_key, second.trace_context) == ({}, "[]", '{"x": 1}')


async def test_unique_keys_in_a_batch(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    holder = Job(kind="notify", args={"user_id": 0}, unique_key="held")
    async_session.add(holder)
    await async_session.commit()

    results = await acta.enqueue_many(
        async_session,
        [
            notify.job(user_id=1, unique_key="a"),
            notify.job(user_id=2),
            notify.job(user_id=3, unique_key="held"),  # held by an existing job
            notify.job(user_id=4, unique_key="a"),  # repeated inside the batch
            notify.job(user_id=5, unique_key="b"),
            notify.job(user_id=6, unique_key="held"),
        ],
    )
    await async_session.commit()

    stored = {j.id: j for j in await _jobs(async_engine)}
    by_user = {j.args["user_id"]: j.id for j in stored.values()}
    assert set(by_user) == {0, 1, 2, 5}
    assert results == [
        EnqueueResult(by_user[1], True),
        EnqueueResult(by_user[2], True),
        EnqueueResult(holder.id, False),
        EnqueueResult(by_user[1], False),
        EnqueueResult(by_user[5], True),
        EnqueueResult(holder.id, False),
    ]


async def test_a_key_is_free_again_once_its_holder_is_terminal(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    [first] = await acta.enqueue_many(async_session, [notify.job(user_id=1, unique_key="k")])
    await async_session.commit()
    [blocked] = await acta.enqueue_many(async_session, [notify.job(user_id=2, unique_key="k")])
    assert blocked == EnqueueResult(first.id, False)

    await async_session.execute(
        update(Job).where(Job.id == first.id).values(status=JobStatus.CANCELLED)
    )
    [second] = await acta.enqueue_many(async_session, [notify.job(user_id=3, unique_key="k")])
    await async_session.commit()

    assert second.inserted and second.id != first.id
    assert [(j.args["user_id"], j.status) for j in await _jobs(async_engine)] == [
        (1, JobStatus.CANCELLED),
        (3, JobStatus.READY),
    ]


def test_enqueue_many_sync(sync_session: Session) -> None:
    results = acta.enqueue_many_sync(
        sync_session,
        [notify.job(user_id=1, unique_key="x"), notify.job(user_id=2, unique_key="x")],
    )
    sync_session.commit()

    assert results[0].inserted and not results[1].inserted
    assert results[1].id == results[0].id
    assert sync_session.scalars(select(Job.args)).all() == [{"user_id": 1}]


# ---------------------------------------------------------------- handler.jobs(): the batch path


async def test_handler_jobs_batch_inserts_validated_args_in_order(async_session) -> None:  # type: ignore[no-untyped-def]
    from acta_sqla import Acta

    app = Acta()

    @app.job(priority=3)
    async def mail(ctx: Context, user_id: int, template: str = "basic") -> None: ...

    batch = mail.jobs([{"user_id": "7"}, {"user_id": 8, "template": "vip"}], delay=60)
    assert len(batch) == 2
    results = await app.enqueue_many(async_session, batch)
    await async_session.commit()
    assert [r.inserted for r in results] == [True, True]
    rows = (
        await async_session.execute(
            text(
                "SELECT id, args, priority, run_at > now() + interval '50 seconds' "
                "FROM acta.job ORDER BY id"
            )
        )
    ).all()
    assert [r[0] for r in rows] == [r.id for r in results]
    assert [r[1] for r in rows] == [{"user_id": 7}, {"user_id": 8, "template": "vip"}]
    assert {r[2] for r in rows} == {3} and all(r[3] for r in rows)


async def test_handler_jobs_names_the_bad_job_and_field() -> None:
    from acta_sqla import Acta, InvalidJob, InvalidJobArgs

    app = Acta()

    @app.job
    async def mail(ctx: Context, user_id: int) -> None: ...

    with pytest.raises(InvalidJobArgs, match=r"job 1: argument 'user_id'='x'"):
        mail.jobs([{"user_id": 1}, {"user_id": "x"}])
    with pytest.raises(InvalidJob, match="unique_key"):
        mail.jobs([{"user_id": 1}], unique_key="k")


async def test_handler_jobs_render_unique_keys_per_job(async_session) -> None:  # type: ignore[no-untyped-def]
    from acta_sqla import Acta

    app = Acta()

    @app.job(unique_key="sync:{account}")
    async def sync(ctx: Context, account: int) -> None: ...

    first = await app.enqueue_many(async_session, sync.jobs([{"account": 1}, {"account": 2}]))
    again = await app.enqueue_many(async_session, sync.jobs([{"account": 2}, {"account": 3}]))
    await async_session.commit()
    assert [r.inserted for r in first] == [True, True]
    assert again[0].id == first[1].id and not again[0].inserted
    assert again[1].inserted
