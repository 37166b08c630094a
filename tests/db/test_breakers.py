"""Circuit breakers against real PostgreSQL (migration 0016's ``admit`` and
``breaker_record``, through the worker's store): open at the threshold, refuse uncharged
while open, probes limited across racing sessions, close on a probe's success, open again
on its failure, a dead probe's place freed by its lease."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator

import asyncpg
import pytest

from acta_sqla.policy import Breaker, Policy, Rate
from acta_sqla.store import WorkerStore
from acta_sqla.values import ClaimedJob
from acta_sqla.worker import completions
from acta_sqla.worker.admission import request
from tests.db.conftest import new_store
from tests.waiting import until_lock_waiters

BREAKER = Breaker(failure_rate=0.5, min_calls=4, window=60, open_for=30, probes=1)


@pytest.fixture
async def stores(db: str) -> AsyncIterator[list[WorkerStore]]:
    made = [await new_store(db) for _ in range(2)]
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
    jobs = await store.claim_jobs(n)
    assert len(jobs) == n
    return jobs


def ask(job: ClaimedJob, policy: Policy) -> list[object]:
    r = request(job, policy, 2.0)
    assert r is not None
    return list(r)


def outcome(job: ClaimedJob, failed: bool, b: Breaker = BREAKER, key: str = "") -> list[object]:
    return [
        job.kind,
        key,
        job.id,
        job.execution_id,
        failed,
        b.failure_rate,
        b.min_calls,
        b.window,
        b.open_for,
    ]


async def state(conn: asyncpg.Connection, key: str = "") -> asyncpg.Record:
    return await conn.fetchrow(
        "SELECT state, extract(epoch FROM open_until - now()) AS until, probe_jobs "
        "FROM acta.breaker WHERE kind = 'k' AND key = $1",
        key,
    )


async def run_and_record(
    conn: asyncpg.Connection, store: WorkerStore, failures: list[bool], policy: Policy
) -> list[tuple[str, str, str, float | None]]:
    """Claim one job per outcome, admit them, and record their outcomes in one call."""
    jobs = await claim(conn, store, len(failures))
    verdicts = await store.admit([ask(j, policy) for j in jobs])
    assert {v[1] for v in verdicts} == {"admitted"}
    return await store.breaker_record([outcome(j, f) for j, f in zip(jobs, failures, strict=True)])


async def open_breaker(conn: asyncpg.Connection, store: WorkerStore, policy: Policy) -> None:
    transitions = await run_and_record(conn, store, [True] * 4, policy)
    assert [(t[0], t[1], t[2]) for t in transitions] == [("k", "", "open")]


async def half_open_now(conn: asyncpg.Connection) -> None:
    await conn.execute("UPDATE acta.breaker SET open_until = now() - interval '1 ms'")


POLICY = Policy(breaker=BREAKER)


async def test_it_opens_at_the_threshold_and_not_below_min_calls(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    store = stores[0]
    # Three failures: 100 % but under min_calls (4): closed.
    assert await run_and_record(conn, store, [True, True, True], POLICY) == []
    assert (await state(conn))["state"] == "closed"
    # Four calls, 75 %: opens, for open_for.
    [(kind, key, new, wait)] = await run_and_record(conn, store, [False], POLICY)
    assert (kind, key, new) == ("k", "", "open")
    assert wait is not None and 29 < wait <= 30
    row = await state(conn)
    assert row["state"] == "open" and 29 < row["until"] <= 30


async def test_a_rate_below_the_threshold_stays_closed(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    store = stores[0]
    assert await run_and_record(conn, store, [True, False, False, False, False], POLICY) == []
    assert (await state(conn))["state"] == "closed"
    # 2 of 6: 33 %, still closed; 3 of 6 more (5 of 12 = 42 %) still closed.
    assert await run_and_record(conn, store, [True], POLICY) == []
    assert await run_and_record(conn, store, [True, True, False, False, True, False], POLICY) == []
    # One more failure: 6 of 13 = 46 %; two more: 8 of 15 = 53 %: opens.
    assert await run_and_record(conn, store, [True], POLICY) == []
    assert [t[2] for t in await run_and_record(conn, store, [True, True], POLICY)] == ["open"]


async def test_while_open_jobs_bounce_uncharged_taking_no_slot_and_no_meter(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    store = stores[0]
    await open_breaker(conn, store, POLICY)
    keyed = Policy(concurrency_key="c", rate=Rate.parse("1/h"), breaker=BREAKER)
    [job] = await claim(conn, store, concurrency_key="c")
    [(job_id, verdict, wait)] = await store.admit([ask(job, keyed)])
    assert (job_id, verdict) == (job.id, "breaker") and 29 < wait <= 30
    assert await conn.fetchval("SELECT count(*) FROM acta.concurrency_slot") == 0
    assert await conn.fetchval("SELECT count(*) FROM acta.rate_meter WHERE next_at > now()") == 0
    assert await store.complete_executions([completions.bounce(job, wait)]) == {job.id}
    row = await conn.fetchrow(
        "SELECT status, attempts, last_error, extract(epoch FROM run_at - now()) AS due_in "
        "FROM acta.job WHERE id = $1",
        job.id,
    )
    assert row["status"] == "ready" and row["attempts"] == 0 and row["last_error"] is None
    assert 28 < row["due_in"] <= 30  # due when the breaker half-opens
    assert await conn.fetchval("SELECT count(*) FROM acta.attempt WHERE job_id = $1", job.id) == 0


async def test_a_kind_without_a_breaker_in_the_same_batch_is_not_held(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    store = stores[0]
    await open_breaker(conn, store, POLICY)
    [a, b] = await claim(conn, store, 2, concurrency_key="c")
    answers = await store.admit([ask(a, POLICY), ask(b, Policy(concurrency_key="c"))])
    assert [v[1] for v in answers] == ["breaker", "admitted"]


async def test_half_open_admits_at_most_probes_across_two_racing_sessions(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    a, b = stores
    await open_breaker(conn, a, POLICY)
    await half_open_now(conn)
    [ja] = await claim(conn, a)
    [jb] = await claim(conn, b)
    # Hold the breaker's lock so both calls wait on it, then let them go together.
    gate = await asyncpg.connect(a.dsn)
    tr = gate.transaction()
    await tr.start()
    await gate.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('acta.breaker' || chr(31) || 'default'"
        " || chr(31) || 'k' || chr(31) || '', 0))"
    )
    race = asyncio.gather(a.admit([ask(ja, POLICY)]), b.admit([ask(jb, POLICY)]))
    await until_lock_waiters(conn, waiters=2)
    await tr.rollback()
    await gate.close()
    [[(_, va, wa)], [(_, vb, wb)]] = await race
    assert sorted([va, vb]) == ["breaker", "half_open"]
    assert (wa if va == "breaker" else wb) == 2.0  # the bounce: the probe's outcome decides
    row = await state(conn)
    assert row["state"] == "half_open" and len(row["probe_jobs"]) == 1


async def test_probes_greater_than_one_admits_that_many_in_one_batch(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    store = stores[0]
    two = Policy(breaker=Breaker(failure_rate=0.5, min_calls=4, window=60, open_for=30, probes=2))
    await open_breaker(conn, store, two)
    await half_open_now(conn)
    jobs = await claim(conn, store, 3)
    assert [v[1] for v in await store.admit([ask(j, two) for j in jobs])] == [
        "half_open",
        "probe",
        "breaker",
    ]


async def test_a_probe_s_success_closes_it(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    store = stores[0]
    await open_breaker(conn, store, POLICY)
    [late] = await claim(conn, store)  # started before it opened? no: refused now
    await half_open_now(conn)
    [probe] = await claim(conn, store)
    assert (await store.admit([ask(probe, POLICY)]))[0][1] == "half_open"
    # An outcome of a job that is not the probe does not decide.
    assert await store.breaker_record([outcome(late, False)]) == []
    assert (await state(conn))["state"] == "half_open"
    [(_, _, new, _)] = await store.breaker_record([outcome(probe, False)])
    assert new == "closed"
    row = await state(conn)
    assert row["state"] == "closed" and row["probe_jobs"] == []
    [after] = await claim(conn, store)
    assert (await store.admit([ask(after, POLICY)]))[0][1] == "admitted"


async def test_a_probe_s_failure_opens_it_again(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    store = stores[0]
    await open_breaker(conn, store, POLICY)
    await half_open_now(conn)
    [probe] = await claim(conn, store)
    assert (await store.admit([ask(probe, POLICY)]))[0][1] == "half_open"
    [(_, _, new, wait)] = await store.breaker_record([outcome(probe, True)])
    assert new == "open" and wait is not None and 29 < wait <= 30
    [next_job] = await claim(conn, store)
    assert (await store.admit([ask(next_job, POLICY)]))[0][1] == "breaker"


async def test_a_dead_probe_frees_its_place_when_its_lease_runs_out(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    a, b = stores
    await open_breaker(conn, a, POLICY)
    await half_open_now(conn)
    [probe] = await claim(conn, a)
    assert (await a.admit([ask(probe, POLICY)]))[0][1] == "half_open"
    [other] = await claim(conn, b)
    assert (await b.admit([ask(other, POLICY)]))[0][1] == "breaker"
    # a's worker dies: its probe's lease runs out.
    await conn.execute(
        "UPDATE acta.job SET lease_expires_at = now() - interval '1 s' WHERE id = $1", probe.id
    )
    [again] = await claim(conn, b)
    assert (await b.admit([ask(again, POLICY)]))[0][1] == "probe"
    assert (await state(conn))["probe_jobs"] == [again.id]
    [(_, _, new, _)] = await b.breaker_record([outcome(again, False)])
    assert new == "closed"


async def test_a_breaker_per_concurrency_key_opens_for_that_key_only(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    store = stores[0]
    per_key = Breaker(failure_rate=0.5, min_calls=2, window=60, open_for=30, per="concurrency_key")
    policy = Policy(concurrency_limit=10, concurrency_key="{x}", breaker=per_key)
    down = await claim(conn, store, 2, concurrency_key="down")
    assert {v[1] for v in await store.admit([ask(j, policy) for j in down])} == {"admitted"}
    [(kind, key, new, _)] = await store.breaker_record(
        [outcome(j, True, per_key, "down") for j in down]
    )
    assert (kind, key, new) == ("k", "down", "open")
    [d] = await claim(conn, store, concurrency_key="down")
    [u] = await claim(conn, store, concurrency_key="up")
    assert [v[1] for v in await store.admit([ask(d, policy), ask(u, policy)])] == [
        "breaker",
        "admitted",
    ]


async def test_a_breaker_per_key_stores_a_kind_and_a_key_at_their_bounds(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    """A kind of 2,048 bytes and a rate key of 2,048 bytes (each at the one bound of
    names and keys) in one breaker row: the key is stored as its digest, so the row fits
    its primary key's index and admission answers (instead of refusing the request)."""
    store = stores[0]
    per_key = Breaker(min_calls=2, per="rate_key")
    policy = Policy(breaker=per_key)
    kind, key = secrets.token_hex(1024), secrets.token_hex(1024)  # incompressible
    await conn.execute("INSERT INTO acta.job (kind, rate_key) VALUES ($1, $2)", kind, key)
    [job] = await store.claim_jobs(1)
    assert (await store.admit([ask(job, policy)]))[0][1] == "admitted"
    stored = await conn.fetchval("SELECT key FROM acta.breaker WHERE kind = $1", kind)
    assert stored == per_key.key_of(kind, None, key) and stored.startswith("sha256:")


async def test_a_probe_that_ended_holds_its_place_until_its_outcome_is_counted(
    conn: asyncpg.Connection, stores: list[WorkerStore]
) -> None:
    """The probe's completion is written (the finalizer's batch) before its outcome is
    counted (``breaker_record``, the next call): meanwhile no second probe starts. Its place
    frees after the grace if the count never comes (its worker died in between)."""
    a, b = stores
    await open_breaker(conn, a, POLICY)
    await half_open_now(conn)
    [probe] = await claim(conn, a)
    assert (await a.admit([ask(probe, POLICY)]))[0][1] == "half_open"
    assert await a.complete_executions([completions.succeeded(probe, None, 0.01)]) == {probe.id}
    [other] = await claim(conn, b)
    assert (await b.admit([ask(other, POLICY)]))[0][1] == "breaker"
    # The count never comes: after the grace, the next job probes. (The attempt that ended
    # the job is kept on its row since migration 0015: its finish is the row's.)
    await conn.execute(
        "UPDATE acta.job SET finished_at = now() - interval '11 s' WHERE execution_id = $1",
        probe.execution_id,
    )
    [again] = await claim(conn, b)
    assert (await b.admit([ask(again, POLICY)]))[0][1] == "probe"
