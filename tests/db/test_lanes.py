"""Lanes against real PostgreSQL (migration 0006's triggers): one job of a lane at a time,
in commit order; the hand-on on every way to a terminal state, whoever writes it."""

from __future__ import annotations

import asyncio

import asyncpg
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from acta_sqla import Acta, Context, Job, WaitForChildren
from acta_sqla.policy import Policy
from acta_sqla.store import WorkerStore, asyncpg_dsn
from acta_sqla.testing import drain
from acta_sqla.worker import completions
from acta_sqla.worker.recovery import decide_expired
from tests.waiting import until_lock_waiters

APP = Acta(namespace="default")


async def enqueue(conn: asyncpg.Connection, lane: str | None, n: int = 1) -> list[int]:
    ids = []
    for _ in range(n):
        ids.append(
            await conn.fetchval(
                "INSERT INTO acta.job (kind, lane_key) VALUES ('k', $1) RETURNING id", lane
            )
        )
    return ids


async def statuses(conn: asyncpg.Connection, ids: list[int]) -> list[str]:
    rows = await conn.fetch("SELECT id, status FROM acta.job WHERE id = ANY($1)", ids)
    by_id = {r["id"]: r["status"] for r in rows}
    return [by_id[i] for i in ids]


async def test_a_lane_holds_one_unfinished_job_ready_the_rest_waiting(
    conn: asyncpg.Connection,
) -> None:
    lane = await enqueue(conn, "L", 3)
    other = await enqueue(conn, "M", 1)
    plain = await enqueue(conn, None, 2)
    assert await statuses(conn, lane) == ["ready", "waiting", "waiting"]
    assert await statuses(conn, other + plain) == ["ready"] * 3
    # One statement enqueueing several jobs of one lane queues them in order too.
    many = await conn.fetch(
        "INSERT INTO acta.job (kind, lane_key) SELECT 'k', 'N' FROM generate_series(1, 4) "
        "RETURNING id, status"
    )
    assert [r["status"] for r in sorted(many)] == ["ready", "waiting", "waiting", "waiting"]


async def test_hand_on_in_a_mixed_completion_batch(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    a = await enqueue(conn, "A", 2)
    b = await enqueue(conn, "B", 2)
    c = await enqueue(conn, "C", 2)
    plain = await enqueue(conn, None, 1)
    claimed = {j.id: j for j in await store.claim_jobs(10)}
    assert set(claimed) == {a[0], b[0], c[0], plain[0]}  # waiting rows are never claimed
    err = completions.ErrorFields("E", "m", "")
    batch = [
        completions.succeeded(claimed[a[0]], None, 0.1),  # ends: hands A on
        completions.failed(claimed[b[0]], Policy(max_attempts=5), err, 0.1),  # retried
        completions.fail_now(claimed[c[0]], err, 0.1),  # ends failed: hands C on
        completions.succeeded(claimed[plain[0]], None, 0.1),
    ]
    assert len(await store.complete_executions(batch)) == 4
    assert await statuses(conn, a) == ["succeeded", "ready"]
    # A retry keeps its place at the head: the next one still waits.
    assert await statuses(conn, b) == ["ready", "waiting"]
    assert await statuses(conn, c) == ["failed", "ready"]


async def test_recovery_of_a_lost_head_whose_budget_is_spent_hands_on(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    lane = await enqueue(conn, "L", 2)
    await conn.execute("UPDATE acta.job SET max_attempts = 1 WHERE id = $1", lane[0])
    [head] = await store.claim_jobs(5)
    await conn.execute(
        "UPDATE acta.job SET lease_expires_at = now() - interval '1 s', "
        "started_at = now() WHERE id = $1",
        head.id,
    )
    await store.recover_expired(100, decide_expired)
    assert await statuses(conn, lane) == ["failed", "ready"]


async def test_cancelling_a_waiting_job_removes_it_cancelling_the_head_hands_on(
    conn: asyncpg.Connection,
) -> None:
    lane = await enqueue(conn, "L", 4)
    cancel = "UPDATE acta.job SET status = 'cancelled', finished_at = now() WHERE id = $1"
    await conn.execute(cancel, lane[2])  # a waiting one: leaves the lane, hands nothing on
    assert await statuses(conn, lane) == ["ready", "waiting", "cancelled", "waiting"]
    await conn.execute(cancel, lane[0])  # the head: the next waiting one is ready
    assert await statuses(conn, lane) == ["cancelled", "ready", "cancelled", "waiting"]


async def test_two_transactions_enqueueing_into_one_lane_at_once(db: str) -> None:
    """The second waits for the first's lane lock and then sees its row: one ready, one
    waiting, ids in commit order; repeated with both committing in either order."""
    dsn = asyncpg_dsn(db)
    one, two = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    try:
        for lane, first_commits in (("X", one), ("Y", two)):
            t1, t2 = one.transaction(), two.transaction()
            await t1.start()
            await t2.start()
            first, second = (one, two) if first_commits is one else (two, one)
            tf, ts = (t1, t2) if first_commits is one else (t2, t1)
            sql = "INSERT INTO acta.job (kind, lane_key) VALUES ('k', $1) RETURNING id, status"
            r1 = await first.fetchrow(sql, lane)
            blocked = asyncio.create_task(second.fetchrow(sql, lane))
            await until_lock_waiters(first)
            assert not blocked.done(), "the second enqueue must wait for the lane"
            await tf.commit()
            r2 = await blocked
            await ts.commit()
            assert (r1["status"], r2["status"]) == ("ready", "waiting")
            assert r1["id"] < r2["id"]
    finally:
        await one.close()
        await two.close()


async def test_concurrent_enqueues_never_leave_two_of_a_lane_unblocked(db: str) -> None:
    dsn = asyncpg_dsn(db)
    conns = [await asyncpg.connect(dsn) for _ in range(4)]
    try:

        async def burst(c: asyncpg.Connection) -> None:
            for _ in range(25):
                async with c.transaction():
                    await c.execute("INSERT INTO acta.job (kind, lane_key) VALUES ('k', 'Z')")

        await asyncio.gather(*(burst(c) for c in conns))
        rows = await conns[0].fetch("SELECT status, count(*) FROM acta.job GROUP BY 1")
        assert {r["status"]: r["count"] for r in rows} == {"ready": 1, "waiting": 99}
    finally:
        for c in conns:
            await c.close()


async def test_an_operators_retry_rejoins_a_busy_lane_as_waiting(
    conn: asyncpg.Connection,
) -> None:
    lane = await enqueue(conn, "L", 2)
    await conn.execute(
        "UPDATE acta.job SET status = 'failed', finished_at = now() WHERE id = $1", lane[0]
    )
    assert await statuses(conn, lane) == ["failed", "ready"]
    await conn.execute("UPDATE acta.job SET status = 'ready' WHERE id = $1", lane[0])
    assert await statuses(conn, lane) == ["waiting", "ready"]


async def test_a_lanes_ids_follow_commit_order_even_when_a_later_committer_drew_first(
    db: str,
) -> None:
    """The blocked enqueue drew its default id before it waited for the lane; the first
    transaction then enqueues again. Ids (which the hand-on follows) must still be in
    commit order: the first transaction's two jobs, then the second's."""
    dsn = asyncpg_dsn(db)
    one, two = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    sql = "INSERT INTO acta.job (kind, lane_key) VALUES ('k', 'Q') RETURNING id"
    try:
        t1, t2 = one.transaction(), two.transaction()
        await t1.start()
        await t2.start()
        a = await one.fetchval(sql)
        blocked = asyncio.create_task(two.fetchval(sql))
        await until_lock_waiters(one)
        c = await one.fetchval(sql)
        await t1.commit()
        b = await blocked
        await t2.commit()
        assert a < c < b
        rows = await one.fetch("SELECT id, status FROM acta.job ORDER BY id")
        assert [r["status"] for r in rows] == ["ready", "waiting", "waiting"]
    finally:
        await one.close()
        await two.close()


@APP.job
async def step(ctx: Context, n: int) -> None: ...


async def test_a_bulk_enqueue_mixing_lanes_and_plain_jobs_maps_each_id_to_its_job(
    async_session: AsyncSession,
) -> None:
    """The lane trigger draws a lane job's id again; a batch's ids must still grow in
    input order, which enqueue_many relies on to answer each job's id."""
    jobs = [step.job(n=i, lane="L" if i % 2 else None) for i in range(10)]
    results = await APP.enqueue_many(async_session, jobs)
    await async_session.commit()
    rows = (await async_session.execute(select(Job.id, Job.args, Job.status))).all()
    by_id = {r.id: (r.args["n"], r.status.value) for r in rows}
    assert [by_id[r.id][0] for r in results] == list(range(10))
    lane = [by_id[r.id][1] for i, r in enumerate(results) if i % 2]
    assert lane == ["ready", "waiting", "waiting", "waiting", "waiting"]


NESTED = Acta(namespace="nested-lanes")


@NESTED.job(lane="account:{account}")
async def settle(ctx: Context, account: str) -> None:
    """Nothing: a lane's job."""


@NESTED.job(lane="account:{account}", max_attempts=1)
async def settle_all(ctx: Context, account: str, child_lane: str | None = None) -> object:
    if ctx.resumed == "children":
        return "settled"
    child = (
        settle.job(account=account, lane=child_lane) if child_lane else settle.job(account=account)
    )
    return WaitForChildren([child])


async def test_a_parent_waiting_for_a_child_of_its_own_lane_fails_instead_of_stranding_it(
    db: str, conn: asyncpg.Connection, async_session: AsyncSession
) -> None:
    # The child would queue `waiting` behind its parent, which holds the lane while it
    # waits for the child: neither would ever run, nor any later job of the lane.
    parent = settle_all.job(account="7")
    later = settle.job(account="7")
    async_session.add_all([parent, later])
    await async_session.commit()
    result = await drain(NESTED, database_url=db)
    assert not result.crashed
    row = await conn.fetchrow(
        "SELECT status, last_error->>'type', last_error->>'message' FROM acta.job WHERE id = $1",
        parent.id,
    )
    assert (row[0], row[1]) == ("failed", "acta_sqla.errors.InvalidJob")
    assert "child 0 (settle) is in lane 'account:7', which its parent holds" in row[2]
    # Nothing was spawned, and the lane went on.
    statuses = await conn.fetch("SELECT id, status FROM acta.job ORDER BY id")
    assert [tuple(r) for r in statuses] == [(parent.id, "failed"), (later.id, "succeeded")]
    # A child in another lane is fine: the parent waits for it, then resumes.
    other = settle_all.job(account="8", child_lane="elsewhere")
    async_session.add(other)
    await async_session.commit()
    await drain(NESTED, database_url=db)
    row = await conn.fetchrow("SELECT status, result::text FROM acta.job WHERE id = $1", other.id)
    assert tuple(row) == ("succeeded", '"settled"')


@NESTED.job(max_attempts=1)
async def settle_middle(ctx: Context, account: str, grandchild_lane: str) -> object:
    if ctx.resumed == "children":
        return "middle done"
    return WaitForChildren([settle.job(account=account, lane=grandchild_lane)])


@NESTED.job(lane="account:{account}", max_attempts=1)
async def settle_tree(ctx: Context, account: str, grandchild_lane: str) -> object:
    if ctx.resumed == "children":
        return "tree done"
    return WaitForChildren([settle_middle.job(account=account, grandchild_lane=grandchild_lane)])


async def test_a_grandchild_in_its_grandparent_s_lane_fails_its_parent_instead_of_stranding(
    db: str, conn: asyncpg.Connection, async_session: AsyncSession
) -> None:
    """The grandparent holds its lane while it waits for the middle job, which waits for the
    grandchild, which would queue behind the grandparent: nothing would ever run again in
    that lane. The middle job's wait is refused (InvalidJob), so the tree ends and the lane
    goes on. (Only a parent's own lane was checked: the three waited for ever.)"""
    tree = settle_tree.job(account="9", grandchild_lane="account:9")
    later = settle.job(account="9")
    async_session.add_all([tree, later])
    await async_session.commit()

    result = await drain(NESTED, database_url=db)

    assert not result.crashed
    rows = await conn.fetch(
        "SELECT kind, status, last_error->>'type', last_error->>'message' FROM acta.job ORDER BY id"
    )
    by_kind = {r[0]: r for r in rows}
    assert set(by_kind) == {"settle_tree", "settle", "settle_middle"}  # no grandchild
    middle = by_kind["settle_middle"]
    assert (middle[1], middle[2]) == ("failed", "acta_sqla.errors.InvalidJob")
    assert "which an ancestor of its parent holds" in middle[3]
    assert by_kind["settle_tree"][1] == "succeeded"
    assert [r[1] for r in rows if r[0] == "settle"] == ["succeeded"]  # the lane went on


async def test_a_grandchild_in_another_lane_runs_and_the_tree_resumes(
    db: str, conn: asyncpg.Connection, async_session: AsyncSession
) -> None:
    tree = settle_tree.job(account="10", grandchild_lane="elsewhere:10")
    async_session.add(tree)
    await async_session.commit()

    await drain(NESTED, database_url=db)

    rows = await conn.fetch("SELECT kind, status FROM acta.job ORDER BY id")
    assert sorted(tuple(r) for r in rows) == [
        ("settle", "succeeded"),
        ("settle_middle", "succeeded"),
        ("settle_tree", "succeeded"),
    ]


async def test_jobs_of_one_lane_retried_together_leave_exactly_one_head(
    conn: asyncpg.Connection,
) -> None:
    """The retry's lane trigger runs AFTER the statement's rows are updated (migration
    0015), so jobs retried by one statement see each other: one heads the lane, the
    others queue behind it, and none is stranded."""
    lane = await enqueue(conn, "L", 3)
    await conn.execute(
        "UPDATE acta.job SET status = 'failed', finished_at = now() WHERE id = ANY($1)", lane
    )
    await conn.execute("UPDATE acta.job SET status = 'ready' WHERE id = ANY($1)", lane)
    assert sorted(await statuses(conn, lane)) == ["ready", "waiting", "waiting"]


async def test_the_job_table_has_no_before_update_row_trigger(conn: asyncpg.Connection) -> None:
    """A BEFORE UPDATE row trigger makes PostgreSQL lock every row an UPDATE changes, and
    log the lock, before it tests the trigger's WHEN clause: one more WAL record per row
    of every completion (docs/performance.md, eighth pass)."""
    before_update_row = await conn.fetch(
        "SELECT tgname FROM pg_trigger WHERE tgrelid = 'acta.job'::regclass "
        "AND NOT tgisinternal AND tgtype & 1 = 1 AND tgtype & 2 = 2 AND tgtype & 16 = 16"
    )
    assert before_update_row == []
