"""Issue 28, items 2 and 11, against real PostgreSQL: a key or name of exactly
``MAX_KEY_BYTES`` bytes works end to end in every table it reaches, in the longest
namespace, and one byte more is refused before the database with nothing written.

The keys are random 4-byte characters (512 of them): PostgreSQL compresses a repetitive
key before indexing it, so a key of one repeated letter would prove nothing about the
bound. And only a unique violation (SQLSTATE 23505) of the unique-key index is a
``DuplicateJob``: an entry too large for that index (54000) named the same index and was
reported as a duplicate of key ``'?'`` in namespace ``'?'``."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy import insert, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from acta_sqla import Acta, Context, DuplicateJob, InvalidJob, Job
from acta_sqla.errors import ConfigurationError, InvalidSignal
from acta_sqla.policy import MAX_KEY_BYTES
from acta_sqla.settings import Timings
from acta_sqla.store import WorkerStore
from acta_sqla.values import ClaimedJob
from acta_sqla.worker import completions
from acta_sqla.worker.admission import request
from acta_sqla.worker.fires import ensure_fires

NS = "n" * 58
"""The longest namespace ("acta." + 58 bytes: the longest NOTIFY channel)."""

_rng = random.Random(28)


def longest() -> str:
    """A fresh incompressible key of exactly MAX_KEY_BYTES bytes in UTF-8."""
    key = "".join(chr(_rng.randrange(0x10000, 0x30000)) for _ in range(MAX_KEY_BYTES // 4))
    assert len(key.encode()) == MAX_KEY_BYTES
    return key


def one_more(key: str) -> str:
    return key + "x"


KIND = longest()

acta = Acta(namespace=NS)


@acta.job(
    kind=KIND,
    unique_key="{u}",
    lane="{ln}",
    concurrency_key="{c}",
    concurrency_limit=2,
    rate="1000/s",
    rate_key="{r}",
)
async def keyed(ctx: Context, u: str, ln: str, c: str, r: str) -> None: ...


@acta.job
async def tick(ctx: Context) -> None: ...


def job_of(**given: str) -> Job:
    keys = {"u": longest(), "ln": longest(), "c": longest(), "r": longest()}
    return keyed.job(**{**keys, **given})


@pytest.fixture
async def store(db: str) -> AsyncIterator[WorkerStore]:
    s = WorkerStore(db, "acta", NS, Timings.from_heartbeat(45.0))
    await s.register_worker("test-host", 1, 8, [KIND, "tick"], "test")
    try:
        yield s
    finally:
        await s.close()


async def count(session: AsyncSession) -> int:
    return len((await session.scalars(select(Job.id))).all())


async def test_a_job_of_the_longest_kind_and_keys_is_enqueued_on_every_path(
    async_session: AsyncSession,
) -> None:
    # job_unique_key_idx, job_lane_idx, job_key_idx, job_prune_idx (later), the NOTIFY
    # channel of the longest namespace; handler.job(), acta.enqueue, Job(...) and
    # handler.jobs() through enqueue_many.
    async_session.add(job_of())
    await acta.enqueue(async_session, job_of())
    async_session.add(Job(kind=KIND, namespace=NS, unique_key=longest(), rate_key=longest()))
    batch = keyed.jobs([{"u": longest(), "ln": longest(), "c": longest(), "r": longest()}])
    assert [r.inserted for r in await acta.enqueue_many(async_session, batch)] == [True]
    await async_session.commit()
    stored = (await async_session.scalars(select(Job).order_by(Job.id))).all()
    assert len(stored) == 4 and {j.kind for j in stored} == {KIND}
    assert all(len(j.unique_key.encode()) == MAX_KEY_BYTES for j in stored if j.unique_key)
    # One byte more, on each path: refused before the database, nothing written.
    for build in (
        lambda: job_of(u=one_more(longest())),
        lambda: job_of(ln=one_more(longest())),
        lambda: job_of(c=one_more(longest())),
        lambda: job_of(r=one_more(longest())),
        lambda: Job(kind=one_more(KIND)),
        lambda: keyed.jobs([{"u": "u", "ln": "l", "c": "c", "r": one_more(longest())}]),
    ):
        with pytest.raises(InvalidJob, match="bytes long in UTF-8"):
            build()
    assert await count(async_session) == 4


async def test_the_longest_unique_key_is_held_and_a_duplicate_names_it(
    async_session: AsyncSession,
) -> None:
    key = longest()
    first = await acta.enqueue(async_session, job_of(u=key))
    await async_session.commit()
    # acta.enqueue finds the holder by the key; a plain add raises DuplicateJob naming it.
    assert (await acta.enqueue(async_session, job_of(u=key))).id == first.id
    async_session.add(job_of(u=key))
    with pytest.raises(DuplicateJob) as caught:
        await async_session.flush()
    assert (caught.value.namespace, caught.value.unique_key) == (NS, key)
    await async_session.rollback()


async def test_an_entry_too_large_for_the_unique_index_is_not_a_duplicate(
    async_session: AsyncSession,
) -> None:
    # Written past acta's checks (a Core insert runs no validator): the database refuses
    # the index entry (54000). Before, that was DuplicateJob(namespace='?', key='?').
    huge = "".join(chr(_rng.randrange(0x10000, 0x30000)) for _ in range(1500))
    with pytest.raises(DBAPIError) as caught:
        await async_session.execute(insert(Job).values(kind="k", unique_key=huge))
    assert not isinstance(caught.value, DuplicateJob)
    assert "job_unique_key_idx" in str(caught.value) and "index row size" in str(caught.value)
    await async_session.rollback()


async def _claimed(store: WorkerStore, n: int = 1) -> list[ClaimedJob]:
    claimed = await store.claim_jobs(n)
    assert len(claimed) == n
    return claimed


async def test_the_longest_concurrency_and_rate_keys_take_a_slot_and_a_meter(
    async_session: AsyncSession, store: WorkerStore, conn: asyncpg.Connection
) -> None:
    # concurrency_slot_pkey (namespace, key, job_id) and rate_meter_pkey (namespace, key).
    c, r = longest(), longest()
    async_session.add(job_of(c=c, r=r))
    await async_session.commit()
    (job,) = await _claimed(store)
    asked = request(job, keyed.policy, 2.0)
    assert asked is not None
    assert await store.admit([list(asked)]) == [(job.id, "admitted", 0.0)]
    assert await conn.fetch("SELECT namespace, key FROM acta.concurrency_slot") == [(NS, c)]
    assert [tuple(row) for row in await conn.fetch("SELECT key FROM acta.rate_meter")] == [(r,)]
    await store.complete_executions([completions.succeeded(job, None, 0.1)])
    assert await conn.fetchval("SELECT status FROM acta.job WHERE id = $1", job.id) == "succeeded"
    assert await conn.fetchval("SELECT count(*) FROM acta.concurrency_slot") == 0


async def test_the_longest_lane_queues_and_hands_on(
    async_session: AsyncSession, store: WorkerStore, conn: asyncpg.Connection
) -> None:
    lane = longest()
    head, second = job_of(ln=lane), job_of(ln=lane)
    async_session.add_all([head, second])
    await async_session.commit()
    statuses = "SELECT status FROM acta.job ORDER BY id"
    assert [s for (s,) in await conn.fetch(statuses)] == ["ready", "waiting"]
    (claimed,) = await _claimed(store)
    await store.complete_executions([completions.succeeded(claimed, None, 0.1)])
    assert [s for (s,) in await conn.fetch(statuses)] == ["succeeded", "ready"]


async def test_the_longest_signal_name_is_sent_awaited_and_seen(
    async_session: AsyncSession, store: WorkerStore, conn: asyncpg.Connection
) -> None:
    name = longest()
    async_session.add(tick.job())
    await async_session.commit()
    (job,) = await _claimed(store)
    assert await acta.signal(async_session, job.id, name, {"ok": 1}) == "executing"
    with pytest.raises(InvalidSignal, match="bytes long in UTF-8"):
        await acta.signal(async_session, job.id, one_more(name), 1)
    await async_session.commit()
    # The wait for a signal already received makes the job ready at once.
    await store.complete_executions([completions.wait_for_signal(job, name, 60.0, 0.1)])
    row = await conn.fetchrow("SELECT status, awaited_signal FROM acta.job WHERE id = $1", job.id)
    assert row["status"] == "ready"
    (again,) = await _claimed(store)
    assert again.signals_json is not None and name in again.signals_json


async def test_the_longest_lock_name_is_taken_and_released(
    async_session: AsyncSession, store: WorkerStore, conn: asyncpg.Connection
) -> None:
    # lock_pkey (namespace, name); one byte more is refused by ctx.lock() before the
    # statement (tests/unit/test_keys.py).
    name = longest()
    async_session.add_all([tick.job(), tick.job()])
    await async_session.commit()
    first, second = await _claimed(store, 2)
    assert await store.take_lock(name, first.id, first.execution_id)
    assert not await store.take_lock(name, second.id, second.execution_id)
    assert await conn.fetchval("SELECT name FROM acta.lock") == name
    await store.release_lock(name, first.id, first.execution_id)
    assert await store.take_lock(name, second.id, second.execution_id)


async def test_the_longest_kind_is_defined_and_set_by_an_operator(
    async_session: AsyncSession, store: WorkerStore, conn: asyncpg.Connection
) -> None:
    # definition_pkey (namespace, kind); acta.set_policy looks it up by the kind.
    await store.store_definitions({KIND: keyed.policy.to_json()})
    assert await acta.set_policy(async_session, KIND, timeout=3) == {"timeout": 3}
    await async_session.commit()
    assert await conn.fetchval("SELECT overrides FROM acta.definition WHERE kind = $1", KIND)
    with pytest.raises(ConfigurationError, match="bytes long in UTF-8"):
        await acta.set_policy(async_session, one_more(KIND), timeout=3)
    with pytest.raises(ConfigurationError, match="contains a NUL character"):
        await acta.set_policy(async_session, "a\x00", timeout=3)


async def test_the_longest_schedule_name_is_stored_and_fired(
    store: WorkerStore, conn: asyncpg.Connection
) -> None:
    # schedule_namespace_name_key and job_schedule_tick_key (namespace, name, tick).
    name = longest()
    app = Acta(namespace=NS)

    @app.job(kind="tick")
    async def ticking(ctx: Context) -> None: ...

    schedule = app.schedule(name, "* * * * *", ticking)
    with pytest.raises(ConfigurationError, match="bytes long in UTF-8"):
        app.schedule(one_more(name), "* * * * *", ticking)
    assert await store.store_schedules([schedule]) == []
    assert [fired for fired, _ in await ensure_fires(store, {name: schedule})] == [name]
    assert await conn.fetchval("SELECT schedule_name FROM acta.job") == name
