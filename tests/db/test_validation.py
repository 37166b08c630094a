"""What the worker cannot load never reaches the table, through a real session on every
path: ``session.add(Job(...))``, ``acta.enqueue`` / ``enqueue_sync`` of ``handler.job()``,
and ``acta.enqueue_many`` of ``Job`` lists or ``handler.jobs()``. Each refusal is an
``InvalidJobArgs`` (not a driver error at commit) and nothing is written; and the deepest
and longest args accepted are stored by PostgreSQL and loaded back by the worker's loader
from PostgreSQL's own text.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from acta_sqla import Acta, Context, InvalidJob, InvalidJobArgs, Job
from acta_sqla.settings import MAX_ARGS_DEPTH, MAX_ARGS_INT_DIGITS

acta = Acta()


@acta.job
async def keep(ctx: Context, x: Any = None) -> None: ...


def nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


BAD = {
    "nan": math.nan,
    "infinity": -math.inf,
    "lone-surrogate": "\ud800",
    "surrogate-key": {"\udc00": 1},
    "nul": "a\x00b",
    "10**5000": 10**5000,
    "depth-201": nested(MAX_ARGS_DEPTH),
    "depth-10001": nested(10_000),
}


async def _count(engine: AsyncEngine) -> int:
    async with AsyncSession(engine) as other:
        return int((await other.scalar(select(func.count()).select_from(Job))) or 0)


def _async_paths(session: AsyncSession, value: Any) -> list[Callable[[], Any]]:
    good = {"x": 1}
    return [
        lambda: session.add(Job(kind="keep", args={"x": value})),
        lambda: acta.enqueue(session, keep.job(x=value)),
        lambda: acta.enqueue_many(
            session, [Job(kind="keep", args=good), Job(kind="keep", args={"x": value})]
        ),
        lambda: acta.enqueue_many(session, keep.jobs([good, {"x": value}])),
    ]


@pytest.mark.parametrize("case", sorted(BAD))
async def test_args_the_worker_cannot_load_are_refused_on_every_path_and_nothing_is_written(
    async_session: AsyncSession, async_engine: AsyncEngine, case: str
) -> None:
    async_session.add(keep.job(x="first"))  # a good job in the same transaction survives
    messages = set()
    for path in _async_paths(async_session, BAD[case]):
        with pytest.raises(InvalidJobArgs) as caught:
            result = path()
            if hasattr(result, "__await__"):
                await result
        messages.add(str(caught.value).replace("job 1: ", ""))
    assert len(messages) == 1, messages  # one message, whichever the path
    await async_session.commit()
    async with AsyncSession(async_engine) as other:
        stored = (await other.scalars(select(Job.args))).all()
    assert stored == [{"x": "first"}]


def test_the_sync_session_refuses_them_too(sync_session: Session, sync_engine: Engine) -> None:
    for value in BAD.values():
        with pytest.raises(InvalidJobArgs):
            acta.enqueue_sync(sync_session, keep.job(x=value))
        with pytest.raises(InvalidJobArgs):
            acta.enqueue_many_sync(sync_session, keep.jobs([{"x": value}]))
    sync_session.commit()
    with Session(sync_engine) as other:
        assert other.scalar(select(func.count()).select_from(Job)) == 0


async def test_bad_options_are_refused_before_the_database(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    for options in ({"priority": 99999}, {"max_attempts": 0}, {"delay": math.nan}):
        with pytest.raises(InvalidJob):
            await acta.enqueue_many(async_session, keep.jobs([{"x": 1}], **options))
        with pytest.raises(InvalidJob):
            await acta.enqueue(async_session, keep.job(x=1, **options))
    await async_session.commit()
    assert await _count(async_engine) == 0


async def test_the_limits_are_stored_and_load_back_from_postgresql_text(
    async_session: AsyncSession, async_engine: AsyncEngine
) -> None:
    deepest = nested(MAX_ARGS_DEPTH - 1)  # with the args object: MAX_ARGS_DEPTH levels
    longest = -(10**MAX_ARGS_INT_DIGITS - 1)
    async_session.add(keep.job(x=deepest))
    async_session.add(Job(kind="keep", args={"x": longest}))
    await acta.enqueue_many(async_session, keep.jobs([{"x": deepest}, {"x": longest}]))
    await async_session.commit()
    async with AsyncSession(async_engine) as other:
        # The worker reads args as PostgreSQL prints them (``args::text``).
        texts = (await other.scalars(text("SELECT args::text FROM acta.job ORDER BY id"))).all()
    loaded = [keep.load_args(t)["x"] for t in texts]
    assert loaded == [deepest, longest, deepest, longest]
