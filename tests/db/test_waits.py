"""Durable waits in the database: the completion that parks a job (signal or children), the
signal statement, the heartbeat's wake of timed-out waits, and the terminal-effects
trigger telling a waiting parent (docs/waits.md; invariants I11 and I17)."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from acta_sqla import Acta, JobFinished, JobNotFound, WaitForChildren
from acta_sqla.errors import InvalidSignal
from acta_sqla.policy import Policy
from acta_sqla.queries.complete import encode
from acta_sqla.store import WorkerStore, asyncpg_dsn
from acta_sqla.values import ClaimedJob
from acta_sqla.worker import completions
from acta_sqla.worker.recovery import decide_expired
from tests.waiting import until_lock_waiters

APP = Acta()


@APP.job()
async def child(ctx: object, n: int) -> int:
    return n


async def claim_one(conn: asyncpg.Connection, store: WorkerStore, kind: str = "p") -> ClaimedJob:
    job_id = await conn.fetchval("INSERT INTO acta.job (kind) VALUES ($1) RETURNING id", kind)
    [job] = [j for j in await store.claim_jobs(100) if j.id == job_id]
    return job


async def row(conn: asyncpg.Connection, job_id: int) -> asyncpg.Record:
    return await conn.fetchrow(
        "SELECT status, attempts, awaited_signal, pending_children, resumed, signals::text,"
        " run_at = 'infinity' AS forever, run_at <= now() AS due FROM acta.job WHERE id = $1",
        job_id,
    )


async def signal(engine: AsyncEngine, job_id: int, name: str, payload: object = None) -> str:
    async with AsyncSession(engine) as session:
        status = await APP.signal(session, job_id, name, payload)
        await session.commit()
    return status


def spawn(n: int) -> list[dict[str, object]]:
    return WaitForChildren([child.job(n=i) for i in range(n)]).rows


# ------------------------------------------------------------------ the parking completion


async def test_one_batch_parks_a_signal_wait_spawns_children_and_ends_a_plain_job(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    waiter = await claim_one(conn, store)
    parent = await claim_one(conn, store)
    plain = await claim_one(conn, store)
    batch = [
        completions.wait_for_signal(waiter, "approved", None, 0.1),
        completions.wait_for_children(parent, spawn(3), 0.1),
        completions.succeeded(plain, "1", 0.1),
    ]
    assert await store.complete_executions(batch) == {waiter.id, parent.id, plain.id}
    w = await row(conn, waiter.id)
    assert (w["status"], w["awaited_signal"], w["attempts"], w["forever"]) == (
        "waiting",
        "approved",
        0,  # a wait is not charged
        True,  # no timeout: no deadline
    )
    p = await row(conn, parent.id)
    assert (p["status"], p["pending_children"], p["attempts"]) == ("waiting", 3, 0)
    kids = await conn.fetch(
        "SELECT kind, args, status, parent_id FROM acta.job WHERE parent_id = $1 ORDER BY id",
        parent.id,
    )
    assert [(k["kind"], json.loads(k["args"]), k["status"]) for k in kids] == [
        ("child", {"n": 0}, "ready"),
        ("child", {"n": 1}, "ready"),
        ("child", {"n": 2}, "ready"),
    ]
    assert (await row(conn, plain.id))["status"] == "succeeded"
    # Each attempt is recorded, the waits as "waiting".
    outcomes = await conn.fetch("SELECT job_id, outcome FROM acta.attempt ORDER BY job_id")
    assert {r["job_id"]: r["outcome"] for r in outcomes} == {
        waiter.id: "waiting",
        parent.id: "waiting",
        plain.id: "succeeded",
    }


async def test_a_repeated_spawn_inserts_the_children_once(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    parent = await claim_one(conn, store)
    completion = completions.wait_for_children(parent, spawn(2), 0.1)
    assert await store.complete_executions([completion]) == {parent.id}
    assert await store.complete_executions([completion]) == set()  # fenced: lease lost
    assert await conn.fetchval("SELECT count(*) FROM acta.job WHERE parent_id = $1", parent.id) == 2


async def test_children_given_as_a_batch_are_spawned_like_jobs_in_order(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    parent = await claim_one(conn, store)
    wait = WaitForChildren([child.jobs([{"n": 0}, {"n": 1}], priority=-2), child.job(n=2)])
    completion = completions.wait_for_children(parent, wait.rows, 0.1)
    assert await store.complete_executions([completion]) == {parent.id}
    assert (await row(conn, parent.id))["pending_children"] == 3
    kids = await conn.fetch(
        "SELECT args, priority, status FROM acta.job WHERE parent_id = $1 ORDER BY id", parent.id
    )
    assert [(json.loads(k["args"]), k["priority"], k["status"]) for k in kids] == [
        ({"n": 0}, -2, "ready"),
        ({"n": 1}, -2, "ready"),
        ({"n": 2}, 0, "ready"),
    ]


async def test_a_cancel_requested_while_running_wins_over_the_wait(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    parent = await claim_one(conn, store)
    await conn.execute("UPDATE acta.job SET cancel_requested = true WHERE id = $1", parent.id)
    await store.complete_executions([completions.wait_for_children(parent, spawn(2), 0.1)])
    assert (await row(conn, parent.id))["status"] == "cancelled"
    assert await conn.fetchval("SELECT count(*) FROM acta.job WHERE parent_id = $1", parent.id) == 0


# ------------------------------------------------------------------ signals


async def test_a_signal_wakes_a_job_waiting_for_it_and_keeps_its_payload(
    conn: asyncpg.Connection, store: WorkerStore, async_engine: AsyncEngine
) -> None:
    job = await claim_one(conn, store)
    await store.complete_executions([completions.wait_for_signal(job, "approved", 60.0, 0.1)])
    assert await signal(async_engine, job.id, "other", 1) == "waiting"  # not the awaited one
    assert await signal(async_engine, job.id, "approved", {"by": "ann"}) == "ready"
    r = await row(conn, job.id)
    assert (r["status"], r["resumed"], r["awaited_signal"], r["due"]) == (
        "ready",
        "signal",
        None,
        True,
    )
    assert json.loads(r["signals"]) == {"other": 1, "approved": {"by": "ann"}}
    [again] = await store.claim_jobs(1)
    assert (again.id, again.resumed, json.loads(again.signals_json or "")) == (
        job.id,
        "signal",
        {"other": 1, "approved": {"by": "ann"}},
    )


async def test_a_signal_sent_before_the_wait_satisfies_it_at_once(
    conn: asyncpg.Connection, store: WorkerStore, async_engine: AsyncEngine
) -> None:
    """I17: no lost-signal race. The signal lands while the job executes; the completion
    that would park it reads the row's signals and makes it ready instead."""
    job = await claim_one(conn, store)
    assert await signal(async_engine, job.id, "approved", True) == "executing"
    await store.complete_executions([completions.wait_for_signal(job, "approved", None, 0.1)])
    r = await row(conn, job.id)
    assert (r["status"], r["resumed"], r["awaited_signal"], r["due"]) == (
        "ready",
        "signal",
        None,
        True,
    )


async def test_a_signal_committed_while_the_completion_waits_for_the_row_is_not_lost(
    conn: asyncpg.Connection, store: WorkerStore, async_engine: AsyncEngine
) -> None:
    """The signal's transaction holds the row when the parking completion arrives: the
    completion waits, then re-reads the row (READ COMMITTED) and sees the signal."""
    job = await claim_one(conn, store)
    async with AsyncSession(async_engine) as session:
        await APP.signal(session, job.id, "approved", 1)  # row locked, not committed
        write = asyncio.create_task(
            store.complete_executions([completions.wait_for_signal(job, "approved", None, 0.1)])
        )
        # The completion is blocked on the row lock until the signal commits.
        await until_lock_waiters(conn)
        assert not write.done()
        await session.commit()
    assert await write == {job.id}
    assert (await row(conn, job.id))["status"] == "ready"


async def test_signalling_a_finished_or_missing_job_raises_and_changes_nothing(
    conn: asyncpg.Connection, store: WorkerStore, async_engine: AsyncEngine
) -> None:
    job = await claim_one(conn, store)
    await store.complete_executions([completions.succeeded(job, None, 0.1)])
    with pytest.raises(JobFinished, match=rf"job {job.id} has already finished \(succeeded\)"):
        await signal(async_engine, job.id, "approved")
    with pytest.raises(JobNotFound, match="no job with id 999999"):
        await signal(async_engine, 999999, "approved")
    with pytest.raises(InvalidSignal, match=r"payload=<object .*> is not JSON-serializable"):
        await signal(async_engine, job.id, "approved", object())
    with pytest.raises(InvalidSignal, match="signal name '' must be a non-empty string"):
        await signal(async_engine, job.id, "")
    assert (await row(conn, job.id))["signals"] is None


@pytest.mark.parametrize(
    ("name", "payload", "message"),
    [
        ("go", {"a": "x\ud800"}, r"signal 'go': payload\['a'\] contains a lone surrogate"),
        ("go", {"a\x00": 1}, r"signal 'go': payload has a key 'a\\x00' holding a NUL"),
        ("a\x00", 1, r"signal name 'a\\x00' contains a NUL character"),
        ("a\ud800", 1, r"signal name 'a\\ud800' contains a lone surrogate"),
        ("go", float("nan"), r"payload=nan is not JSON-serializable"),
        ("go", 10**4300, r"payload is an integer of more than"),
    ],
    ids=["surrogate", "nul-key", "nul-name", "surrogate-name", "nan", "huge-int"],
)
async def test_a_signal_postgresql_or_the_worker_could_not_take_is_refused_before_the_database(
    conn: asyncpg.Connection,
    store: WorkerStore,
    async_engine: AsyncEngine,
    name: str,
    payload: object,
    message: str,
) -> None:
    job = await claim_one(conn, store)
    async with AsyncSession(async_engine) as session:
        with pytest.raises(InvalidSignal, match=message):
            await APP.signal(session, job.id, name, payload)
        # Nothing sent; the transaction goes on.
        assert await APP.signal(session, job.id, "fine", {"path": "C:\\u0000"}) == "executing"
        await session.commit()
    assert json.loads((await row(conn, job.id))["signals"]) == {"fine": {"path": "C:\\u0000"}}


async def test_a_signal_nested_past_the_limit_is_refused_without_recursing(
    conn: asyncpg.Connection, store: WorkerStore, async_engine: AsyncEngine
) -> None:
    job = await claim_one(conn, store)
    deep: dict[str, object] = {}
    inner = deep
    for _ in range(5000):  # past Python's recursion limit as well as acta's depth limit
        inner["a"] = {}
        inner = inner["a"]  # type: ignore[assignment]
    with pytest.raises(InvalidSignal, match=r"payload\['a'\] is nested deeper than"):
        await signal(async_engine, job.id, "deep", deep)


async def test_the_heartbeat_wakes_a_signal_wait_past_its_deadline(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    late = await claim_one(conn, store)
    later = await claim_one(conn, store)
    await store.complete_executions(
        [
            completions.wait_for_signal(late, "a", 60.0, 0.1),
            completions.wait_for_signal(later, "a", 3600.0, 0.1),
        ]
    )
    await conn.execute(
        "UPDATE acta.job SET run_at = now() - interval '1 second' WHERE id = $1", late.id
    )
    await store.heartbeat([])
    r = await row(conn, late.id)
    assert (r["status"], r["resumed"], r["awaited_signal"]) == ("ready", "timeout", None)
    assert (await row(conn, later.id))["status"] == "waiting"


# ------------------------------------------------------------------ children and the parent


async def finish_children(
    conn: asyncpg.Connection, store: WorkerStore, parent_id: int, how: str
) -> list[ClaimedJob]:
    kids = [j for j in await store.claim_jobs(100) if j.id != parent_id]
    err = completions.ErrorFields("E", "boom", "")
    batch = [
        completions.succeeded(k, "1", 0.1)
        if how == "succeed"
        else completions.fail_now(k, err, 0.1)
        for k in kids
    ]
    await store.complete_executions(batch)
    return kids


async def test_the_last_child_to_end_makes_the_parent_ready_exactly_once(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    parent = await claim_one(conn, store)
    await store.complete_executions([completions.wait_for_children(parent, spawn(3), 0.1)])
    kids = await store.claim_jobs(100)
    assert len(kids) == 3
    first = completions.succeeded(kids[0], "1", 0.1)
    await store.complete_executions([first])
    # The same completion written again (a repeat after a lost answer) matches nothing
    # and counts nothing.
    assert await store.complete_executions([first]) == set()
    assert (await row(conn, parent.id))["pending_children"] == 2
    err = completions.ErrorFields("E", "boom", "")
    await store.complete_executions([completions.fail_now(kids[1], err, 0.1)])
    assert (await row(conn, parent.id))["status"] == "waiting"  # a failure does not fail it
    await store.complete_executions([completions.succeeded(kids[2], "2", 0.1)])
    p = await row(conn, parent.id)
    assert (p["status"], p["pending_children"], p["resumed"], p["due"]) == (
        "ready",
        0,
        "children",
        True,
    )
    [again] = await store.claim_jobs(1)
    assert again.id == parent.id and again.resumed == "children"
    children = json.loads(await store.children_of(parent.id) or "[]")
    assert [(c[0], c[2], c[3]) for c in children] == [
        (kids[0].id, "succeeded", 1),
        (kids[1].id, "failed", None),
        (kids[2].id, "succeeded", 2),
    ]
    assert children[1][4] == {"type": "E", "message": "boom"}


async def test_a_child_lost_with_its_worker_tells_the_parent_only_when_it_ends(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    parent = await claim_one(conn, store)
    await store.complete_executions([completions.wait_for_children(parent, spawn(1), 0.1)])
    [kid] = await store.claim_jobs(10)
    await conn.execute(
        "UPDATE acta.job SET lease_expires_at = now() - interval '1 second', max_attempts = 1,"
        " started_at = now()"
        " WHERE id = $1",
        kid.id,
    )
    # Recovery charges the lone attempt: its budget of 1 is spent, so it ends failed, and
    # the recovery's write tells the parent.
    [(recovered, status, _)] = await store.recover_expired(100, decide_expired)
    assert (recovered, status) == (kid.id, "failed")
    p = await row(conn, parent.id)
    assert (p["status"], p["resumed"]) == ("ready", "children")


async def test_a_retried_child_is_counted_again(
    conn: asyncpg.Connection, store: WorkerStore, async_engine: AsyncEngine
) -> None:
    parent = await claim_one(conn, store)
    await store.complete_executions([completions.wait_for_children(parent, spawn(2), 0.1)])
    a, b = await store.claim_jobs(10)
    err = completions.ErrorFields("E", "boom", "")
    await store.complete_executions([completions.fail_now(a, err, 0.1)])
    async with AsyncSession(async_engine) as session:
        assert await APP.retry(session, a.id)
        await session.commit()
    assert (await row(conn, parent.id))["pending_children"] == 2  # pending again
    await store.complete_executions([completions.succeeded(b, None, 0.1)])
    assert (await row(conn, parent.id))["status"] == "waiting"
    [a2] = await store.claim_jobs(10)
    await store.complete_executions([completions.succeeded(a2, None, 0.1)])
    assert (await row(conn, parent.id))["status"] == "ready"


async def test_cancelling_a_waiting_parent_cancels_its_tree(
    conn: asyncpg.Connection, store: WorkerStore, async_engine: AsyncEngine
) -> None:
    root = await claim_one(conn, store)
    await store.complete_executions([completions.wait_for_children(root, spawn(2), 0.1)])
    kids = await store.claim_jobs(10)
    # The first child waits for a child of its own; the second is still executing.
    await store.complete_executions([completions.wait_for_children(kids[0], spawn(1), 0.1)])
    async with AsyncSession(async_engine) as session:
        assert await APP.cancel(session, root.id) == "cancelled"
        await session.commit()
    statuses = dict(await conn.fetch("SELECT id, status FROM acta.job WHERE id <> $1", kids[1].id))
    assert set(statuses.values()) == {"cancelled"}
    assert len(statuses) == 3  # root, its waiting child, that child's child
    # The executing child is asked to stop (its worker's heartbeat cancels it).
    r = await conn.fetchrow(
        "SELECT status, cancel_requested FROM acta.job WHERE id = $1", kids[1].id
    )
    assert (r["status"], r["cancel_requested"]) == ("executing", True)


async def test_a_plain_completion_does_not_touch_the_wait_columns(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    job = await claim_one(conn, store)
    err = completions.ErrorFields("E", "m", "")
    await store.complete_executions([completions.failed(job, Policy(max_attempts=3), err, 0.1)])
    r = await row(conn, job.id)
    assert (r["status"], r["awaited_signal"], r["pending_children"], r["resumed"]) == (
        "ready",
        None,
        0,
        None,
    )


# ------------------------------------------------------------------ an operator after a wait


async def retry(engine: AsyncEngine, job_id: int) -> bool:
    async with AsyncSession(engine) as session:
        done = await APP.retry(session, job_id)
        await session.commit()
    return done


async def cancel(engine: AsyncEngine, job_id: int) -> str:
    async with AsyncSession(engine) as session:
        answer = await APP.cancel(session, job_id)
        await session.commit()
    return answer


async def test_a_child_of_an_earlier_wait_never_resumes_its_parents_later_wait(
    conn: asyncpg.Connection, store: WorkerStore, async_engine: AsyncEngine
) -> None:
    parent = await claim_one(conn, store)
    await store.complete_executions([completions.wait_for_children(parent, spawn(1), 0.1)])
    [old] = await store.claim_jobs(10)  # the first wait's child runs on
    # The parent is cancelled (the running child only asked to stop), then retried by an
    # operator, and waits for a new child.
    assert await cancel(async_engine, parent.id) == "cancelled"
    assert await retry(async_engine, parent.id)
    assert tuple(await row(conn, parent.id))[:5] == ("ready", 0, None, 0, None)
    [again] = [j for j in await store.claim_jobs(10) if j.id == parent.id]
    await store.complete_executions([completions.wait_for_children(again, spawn(1), 0.1)])
    # The old child ends: it belongs to the cancelled wait, not to this one.
    await store.complete_executions([completions.succeeded(old, 1, 0.1)])
    r = await row(conn, parent.id)
    assert (r["status"], r["pending_children"]) == ("waiting", 1)
    [new] = await store.claim_jobs(10)
    await store.complete_executions([completions.succeeded(new, 2, 0.1)])
    r = await row(conn, parent.id)
    assert (r["status"], r["pending_children"], r["resumed"]) == ("ready", 0, "children")


async def test_a_retried_child_of_a_finished_wait_is_not_counted_by_the_next(
    conn: asyncpg.Connection, store: WorkerStore, async_engine: AsyncEngine
) -> None:
    parent = await claim_one(conn, store)
    await store.complete_executions([completions.wait_for_children(parent, spawn(1), 0.1)])
    [first] = await store.claim_jobs(10)
    await store.complete_executions([completions.succeeded(first, 1, 0.1)])
    [resumed] = [j for j in await store.claim_jobs(10) if j.id == parent.id]
    await store.complete_executions([completions.wait_for_children(resumed, spawn(1), 0.1)])
    # An operator retries the first wait's child while the parent waits for its second.
    assert await retry(async_engine, first.id)
    assert (await row(conn, parent.id))["pending_children"] == 1  # not counted again
    [rerun] = [j for j in await store.claim_jobs(10) if j.id == first.id]
    await store.complete_executions([completions.succeeded(rerun, 1, 0.1)])
    assert (await row(conn, parent.id))["status"] == "waiting"


async def test_a_cancelled_and_retried_lane_head_rejoins_its_lane_without_its_old_wait(
    conn: asyncpg.Connection, store: WorkerStore, async_engine: AsyncEngine
) -> None:
    insert = "INSERT INTO acta.job (kind, lane_key) VALUES ('p', 'L') RETURNING id"
    head_id = await conn.fetchval(insert)
    [head] = await store.claim_jobs(10)
    await store.complete_executions([completions.wait_for_signal(head, "go", 3600, 0.1)])
    second_id = await conn.fetchval(insert)
    assert await cancel(async_engine, head_id) == "cancelled"  # the lane moves on
    [second] = await store.claim_jobs(10)
    assert second.id == second_id
    # Retried while the lane is busy: it queues for its turn, with no wait of its own.
    assert await retry(async_engine, head_id)
    r = await row(conn, head_id)
    assert (r["status"], r["awaited_signal"], r["pending_children"]) == ("waiting", None, 0)
    # Neither a heartbeat's timeout wake (the retry made it due now: a stale wait would
    # look timed out) nor a signal of the old name makes it ready beside the lane's head.
    await store.heartbeat([(second.id, second.execution_id, True)])
    assert await signal(async_engine, head_id, "go") == "waiting"
    lane = await conn.fetch("SELECT status FROM acta.job WHERE lane_key = 'L' ORDER BY id")
    assert [r["status"] for r in lane] == ["waiting", "executing"]


@pytest.mark.parametrize("parks", ["retry", "signal wait", "bounce"])
async def test_a_cancel_racing_a_completion_that_keeps_the_job_alive_is_not_lost(
    conn: asyncpg.Connection, store: WorkerStore, async_engine: AsyncEngine, db: str, parks: str
) -> None:
    job = await claim_one(conn, store)
    err = completions.ErrorFields("E", "m", "")
    completion = {
        "retry": completions.failed(job, Policy(max_attempts=3), err, 0.1),
        "signal wait": completions.wait_for_signal(job, "go", None, 0.1),
        "bounce": completions.bounce(job, 2.0),
    }[parks]
    # The completion is written but not yet committed (the finalizer's statement in
    # flight, holding the row), when an operator cancels.
    writer = await asyncpg.connect(asyncpg_dsn(db))
    try:
        tx = writer.transaction()
        await tx.start()
        core, features = encode([completion])
        await writer.fetch(store.sql.complete_executions, core, store.worker_id, features)
        cancelling = asyncio.create_task(cancel(async_engine, job.id))
        await until_lock_waiters(conn)
        await tx.commit()
    finally:
        await writer.close()
    # The cancel saw the committed outcome (ready or waiting) and cancelled it.
    assert await cancelling == "cancelled"
    assert (await row(conn, job.id))["status"] == "cancelled"
