"""The ``Job`` model shows what the database stored, costs no implicit IO, and puts a
hand-built job in one namespace whatever path enqueues it.

* A lane's second job is made ``waiting`` by the lane trigger on insert: ``job.status``
  read ``ready`` after the flush (the ORM sent its own default and never read it back).
* Setting ``priority``/``args``/keys on an expired ``Job`` loaded ``kind`` (to name it in
  a possible error): an implicit SELECT, ``MissingGreenlet`` under an ``AsyncSession``.
* ``Job(kind=...)`` without ``namespace=`` landed in ``default`` through ``session.add``
  but in the app's namespace through ``acta.enqueue``.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from acta_sqla import Acta, Context, InvalidJob, Job, JobStatus

acta = Acta(namespace="default")
billing = Acta(namespace="billing")


@acta.job(lane="{line}")
async def laned(ctx: Context, line: str, n: int = 0) -> None: ...


@billing.job
async def invoice(ctx: Context, n: int = 0) -> None: ...


# ----------------------------------------------------------------- status read back


async def test_a_lane_jobs_status_after_flush_is_the_stored_one_async(
    async_session: AsyncSession,
) -> None:
    first, second = laned.job(line="L", n=1), laned.job(line="L", n=2)
    async_session.add_all([first, second])
    await async_session.flush()
    assert (first.status, second.status) == (JobStatus.READY, JobStatus.WAITING)
    third = await acta.enqueue(async_session, laned.job(line="L", n=3))
    hand_built = Job(kind="laned", args={"line": "L"}, lane_key="L")
    async_session.add(hand_built)
    await async_session.flush()
    assert (third.status, hand_built.status) == (JobStatus.WAITING, JobStatus.WAITING)
    await async_session.commit()
    stored = dict((await async_session.execute(select(Job.id, Job.status))).all())
    assert stored == {
        first.id: JobStatus.READY,
        second.id: JobStatus.WAITING,
        third.id: JobStatus.WAITING,
        hand_built.id: JobStatus.WAITING,
    }


def test_a_lane_jobs_status_after_flush_is_the_stored_one_sync(sync_session: Session) -> None:
    first, second = laned.job(line="M"), laned.job(line="M")
    sync_session.add(first)
    sync_session.flush()
    sync_session.add(second)
    sync_session.flush()
    assert (first.status, second.status) == (JobStatus.READY, JobStatus.WAITING)
    unique = acta.enqueue_sync(sync_session, laned.job(line="M", unique_key="u"))
    assert unique.status is JobStatus.WAITING
    sync_session.commit()


async def test_enqueue_many_lane_jobs_read_back_as_stored(async_session: AsyncSession) -> None:
    results = await acta.enqueue_many(
        async_session, [laned.job(line="N", n=1), laned.job(line="N", n=2)]
    )
    batch = await acta.enqueue_many(async_session, laned.jobs([{"line": "N", "n": 3}]))
    ids = [r.id for r in [*results, *batch]]
    jobs = [await async_session.get(Job, i) for i in ids]
    assert [j.status for j in jobs if j is not None] == [
        JobStatus.READY,
        JobStatus.WAITING,
        JobStatus.WAITING,
    ]


# ----------------------------------------------------------------- no implicit IO


async def test_setting_fields_on_an_expired_job_does_no_io(async_engine: AsyncEngine) -> None:
    async with AsyncSession(async_engine, expire_on_commit=True) as session:
        job = laned.job(line="E")
        session.add(job)
        await session.commit()  # every attribute expired
        # Each of these used to read job.kind (a lazy load: MissingGreenlet here).
        job.priority = 5
        job.args = {"line": "E", "n": 9}
        job.concurrency_key = "c"
        job.rate_key = "r"
        job.unique_key = "u"
        job.max_attempts = 3
        with pytest.raises(InvalidJob, match=r"^job: priority=99999 must be an int"):
            job.priority = 99999  # still checked; named "job", the kind not loaded
        await session.commit()
        stored = (
            await session.execute(
                select(Job.priority, Job.args, Job.concurrency_key, Job.unique_key)
            )
        ).one()
    assert tuple(stored) == (5, {"line": "E", "n": 9}, "c", "u")


# ----------------------------------------------------------------- one namespace rule


async def test_a_hand_built_job_without_namespace_is_in_default_on_every_path(
    async_session: AsyncSession,
) -> None:
    added = Job(kind="laned", args={"line": "a"})
    assert added.namespace == "default"  # decided when built, readable at once
    async_session.add(added)
    enqueued = await acta.enqueue(async_session, Job(kind="laned", args={"line": "b"}))
    many = await acta.enqueue_many(async_session, [Job(kind="laned", args={"line": "c"})])
    await async_session.flush()
    namespaces = {j.namespace for j in (await async_session.scalars(select(Job))).all()}
    assert namespaces == {"default"} and enqueued.namespace == "default" and many[0].inserted


async def test_an_app_refuses_a_hand_built_job_of_another_namespace(
    async_session: AsyncSession,
) -> None:
    # billing's own kind, built by hand without namespace=: it is in 'default', which no
    # billing worker serves; billing's enqueue says so instead of moving it silently.
    with pytest.raises(InvalidJob, match=r"namespace 'default'.*this Acta is for 'billing'"):
        await billing.enqueue(async_session, Job(kind="invoice"))
    with pytest.raises(InvalidJob, match=r"namespace 'default'.*this Acta is for 'billing'"):
        await billing.enqueue_many(async_session, [Job(kind="invoice")])
    # Built for billing (by its handler, or namespace=), it goes in.
    ok = await billing.enqueue(async_session, Job(kind="invoice", namespace="billing"))
    by_handler = await billing.enqueue(async_session, invoice.job(n=1))
    assert ok.namespace == by_handler.namespace == "billing"
