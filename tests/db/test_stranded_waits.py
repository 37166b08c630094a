"""What no job could leave by itself (issue 28, items 4 and 10): a deleted unfinished job
(``session.delete`` refused; a hand-written DELETE applies a cancel's effects, migration
0014), recovery's repair of what older code or a DELETE with triggers disabled left (a
parent counting children that no longer exist, a lane with no head), and the detection of
a cycle of waits across lanes (docs/waits.md; invariants I11 and I16)."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from acta_sqla import Acta, DeadlockDetected, Job, JobActive, WaitForChildren
from acta_sqla.queries import recovery as q
from acta_sqla.store import WorkerStore
from acta_sqla.values import ClaimedJob
from acta_sqla.worker import completions
from acta_sqla.worker.recovery import run_recovery
from tests.waiting import until_lock_waiters

APP = Acta()


@APP.job()
async def child(ctx: object, n: int) -> int:
    return n


async def claim(store: WorkerStore, job_id: int) -> ClaimedJob:
    [job] = await claim_all(store, job_id)
    return job


async def claim_all(store: WorkerStore, *job_ids: int) -> list[ClaimedJob]:
    """Jobs ``job_ids``, claimed (by this claim or one before, whose jobs are kept)."""
    for job in await store.claim_jobs(100):
        CLAIMED[job.id] = job
    return [CLAIMED.pop(i) for i in job_ids]


CLAIMED: dict[int, ClaimedJob] = {}
"""Jobs claimed and not yet asked for (ids restart with each test: emptied before each)."""


@pytest.fixture(autouse=True)
def _forget_claims() -> None:
    CLAIMED.clear()


async def insert(conn: asyncpg.Connection, kind: str = "p", lane: str | None = None) -> int:
    return await conn.fetchval(
        "INSERT INTO acta.job (kind, lane_key) VALUES ($1, $2) RETURNING id", kind, lane
    )


async def park(store: WorkerStore, parent: ClaimedJob, *kids: Job) -> list[int]:
    """``parent`` waits for ``kids``; their ids in spawn order."""
    rows = WaitForChildren(list(kids)).rows
    await store.complete_executions([completions.wait_for_children(parent, rows, 0.1)])
    return [
        r["id"]
        for r in await store.admin_conn.fetch(
            "SELECT id FROM acta.job WHERE parent_id = $1 ORDER BY id", parent.id
        )
    ]


async def state(conn: asyncpg.Connection, job_id: int) -> tuple[str, int, str | None]:
    r = await conn.fetchrow(
        "SELECT status, pending_children, resumed FROM acta.job WHERE id = $1", job_id
    )
    return (r["status"], r["pending_children"], r["resumed"])


async def lane_statuses(conn: asyncpg.Connection, lane: str) -> list[str]:
    rows = await conn.fetch("SELECT status FROM acta.job WHERE lane_key = $1 ORDER BY id", lane)
    return [r["status"] for r in rows]


# ------------------------------------------------------------------ session.delete refused


@pytest.mark.parametrize("status", ["ready", "executing", "waiting"])
def test_session_delete_of_an_unfinished_job_is_refused_and_undone(
    sync_session: Session, status: str
) -> None:
    job = Job(kind="k")
    sync_session.add(job)
    sync_session.commit()
    sync_session.execute(Job.__table__.update().values(status=status))
    job_id = job.id
    sync_session.commit()  # expires the job: the delete reads the stored status
    sync_session.delete(job)
    with pytest.raises(JobActive, match=rf"job {job_id} is {status}: .*acta\.cancel"):
        sync_session.flush()
    # Nothing was sent; the delete is undone and the transaction goes on.
    assert job not in sync_session.deleted
    sync_session.commit()
    assert sync_session.scalar(select(Job.status).where(Job.id == job_id)) == status


def test_session_delete_of_a_finished_job_goes_through(sync_session: Session) -> None:
    done, live = Job(kind="k"), Job(kind="k")
    sync_session.add_all([done, live])
    sync_session.commit()
    sync_session.execute(Job.__table__.update().where(Job.id == done.id).values(status="succeeded"))
    sync_session.commit()
    sync_session.delete(done)
    sync_session.commit()
    assert sync_session.scalars(select(Job.id)).all() == [live.id]


async def test_async_session_delete_of_an_unfinished_job_is_refused(
    async_session: AsyncSession,
) -> None:
    job = Job(kind="k")
    async_session.add(job)
    await async_session.commit()
    await async_session.delete(job)
    with pytest.raises(JobActive, match=f"job {job.id} is ready"):
        await async_session.commit()
    await async_session.commit()  # the session is usable; nothing was deleted
    assert await async_session.scalar(select(Job.status).where(Job.id == job.id)) == "ready"


# ------------------------------------------------------------------ a hand-written DELETE


async def test_a_hand_written_delete_of_unfinished_jobs_applies_a_cancels_effects(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    # A parent waiting for two children, one executing; a lane's executing head.
    parent = await claim(store, await insert(conn))
    kids = await park(store, parent, child.job(n=1), child.job(n=2))
    head_id = await insert(conn, "h", "L")
    queued = await insert(conn, "h", "L")
    running = {j.id for j in await store.claim_jobs(100)}
    assert {kids[0], kids[1], head_id} <= running
    await conn.execute("DELETE FROM acta.job WHERE id = $1", kids[0])
    assert await state(conn, parent.id) == ("waiting", 1, None)
    await conn.execute("DELETE FROM acta.job WHERE id = ANY($1)", [kids[1], head_id])
    assert await state(conn, parent.id) == ("ready", 0, "children")
    assert await lane_statuses(conn, "L") == ["ready"]
    assert (await state(conn, queued))[0] == "ready"
    # A waiting parent deleted: its unfinished children are cancelled, as by a cancel.
    again = await claim(store, parent.id)
    [orphan] = await park(store, again, child.job(n=3))
    await conn.execute("DELETE FROM acta.job WHERE id = $1", parent.id)
    assert (await state(conn, orphan))[0] == "cancelled"
    # A whole lane deleted at once hands on to nothing; the prune's finished rows call
    # nothing (the trigger's WHEN clause).
    await conn.execute("DELETE FROM acta.job")
    assert await conn.fetchval("SELECT count(*) FROM acta.job") == 0


# ------------------------------------------------------------------ recovery's repair


async def test_recovery_recounts_a_parent_whose_children_were_deleted_without_effects(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    a = await claim(store, await insert(conn))
    a_kids = await park(store, a, child.job(n=1), child.job(n=2))
    b = await claim(store, await insert(conn))
    b_kids = await park(store, b, child.job(n=1), child.job(n=2), child.job(n=3))
    # What older code (or a DELETE with triggers off) did: the rows go, nothing is told.
    await conn.execute("SET session_replication_role = replica")
    await conn.execute("DELETE FROM acta.job WHERE id = ANY($1)", [*a_kids, b_kids[0]])
    await conn.execute("SET session_replication_role = DEFAULT")
    assert await state(conn, a.id) == ("waiting", 2, None)
    result = await run_recovery(store)
    assert result.recounted == 2
    assert await state(conn, a.id) == ("ready", 0, "children")  # none left: resumed
    assert await state(conn, b.id) == ("waiting", 2, None)  # two left: counted right
    # The rest end as usual and resume it once.
    for job in await store.claim_jobs(100):
        if job.id in b_kids:
            await store.complete_executions([completions.succeeded(job, "1", 0.1)])
    assert await state(conn, b.id) == ("ready", 0, "children")
    assert (await run_recovery(store)).recounted == 0


async def test_the_recount_waits_for_a_child_ending_meanwhile(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    """A child's end decrements its parent under the parent's row lock: one committing
    while the recount holds the lock applies its decrement to the new count."""
    p = await claim(store, await insert(conn))
    kids = await park(store, p, child.job(n=1), child.job(n=2))
    await conn.execute("SET session_replication_role = replica")
    await conn.execute("DELETE FROM acta.job WHERE id = $1", kids[0])
    await conn.execute("SET session_replication_role = DEFAULT")
    [survivor] = [j for j in await store.claim_jobs(100) if j.id == kids[1]]
    tx = conn.transaction()
    await tx.start()
    await conn.fetch(q.lock_parents("acta"), [p.id])
    # The child ends now: its completion waits for the parent's row lock.
    ending = asyncio.ensure_future(
        store.complete_executions([completions.succeeded(survivor, "1", 0.1)])
    )
    await until_lock_waiters(conn, 1)
    # The recount's snapshot still sees the child unfinished (its write is not committed).
    rows = await conn.fetch(q.recount_parents("acta"), [p.id])
    assert [(r["id"], r["pending_children"], r["status"]) for r in rows] == [(p.id, 1, "waiting")]
    await tx.commit()
    await ending
    assert await state(conn, p.id) == ("ready", 0, "children")


async def test_recovery_promotes_the_next_job_of_a_lane_whose_head_was_deleted(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    lane = [await insert(conn, "h", "L") for _ in range(3)]
    for _ in range(2):
        await insert(conn, "h", "M")
    await claim(store, lane[0])  # claims M's head too
    assert await lane_statuses(conn, "L") == ["executing", "waiting", "waiting"]
    await conn.execute("SET session_replication_role = replica")
    await conn.execute("DELETE FROM acta.job WHERE id = $1", lane[0])
    await conn.execute("SET session_replication_role = DEFAULT")
    assert await lane_statuses(conn, "L") == ["waiting", "waiting"]  # stranded
    result = await run_recovery(store)
    assert result.promoted == 1
    assert await lane_statuses(conn, "L") == ["ready", "waiting"]  # next in order
    assert await lane_statuses(conn, "M") == ["executing", "waiting"]  # untouched
    assert (await run_recovery(store)).promoted == 0  # a lane with a head is left alone


# ------------------------------------------------------------------ wait cycles across lanes


async def two_lane_cycle(conn: asyncpg.Connection, store: WorkerStore) -> tuple[int, ...]:
    """P1 (lane L1) waits for C2 queued in L2 behind P2 (lane L2), which waits for C1
    queued in L1 behind P1."""
    p1_id = await insert(conn, "p", "L1")
    p2_id = await insert(conn, "p", "L2")
    p1, p2 = await claim_all(store, p1_id, p2_id)
    [c2] = await park(store, p1, child.job(n=2, lane="L2"))
    [c1] = await park(store, p2, child.job(n=1, lane="L1"))
    assert await lane_statuses(conn, "L1") == ["waiting", "waiting"]
    assert await lane_statuses(conn, "L2") == ["waiting", "waiting"]
    return p1_id, p2_id, c1, c2


async def test_a_cycle_of_waits_across_two_lanes_fails_its_youngest_parent(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    p1, p2, c1, c2 = await two_lane_cycle(conn, store)
    assert await store.fail_deadlocked() == [(p2, c1, "L1", p1)]
    row = await conn.fetchrow("SELECT status, last_error FROM acta.job WHERE id = $1", p2)
    error = json.loads(row["last_error"])
    assert row["status"] == "failed"
    assert error["type"] == DeadlockDetected.__name__ == q.DEADLOCK_ERROR
    assert f"job {p2} waited for its child job {c1}, queued in lane L1" in error["message"]
    # Its lane moved on: P1's child runs, P1 resumes, its lane hands on to C1.
    assert await lane_statuses(conn, "L2") == ["failed", "ready"]
    assert await store.fail_deadlocked() == []  # the cycle is open
    job = await claim(store, c2)
    await store.complete_executions([completions.succeeded(job, "2", 0.1)])
    assert await state(conn, p1) == ("ready", 0, "children")
    job = await claim(store, p1)
    await store.complete_executions([completions.succeeded(job, None, 0.1)])
    assert await lane_statuses(conn, "L1") == ["succeeded", "ready"]
    assert (await state(conn, c1))[0] == "ready"


async def test_a_longer_cycle_through_a_grandchild_is_found_and_a_chain_without_one_is_not(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    # P1 (L1) waits for X (no lane), which waits for G queued in L2 behind P2 (L2),
    # which waits for C1 queued in L1 behind P1.
    p1_id = await insert(conn, "p", "L1")
    p2_id = await insert(conn, "p", "L2")
    p1, p2 = await claim_all(store, p1_id, p2_id)
    [x_id] = await park(store, p1, child.job(n=0))
    [g] = await park(store, await claim(store, x_id), child.job(n=1, lane="L2"))
    # Before P2 waits, L2's head can still move: no cycle.
    assert await store.fail_deadlocked() == []
    [c1] = await park(store, p2, child.job(n=2, lane="L1"))
    # The youngest of the parents that wait for a queued job of the cycle: P2 > X? X is
    # younger (spawned after P2 was enqueued), so X fails.
    assert x_id > p2_id
    assert await store.fail_deadlocked() == [(x_id, g, "L2", p2_id)]
    assert (await state(conn, p1_id))[0] == "ready"  # X's end resumed P1
    assert (await state(conn, g))[0] == "waiting"  # still queued behind P2
    assert c1 > g


async def test_recovery_breaks_a_cycle_and_names_it(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    p1, p2, _, _ = await two_lane_cycle(conn, store)
    result = await run_recovery(store)
    assert result.deadlocks == 1
    assert (await state(conn, p2))[0] == "failed"
    assert (await state(conn, p1))[0] == "waiting"
