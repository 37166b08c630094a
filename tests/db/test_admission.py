"""Admission against real PostgreSQL (migration 0006's ``admit``, through the worker's
store): concurrency slots and rate meters, fenced by (job, execution), racing sessions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest

from acta_sqla.policy import Policy, Rate
from acta_sqla.settings import Timings
from acta_sqla.store import WorkerStore
from acta_sqla.values import ClaimedJob
from acta_sqla.worker import completions
from acta_sqla.worker.admission import request
from tests.waiting import until_lock_waiters


async def new_store(db: str) -> WorkerStore:
    s = WorkerStore(db, "acta", "default", Timings.from_heartbeat(45.0))
    await s.register_worker("test-host", 1, 8, ["k"], "test")
    return s


@pytest.fixture
async def stores(db: str) -> AsyncIterator[list[WorkerStore]]:
    made = [await new_store(db) for _ in range(3)]
    try:
        yield made
    finally:
        for s in made:
            await s.close()


async def claim(
    conn: asyncpg.Connection, store: WorkerStore, n: int = 1, **cols: str
) -> list[ClaimedJob]:
    names = ", ".join(["kind", *cols])
    marks = ", ".join(f"${i + 1}" for i in range(len(cols) + 1))
    for _ in range(n):
        await conn.execute(f"INSERT INTO acta.job ({names}) VALUES ({marks})", "k", *cols.values())
    return await store.claim_jobs(n)


def ask(job: ClaimedJob, policy: Policy, bounce: float = 2.0) -> list[object]:
    r = request(job, policy, bounce)
    assert r is not None
    return list(r)


async def slots(conn: asyncpg.Connection) -> set[tuple[str, int]]:
    rows = await conn.fetch("SELECT key, job_id FROM acta.concurrency_slot")
    return {(r["key"], r["job_id"]) for r in rows}


async def test_slots_admit_up_to_the_limit_and_bounce_the_rest(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    store = stores[0]
    jobs = await claim(conn, store, 3, concurrency_key="c")
    policy = Policy(concurrency_key="c", concurrency_limit=2)
    answers = await store.admit([ask(j, policy) for j in jobs])
    assert [(a[0], a[1]) for a in answers] == [
        (jobs[0].id, "admitted"),
        (jobs[1].id, "admitted"),
        (jobs[2].id, "slot"),
    ]
    assert answers[2][2] == 2.0
    assert await slots(conn) == {("c", jobs[0].id), ("c", jobs[1].id)}


async def test_a_bounce_is_uncharged_due_again_later_and_frees_nothing_it_did_not_hold(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    store = stores[0]
    [holder, refused] = await claim(conn, store, 2, concurrency_key="c")
    policy = Policy(concurrency_key="c")
    await store.admit([ask(holder, policy), ask(refused, policy)])
    assert await store.complete_executions([completions.bounce(refused, 2.0)]) == {refused.id}
    row = await conn.fetchrow(
        "SELECT status, attempts, last_error, extract(epoch FROM run_at - now()) AS due_in "
        "FROM acta.job WHERE id = $1",
        refused.id,
    )
    assert row["status"] == "ready" and row["attempts"] == 0 and row["last_error"] is None
    assert 1.5 < row["due_in"] <= 2.0
    assert await conn.fetchval("SELECT count(*) FROM acta.attempt") == 0
    assert await slots(conn) == {("c", holder.id)}  # the holder keeps its slot


async def test_two_sessions_racing_for_the_last_slot_admit_exactly_one(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    a, b = stores[0], stores[1]
    policy = Policy(concurrency_key="race")
    for _ in range(10):
        [ja] = await claim(conn, a, concurrency_key="race")
        [jb] = await claim(conn, b, concurrency_key="race")
        # Hold the key's lock so both calls are waiting on it, then let them go together.
        gate = await asyncpg.connect(a.dsn)
        tr = gate.transaction()
        await tr.start()
        await gate.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended("
            "'acta.slot' || chr(31) || 'default' || chr(31) || 'race', 0))"
        )
        race = asyncio.gather(a.admit([ask(ja, policy)]), b.admit([ask(jb, policy)]))
        await until_lock_waiters(conn, waiters=2)
        await tr.rollback()
        await gate.close()
        [[(_, va, _)], [(_, vb, _)]] = await race
        assert sorted([va, vb]) == ["admitted", "slot"]
        assert len(await slots(conn)) == 1
        # End both attempts: the terminal-effects trigger frees the winner's slot.
        await a.complete_executions([completions.succeeded(ja, None, 0.0)])
        await b.complete_executions([completions.succeeded(jb, None, 0.0)])
        assert await slots(conn) == set()


async def test_a_slot_whose_holders_lease_ran_out_is_free_for_others(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    store = stores[0]
    policy = Policy(concurrency_key="c")
    [holder] = await claim(conn, store, concurrency_key="c")
    assert (await store.admit([ask(holder, policy)]))[0][1] == "admitted"
    [other] = await claim(conn, store, concurrency_key="c")
    assert (await store.admit([ask(other, policy)]))[0][1] == "slot"
    await conn.execute(
        "UPDATE acta.job SET lease_expires_at = now() - interval '1 s' WHERE id = $1", holder.id
    )
    assert (await store.admit([ask(other, policy)]))[0][1] == "admitted"


async def test_a_lower_limit_takes_effect_as_the_running_ones_finish(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    store = stores[0]
    running = await claim(conn, store, 3, concurrency_key="c")
    wide = Policy(concurrency_key="c", concurrency_limit=3)
    assert [a[1] for a in await store.admit([ask(j, wide) for j in running])] == ["admitted"] * 3
    narrow = Policy(concurrency_key="c", concurrency_limit=2)
    [late] = await claim(conn, store, concurrency_key="c")
    for finished in running[:2]:
        assert (await store.admit([ask(late, narrow)]))[0][1] == "slot"
        await store.complete_executions([completions.succeeded(finished, None, 0.0)])
    assert (await store.admit([ask(late, narrow)]))[0][1] == "admitted"


async def test_admission_is_fenced_by_the_execution(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    store = stores[0]
    [job] = await claim(conn, store, concurrency_key="c")
    stale = job._replace(execution_id=job.execution_id + 1)
    policy = Policy(concurrency_key="c", rate=Rate.parse("1/h"))
    assert (await store.admit([ask(stale, policy)]))[0][1] == "lost"
    assert await slots(conn) == set()
    assert await conn.fetchval("SELECT count(*) FROM acta.rate_meter") == 0
    assert (await store.admit([ask(job, policy)]))[0][1] == "admitted"


async def test_a_stale_request_beside_a_fresh_one_does_not_hide_its_job_s_live_slot(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    """X's lease ran out on this worker and another took it again and holds the key's only
    slot under its new execution. This worker's stale request for X (its old execution) goes
    out in one batch with Y of the same key: X answers lost and Y must bounce (admit()
    left every slot of a job in the batch out of the count, migration 0013: Y was admitted,
    two live holders for a limit of 1)."""
    store, other = stores[0], stores[1]
    policy = Policy(concurrency_key="c")
    [x] = await claim(conn, store, concurrency_key="c")
    retaken = x._replace(execution_id=x.execution_id + 1000)
    await conn.execute(
        "UPDATE acta.job SET execution_id = $2 WHERE id = $1", x.id, retaken.execution_id
    )
    assert (await other.admit([ask(retaken, policy)]))[0][1] == "admitted"
    [y] = await claim(conn, store, concurrency_key="c")

    answers = await store.admit([ask(x, policy), ask(y, policy)])

    assert [(a[0], a[1]) for a in answers] == [(x.id, "lost"), (y.id, "slot")]
    assert await slots(conn) == {("c", x.id)}


async def test_a_repeated_request_of_an_admitted_attempt_does_not_count_itself(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    """An admit call whose answer was lost is asked again: the attempt's own slot is not
    counted against it (limit 1, it holds the only slot)."""
    store = stores[0]
    policy = Policy(concurrency_key="c")
    [x] = await claim(conn, store, concurrency_key="c")
    assert (await store.admit([ask(x, policy)]))[0][1] == "admitted"
    [y] = await claim(conn, store, concurrency_key="c")

    answers = await store.admit([ask(x, policy), ask(y, policy)])

    assert [(a[0], a[1]) for a in answers] == [(x.id, "admitted"), (y.id, "slot")]
    assert await slots(conn) == {("c", x.id)}


@pytest.mark.parametrize("rate", ["2147483647/s", "1/36500d"])
async def test_the_widest_rates_a_kind_may_declare_are_counted_by_the_database(
    conn: asyncpg.Connection, stores: list[WorkerStore], rate: str
) -> None:
    """The bounds Rate checks (N an int4, a period of at most 100 years) are what admit()
    can count and step: beyond them its call failed for the whole batch."""
    store = stores[0]
    jobs = await claim(conn, store, 3)
    policy = Policy(rate=Rate.parse(rate))
    verdicts = [a[1] for a in await store.admit([ask(j, policy) for j in jobs])]
    assert verdicts[0] == "admitted"
    assert set(verdicts[1:]) <= {"admitted", "rate"}


async def test_a_job_refused_by_the_rate_takes_no_slot_and_bounces_to_the_meters_time(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    store = stores[0]
    policy = Policy(concurrency_key="c", concurrency_limit=5, rate=Rate.parse("2/min"))
    jobs = await claim(conn, store, 3, concurrency_key="c")
    answers = await store.admit([ask(j, policy) for j in jobs])
    assert [a[1] for a in answers] == ["admitted", "rate", "rate"]
    # GCRA without burst: one start per 30 s; the refused queue up behind each other.
    assert 29.0 < answers[1][2] <= 30.0
    assert 59.0 < answers[2][2] <= 60.0
    assert await slots(conn) == {("c", jobs[0].id)}


async def test_the_meter_under_concurrent_statements_keeps_the_bound(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    """Three sessions ask as fast as they can for 2 s. A test-only trigger logs each
    admission's own time (the meter's ``next_at`` moving, less one interval) in the
    database's clock, which admission reads: of any 11 admissions in a row, the first and
    the last are at least 1 s apart (a token bucket of 10 would admit 10 at once). The
    clients' own clocks are not used: a step of the wall clock would skew them."""
    policy = Policy(rate=Rate.parse("10/s"))
    await conn.execute("INSERT INTO acta.job (kind) SELECT 'k' FROM generate_series(1, 2000)")
    await conn.execute(
        """
        CREATE TABLE acta.test_admitted (at timestamptz NOT NULL);
        CREATE FUNCTION acta.test_log_admission() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO acta.test_admitted VALUES (NEW.next_at - interval '0.1 s');
            RETURN NEW;
        END $$;
        CREATE TRIGGER test_log_admission AFTER UPDATE ON acta.rate_meter FOR EACH ROW
            WHEN (NEW.next_at IS DISTINCT FROM OLD.next_at)
            EXECUTE FUNCTION acta.test_log_admission();
        """
    )
    admitted = refused = 0

    async def hammer(store: WorkerStore, stop: float) -> None:
        nonlocal admitted, refused
        while time.monotonic() < stop:
            jobs = await store.claim_jobs(4)
            answers = await store.admit([ask(j, policy) for j in jobs])
            for _, verdict, _ in answers:
                if verdict == "admitted":
                    admitted += 1
                else:
                    refused += 1
            await store.complete_executions([completions.bounce(j, 0.0) for j in jobs])

    start = time.monotonic()
    await asyncio.gather(*(hammer(s, start + 2.0) for s in stores))
    assert refused > 0  # the sessions really did ask faster than the rate
    assert 5 <= admitted <= 21, admitted
    times = [r["at"] for r in await conn.fetch("SELECT at FROM acta.test_admitted ORDER BY at")]
    assert len(times) == admitted  # every admission moved the meter, once
    for first, eleventh in zip(times, times[10:], strict=False):
        assert (eleventh - first).total_seconds() >= 1.0
