"""The read model (acta_sqla.inspect) against a real PostgreSQL: queue depth, workers,
filtered job listings with keyset pagination, and one job's detail with its attempts."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from acta_sqla import inspect
from acta_sqla.models import Execution, Job, Worker
from acta_sqla.queries import inspect as q
from acta_sqla.status import JobStatus, WorkerStatus


async def add_jobs(session: AsyncSession, *specs: tuple[str, str, JobStatus]) -> list[int]:
    jobs = [Job(namespace=ns, kind=kind, status=status) for ns, kind, status in specs]
    session.add_all(jobs)
    await session.commit()
    return [j.id for j in jobs]


async def test_queue_depth_counts_jobs_by_kind_and_status(async_session: AsyncSession) -> None:
    await add_jobs(
        async_session,
        ("a", "mail", JobStatus.READY),
        ("a", "mail", JobStatus.READY),
        ("a", "mail", JobStatus.FAILED),
        ("a", "bill", JobStatus.SUCCEEDED),
        ("b", "mail", JobStatus.READY),  # another namespace: not counted
    )
    depth = await inspect.queue_depth(async_session, "a")
    assert depth == {
        "bill": {JobStatus.SUCCEEDED: 1},
        "mail": {JobStatus.READY: 2, JobStatus.FAILED: 1},
    }
    assert list(depth) == ["bill", "mail"]
    assert await inspect.queue_depth(async_session, "none") == {}


async def test_workers_lists_the_namespace_s_newest_rows(async_session: AsyncSession) -> None:
    for ns, status in (("a", WorkerStatus.STOPPED), ("a", WorkerStatus.RUNNING), ("b", None)):
        async_session.add(
            Worker(
                namespace=ns,
                hostname="h",
                pid=7,
                executors=8,
                status=status or WorkerStatus.RUNNING,
            )
        )
    await async_session.commit()
    rows = await inspect.workers(async_session, "a")
    assert [(w.status, w.hostname, w.pid, w.executors) for w in rows] == [
        (WorkerStatus.RUNNING, "h", 7, 8),
        (WorkerStatus.STOPPED, "h", 7, 8),
    ]
    assert rows[0].id > rows[1].id
    assert rows[0].heartbeat_seconds == 45.0
    assert len(await inspect.workers(async_session, "a", limit=1)) == 1


async def test_list_jobs_filters_and_pages_newest_first(async_session: AsyncSession) -> None:
    ids = await add_jobs(
        async_session,
        *[("a", "mail", JobStatus.READY)] * 5,
        ("a", "bill", JobStatus.READY),
        ("a", "mail", JobStatus.FAILED),
        ("b", "mail", JobStatus.READY),
    )
    mail_ready = ids[:5]
    seen: list[int] = []
    before = None
    pages = 0
    while True:
        page = await inspect.list_jobs(
            async_session,
            namespace="a",
            status=JobStatus.READY,
            kind="mail",
            before_id=before,
            limit=2,
        )
        pages += 1
        seen += [j.id for j in page.jobs]
        assert all((j.namespace, j.kind, j.status) == ("a", "mail", "ready") for j in page.jobs)
        if page.next_before_id is None:
            break
        before = page.next_before_id
    assert seen == sorted(mail_ready, reverse=True)
    assert pages == 3
    everything = await inspect.list_jobs(async_session)
    assert [j.id for j in everything.jobs] == sorted(ids, reverse=True)
    assert everything.next_before_id is None
    failed = await inspect.list_jobs(async_session, status=JobStatus.FAILED)
    assert [j.id for j in failed.jobs] == [ids[6]]
    with pytest.raises(ValueError, match="limit"):
        await inspect.list_jobs(async_session, limit=0)


async def test_job_detail_has_the_job_and_its_attempts_in_order(
    async_session: AsyncSession,
) -> None:
    [job_id, other] = await add_jobs(
        async_session, ("a", "mail", JobStatus.FAILED), ("a", "mail", JobStatus.READY)
    )
    await async_session.execute(
        text("UPDATE acta.job SET args = '{\"to\": 1}', last_error = :e WHERE id = :id"),
        {"e": '{"type": "E", "message": "m"}', "id": job_id},
    )
    async_session.add_all(
        [
            Execution(job_id=job_id, id=12, attempt=2, outcome="failed", error_type="E"),
            Execution(job_id=job_id, id=11, attempt=1, outcome="lost"),
            Execution(job_id=other, id=13, attempt=1, outcome="succeeded"),
        ]
    )
    await async_session.commit()
    await async_session.execute(
        text("UPDATE acta.execution SET finished_at = now() - interval '1 minute' WHERE id = 11")
    )
    await async_session.commit()
    detail = await inspect.job_detail(async_session, job_id)
    assert detail is not None
    assert (detail.id, detail.kind, detail.status) == (job_id, "mail", JobStatus.FAILED)
    assert detail.args == {"to": 1}
    assert detail.last_error == {"type": "E", "message": "m"}
    assert [(e.id, e.attempt, e.outcome, e.error_type) for e in detail.executions] == [
        (11, 1, "lost", None),
        (12, 2, "failed", "E"),
    ]
    assert await inspect.job_detail(async_session, 10**9) is None


async def test_a_key_s_page_reads_the_key_s_own_rows_by_job_key_idx(
    async_session: AsyncSession,
) -> None:
    """The dashboard's key page lists one key's unfinished jobs and kinds: by
    ``job_key_idx`` (migration 0010), never by reading every unfinished row of the
    namespace (148 ms at 100,000 queued jobs before the index)."""
    await async_session.execute(
        text(
            "INSERT INTO acta.job (namespace, kind, concurrency_key) "
            "SELECT 'a', 'k' || (i % 3), CASE WHEN i % 2 = 0 THEN 'acct-' || (i % 500) END "
            "FROM generate_series(1, 20000) AS i"
        )
    )
    await async_session.execute(text("ANALYZE acta.job"))
    await async_session.commit()
    detail = await inspect.concurrency_key(async_session, "a", "acct-8")
    assert len(detail.jobs) == 40 and {j.kind for j in detail.jobs} <= {"k0", "k1", "k2"}
    assert set(detail.limits) == {j.kind for j in detail.jobs}
    for query in (q.key_jobs("a", "acct-8", 200), q.key_kinds("a", "acct-8")):
        compiled = query.compile(
            dialect=async_session.bind.dialect, compile_kwargs={"literal_binds": True}
        )
        plan = "\n".join(
            r[0] for r in (await async_session.execute(text(f"EXPLAIN {compiled}"))).all()
        )
        assert "job_key_idx" in plan, plan
