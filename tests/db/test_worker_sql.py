"""Each worker statement against a real PostgreSQL: claim, complete, heartbeat, recovery."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from acta_sqla.database import asyncpg_dsn
from acta_sqla.errors import StatementRefused
from acta_sqla.policy import Policy
from acta_sqla.queries import complete
from acta_sqla.settings import Timings
from acta_sqla.status import JobStatus
from acta_sqla.store import WorkerStore
from acta_sqla.values import Completion, ExpiredDecision, ExpiredLease, Outcome
from acta_sqla.worker import completions
from acta_sqla.worker.completions import handback
from acta_sqla.worker.finalizer import Finalizer
from acta_sqla.worker.inflight import Registry
from tests.db.conftest import new_store

TIMINGS = Timings.from_heartbeat(45.0)


async def insert(conn: asyncpg.Connection, n: int = 1, **cols: object) -> list[int]:
    cols.setdefault("kind", "k")
    names = ", ".join(cols)
    values = ", ".join(f"${i + 1}" for i in range(len(cols)))
    ids = []
    for _ in range(n):
        ids.append(
            await conn.fetchval(
                f"INSERT INTO acta.job ({names}) VALUES ({values}) RETURNING id", *cols.values()
            )
        )
    return ids


async def row(conn: asyncpg.Connection, job_id: int) -> asyncpg.Record:
    return await conn.fetchrow("SELECT * FROM acta.job WHERE id = $1", job_id)


async def test_claim_takes_due_rows_in_priority_run_at_id_order(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    late = await conn.fetchval(
        "INSERT INTO acta.job (kind, run_at) VALUES ('k', now() - interval '1 minute') RETURNING id"
    )
    early = await conn.fetchval(
        "INSERT INTO acta.job (kind, run_at) VALUES ('k', now() - interval '1 hour') RETURNING id"
    )
    urgent = (await insert(conn, priority=-5))[0]
    [future] = await insert(conn)
    await conn.execute(
        "UPDATE acta.job SET run_at = now() + interval '1 hour' WHERE id = $1", future
    )
    [other_ns] = await insert(conn, namespace="elsewhere")
    claimed = await store.claim_jobs(10)
    assert next(j.id for j in sorted(claimed, key=lambda j: (j.priority, j.id))) == urgent
    assert {j.id for j in claimed} == {urgent, early, late}
    assert future not in {j.id for j in claimed} and other_ns not in {j.id for j in claimed}
    # Order within one claim: ask for one at a time.
    await conn.execute("UPDATE acta.job SET status = 'ready', attempts = 0")
    order = []
    for _ in range(3):
        [one] = await store.claim_jobs(1)
        order.append(one.id)
    assert order == [urgent, early, late]


async def test_claim_moves_to_executing_counts_the_attempt_and_mints_an_execution(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    [job_id] = await insert(conn)
    [claimed] = await store.claim_jobs(5)
    r = await row(conn, job_id)
    assert r["status"] == "executing" and r["attempts"] == 1 == claimed.attempts
    assert r["execution_id"] == claimed.execution_id and r["worker_id"] == store.worker_id
    lease_left = await conn.fetchval(
        "SELECT extract(epoch FROM lease_expires_at - now()) FROM acta.job WHERE id = $1", job_id
    )
    assert 170 < lease_left <= 180
    assert await store.claim_jobs(5) == []


async def test_two_concurrent_claimers_never_take_the_same_row(
    db: str, conn: asyncpg.Connection
) -> None:
    await conn.execute("INSERT INTO acta.job (kind) SELECT 'k' FROM generate_series(1, 2000)")
    a, b = await new_store(db), await new_store(db)
    taken: dict[str, list[int]] = {"a": [], "b": []}

    async def claim_all(name: str, s: WorkerStore) -> None:
        while batch := await s.claim_jobs(16):
            taken[name] += [j.id for j in batch]

    try:
        await asyncio.gather(claim_all("a", a), claim_all("b", b))
    finally:
        await a.close()
        await b.close()
    assert not set(taken["a"]) & set(taken["b"])
    assert len(taken["a"]) + len(taken["b"]) == 2000
    assert taken["a"] and taken["b"]


def completion(job, outcome: Outcome, status: str, **kw: object) -> Completion:  # type: ignore[no-untyped-def]
    return Completion(
        job_id=job.id,
        execution_id=job.execution_id,
        outcome=outcome,
        status=status,
        attempt=job.attempts,
        **kw,  # type: ignore[arg-type]
    )


async def test_one_complete_executions_call_writes_every_shape(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    ids = await insert(conn, 5)
    jobs = {j.id: j for j in await store.claim_jobs(5)}
    ok, retry, dead, cancel, back = (jobs[i] for i in ids)
    batch = [
        completion(ok, Outcome.SUCCEEDED, "succeeded", result_json='{"a": 1}', ran_seconds=0.5),
        completion(
            retry,
            Outcome.FAILED,
            "ready",
            delay=30.0,
            error_type="E",
            error_message="m",
            traceback="tb",
            ran_seconds=0.1,
        ),
        completion(dead, Outcome.FAILED, "failed", error_type="E", error_message="spent"),
        completion(cancel, Outcome.CANCELLED, "cancelled", error_type="C", error_message="x"),
        handback(back, 1.0),
    ]
    applied = await store.complete_executions(batch)
    assert applied == set(ids)
    r = await row(conn, ok.id)
    assert (r["status"], json.loads(r["result"]), r["attempts"]) == ("succeeded", {"a": 1}, 1)
    assert r["finished_at"] is not None and r["lease_expires_at"] is None
    r = await row(conn, retry.id)
    assert r["status"] == "ready" and r["finished_at"] is None
    assert json.loads(r["last_error"]) == {"type": "E", "message": "m"}
    due_in = await conn.fetchval(
        "SELECT extract(epoch FROM run_at - now()) FROM acta.job WHERE id=$1", retry.id
    )
    assert 25 < due_in <= 30
    assert (await row(conn, dead.id))["status"] == "failed"
    assert (await row(conn, cancel.id))["status"] == "cancelled"
    r = await row(conn, back.id)
    assert (r["status"], r["attempts"]) == ("ready", 0)  # handed back uncharged
    history = {r["job_id"]: r for r in await conn.fetch("SELECT * FROM acta.attempt ORDER BY id")}
    assert set(history) == {ok.id, retry.id, dead.id, cancel.id}  # no row for the hand-back
    assert history[ok.id]["outcome"] == "succeeded" and history[ok.id]["attempt"] == 1
    assert history[ok.id]["id"] == ok.execution_id
    assert history[ok.id]["started_at"] < history[ok.id]["finished_at"]
    assert history[retry.id]["traceback"] == "tb"


async def test_the_input_part_reads_every_core_field_by_name(conn: asyncpg.Connection) -> None:
    """INPUT: each core field of Completion arrives in its own named, typed column."""
    full = Completion(
        job_id=1,
        execution_id=2,
        outcome=Outcome.RETRY,
        status=JobStatus.READY,
        attempt=3,
        delay=4.5,
        refund=True,
        result_json='{"r": 1}',
        error_type="T",
        error_message="M",
        traceback="TB",
        ran_seconds=0.25,
        record=False,
        cancel_wins=True,
        keep_last_error=True,
        ran_by=9,
        features={"ignored": "here"},
    )
    core, _ = complete.encode([full])
    [got] = await conn.fetch(f"WITH {complete.INPUT} SELECT * FROM c", core)
    assert tuple(got.values()) == tuple(full)[: len(complete.CORE)]
    assert list(got.keys()) == [name for name, _ in complete.CORE]


async def test_the_fenced_finish_lets_a_requested_cancel_win_over_a_return_to_ready_only(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    """FENCED FINISH: Python decides whether a cancel wins (cancel_wins); the statement
    applies it where the row's cancel_requested is set."""
    ids = await insert(conn, 4)
    jobs = {j.id: j for j in await store.claim_jobs(4)}
    retry, back, spent, ok = (jobs[i] for i in ids)
    await conn.execute("UPDATE acta.job SET cancel_requested = true")
    policy = Policy(max_attempts=1)
    err = completions.ErrorFields("E", "m", "")
    batch = [
        completions.failed(retry, Policy(max_attempts=5), err, 0.1),
        handback(back, 0.0),
        completions.failed(spent, policy, err, 0.1),
        completions.succeeded(ok, None, 0.1),
    ]
    assert {r for r in await store.complete_executions(batch)} == set(ids)
    got = {
        r["id"]: (r["status"], r["attempts"], r["finished_at"] is not None)
        for r in await conn.fetch("SELECT * FROM acta.job")
    }
    assert got == {
        retry.id: ("cancelled", 1, True),
        back.id: ("cancelled", 0, True),  # the hand-back's attempt is still given back
        spent.id: ("failed", 1, True),  # a terminal ending stands
        ok.id: ("succeeded", 1, True),
    }


async def test_the_history_part_writes_one_row_per_real_attempt_dated_by_its_run(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    """HISTORY: one Execution row per applied completion that is a real attempt, by the
    writing worker (or the one that ran it), dated from how long the handler ran."""
    ids = await insert(conn, 3)
    jobs = {j.id: j for j in await store.claim_jobs(3)}
    ran, unrun, back = (jobs[i] for i in ids)
    err = completions.ErrorFields("E", "m", "tb")
    batch = [
        completions.succeeded(ran, None, 60.0),
        completions.fail_now(unrun, err, None),
        handback(back, 0.0),
    ]
    await store.complete_executions(batch)
    rows = {
        r["job_id"]: r
        for r in await conn.fetch(
            "SELECT *, extract(epoch FROM finished_at - started_at) AS took FROM acta.attempt"
        )
    }
    assert set(rows) == {ran.id, unrun.id}
    assert 59 < rows[ran.id]["took"] <= 61 and rows[ran.id]["worker_id"] == store.worker_id
    assert rows[unrun.id]["started_at"] is None and rows[unrun.id]["outcome"] == "fail"
    assert rows[unrun.id]["error_type"] == "E" and rows[unrun.id]["traceback"] == "tb"


async def test_a_feature_part_gets_its_input_for_applied_rows_only(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    """FEATURES: a feature's input travels beside the core fields, keyed by job id, and its
    part sees it only for rows the fenced finish applied (a stale write's features do not
    act). The part here records its input as a named lock: a table it may write."""
    note = complete.FeaturePart(
        "note",
        lambda schema: (
            f"""
            INSERT INTO "{schema}".lock (namespace, name, job_id, execution_id,
                                         lease_expires_at)
            SELECT 'default', f.features->>'note', d.id, d.execution_id, now()
            FROM f JOIN done d ON d.id = f.job_id"""
        ),
    )
    sql = complete.compose("acta", features=[note])
    ids = await insert(conn, 3)
    jobs = {j.id: j for j in await store.claim_jobs(3)}
    noted, plain, stale = (jobs[i] for i in ids)
    batch = [
        completions.succeeded(noted, None, 0.1)._replace(features={"note": "a"}),
        completions.succeeded(plain, None, 0.1),
        completions.succeeded(stale, None, 0.1)._replace(
            execution_id=stale.execution_id + 1, features={"note": "stale"}
        ),
    ]
    core, features = complete.encode(batch)
    applied = await conn.fetch(sql, core, store.worker_id, features)
    assert {r["id"] for r in applied} == {noted.id, plain.id}
    locks = await conn.fetch("SELECT name, job_id FROM acta.lock")
    assert [tuple(r) for r in locks] == [("a", noted.id)]


async def test_completion_text_round_trips_and_a_poison_string_is_isolated(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    """Every text of a completion reaches the database as written (quotes, backslashes,
    newlines, non-ASCII), and a string the server cannot store (a lone surrogate) fails the
    statement as a data error: the finalizer writes the rest and records that job failed."""
    ids = await insert(conn, 3)
    jobs = {j.id: j for j in await store.claim_jobs(3)}
    ok, failing, poison = (jobs[i] for i in ids)
    message = 'naïve "quoted" \\ back\nslash ☃ 日本'
    result = json.dumps({"text": message, "n": 1.5})
    batch = [
        completion(ok, Outcome.SUCCEEDED, "succeeded", result_json=result, ran_seconds=0.1),
        completion(
            failing,
            Outcome.FAILED,
            "failed",
            error_type="pkg.E",
            error_message=message,
            traceback=message,
        ),
        completion(poison, Outcome.FAILED, "failed", error_type="E", error_message="a\ud800b"),
    ]
    with pytest.raises(StatementRefused) as refused:
        await store.complete_executions([batch[2]])
    assert refused.value.sqlstate.startswith("22") and refused.value.data_unwritable
    assert await conn.fetchval("SELECT count(*) FROM acta.attempt") == 0

    finalizer = Finalizer(store, Registry(), asyncio.Queue())
    assert await finalizer.write(batch) == set(ids)
    r = await row(conn, ok.id)
    assert json.loads(r["result"]) == {"text": message, "n": 1.5}
    r = await row(conn, failing.id)
    assert json.loads(r["last_error"]) == {"type": "pkg.E", "message": message}
    tb = await conn.fetchval("SELECT traceback FROM acta.attempt WHERE job_id = $1", failing.id)
    assert tb == message
    r = await row(conn, poison.id)
    assert r["status"] == "failed"
    assert json.loads(r["last_error"])["type"] == "acta.CompletionRefused"


async def test_a_repeated_completion_changes_nothing(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    [job_id] = await insert(conn)
    [job] = await store.claim_jobs(1)
    first = completion(job, Outcome.SUCCEEDED, "succeeded", result_json="1")
    assert await store.complete_executions([first]) == {job_id}
    before = await row(conn, job_id)
    again = completion(job, Outcome.FAILED, "ready", error_type="late", error_message="late")
    assert await store.complete_executions([first, again]) == set()
    after = await row(conn, job_id)
    assert dict(after) == dict(before)
    assert await conn.fetchval("SELECT count(*) FROM acta.attempt") == 1


@pytest.mark.parametrize("plan_mode", ["force_custom_plan", "force_generic_plan"])
async def test_claim_completion_and_heartbeat_look_rows_up_by_primary_key(
    conn: asyncpg.Connection, store: WorkerStore, plan_mode: str
) -> None:
    """The statements that fence rows by status find them by primary key: the planner,
    expecting few executing rows from stale statistics, must never scan and hash the whole
    executing set (whose dead index entries grow with a drain) instead."""
    await conn.execute(
        "INSERT INTO acta.job (namespace, kind) "
        "SELECT 'default', 'k' FROM generate_series(1, 20000)"
    )
    await conn.execute("ANALYZE acta.job")  # statistics: every row ready
    jobs = await store.claim_jobs(200)
    batch = [completion(j, Outcome.SUCCEEDED, "succeeded") for j in jobs[:128]]
    await conn.execute(f"SET plan_cache_mode = {plan_mode}")
    plans = {}
    for name, sql, args in [
        ("claim", store.sql.claim_jobs, ("default", 64, store.worker_id, 180.0, False)),
        ("claim_plain", store.sql.claim_plain, ("default", 64, store.worker_id, 180.0)),
        ("claim_lean", store.sql.claim_plain_lean, ("default", 64, store.worker_id, 180.0)),
        (
            "complete",
            store.sql.complete_executions,
            (complete.encode(batch)[0], store.worker_id, "{}"),
        ),
        (
            "complete_plain",
            store.sql.complete_plain,
            (complete.encode(batch)[0], store.worker_id, "{}"),
        ),
        # Recovery's finish is the same parts under one more guard: by primary key too.
        (
            "finish_expired",
            store.sql.finish_expired,
            (complete.encode(batch)[0], None, "{}", [batch[0].job_id]),
        ),
        (
            "heartbeat",
            store.sql.heartbeat,
            (
                "default",
                [j.id for j in jobs],
                [j.execution_id for j in jobs],
                [True] * len(jobs),
                180.0,
                store.worker_id,
                180.0,
                [],
                [],
                [],
                4.0,
            ),
        ),
    ]:
        await conn.execute(f"PREPARE q_{name} AS {sql}")
        types = await conn.fetchval(
            "SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = $1",
            f"q_{name}",
        )
        literals = [
            await conn.fetchval(f"SELECT quote_nullable($1::{t}::text) || '::{t}'", arg)
            for t, arg in zip(types, args, strict=True)
        ]
        explained = await conn.fetch(f"EXPLAIN EXECUTE q_{name}({', '.join(literals)})")
        plans[name] = "\n".join(r[0] for r in explained)
    for name, plan in plans.items():
        assert "job_pkey" in plan, f"{name}:\n{plan}"
        assert "job_lease_idx" not in plan, f"{name}:\n{plan}"
        assert "Seq Scan on job" not in plan, f"{name}:\n{plan}"
    assert "job_claim_idx" in plans["claim"], plans["claim"]
    # The suspect probe reads its own (empty) partial index, never the claim's.
    assert "job_suspect_idx" in plans["claim"], plans["claim"]
    assert "job_claim_idx" in plans["claim_plain"], plans["claim_plain"]
    assert "job_claim_idx" in plans["claim_lean"], plans["claim_lean"]


async def test_the_lean_claim_and_the_plain_completion_differ_only_in_what_they_skip(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    """A worker with no OpenTelemetry SDK claims with ``claim_plain_lean`` (no trace
    context, no server-computed wait), and a batch with no feature input completes with
    ``complete_plain`` (no feature parts): the same rows, the same writes."""
    traced = '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
    await insert(conn, 2, trace_context=traced)
    store.telemetry = True
    [full] = await store.claim_plain(1)
    store.telemetry = False
    [lean] = await store.claim_plain(1)
    assert full.trace_context == traced and full.waited is not None and full.waited >= 0
    assert lean.trace_context is None and lean.waited is None
    same = ("kind", "args_json", "attempts", "max_attempts", "priority", "schedule_name")
    assert [getattr(lean, f) for f in same] == [getattr(full, f) for f in same]
    # Both completions carry no feature: the plain statement writes them.
    applied = await store.complete_executions(
        [completion(j, Outcome.SUCCEEDED, "succeeded", result_json="1") for j in (full, lean)]
    )
    assert applied == {full.id, lean.id}
    assert await conn.fetch("SELECT status, result::text FROM acta.job ORDER BY id") == [
        ("succeeded", "1"),
        ("succeeded", "1"),
    ]
    assert await conn.fetchval("SELECT count(*) FROM acta.attempt") == 2
    # The same batch again: fenced out by either statement.
    assert (
        await store.complete_executions([completion(full, Outcome.SUCCEEDED, "succeeded")]) == set()
    )


async def test_a_stale_execution_is_fenced_out(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    [job_id] = await insert(conn)
    [old] = await store.claim_jobs(1)
    # Recovery hands the row to another attempt.
    await conn.execute("UPDATE acta.job SET status = 'ready' WHERE id = $1", job_id)
    [new] = await store.claim_jobs(1)
    assert new.execution_id != old.execution_id
    stale = completion(old, Outcome.SUCCEEDED, "succeeded")
    assert await store.complete_executions([stale]) == set()
    assert (await row(conn, job_id))["status"] == "executing"


async def test_heartbeat_renews_skips_locked_rows_and_reports_lost_ones(
    db: str, conn: asyncpg.Connection, store: WorkerStore
) -> None:
    await insert(conn, 3)
    a, b, c = sorted(await store.claim_jobs(3), key=lambda j: j.id)
    await conn.execute("UPDATE acta.job SET lease_expires_at = now() + interval '1 second'")
    await conn.execute("UPDATE acta.job SET status = 'ready' WHERE id = $1", c.id)  # lost
    locker = await asyncpg.connect(asyncpg_dsn(db))
    try:
        tx = locker.transaction()
        await tx.start()
        await locker.execute("SELECT 1 FROM acta.job WHERE id = $1 FOR UPDATE", b.id)
        report = await asyncio.wait_for(
            store.heartbeat(
                [
                    (a.id, a.execution_id, True),
                    (b.id, b.execution_id, False),
                    (c.id, c.execution_id, False),
                ]
            ),
            timeout=10,
        )
        await tx.rollback()
    finally:
        await locker.close()
    assert report.renewed == {(a.id, a.execution_id)}
    assert report.busy == {(b.id, b.execution_id)}
    r = await row(conn, a.id)
    assert r["started_at"] is not None
    left = await conn.fetchval(
        "SELECT extract(epoch FROM lease_expires_at - now()) FROM acta.job WHERE id=$1", a.id
    )
    assert left > 170
    assert report.recovery_due is True  # the namespace's first pass is due at once
    again = await store.heartbeat([])
    assert again.recovery_due is False  # moved one lease on by the first beat


def recover_20(lost: ExpiredLease) -> ExpiredDecision:
    """Recovery's decision with a default budget of 20."""
    return completions.lease_expired(lost, 20)


async def test_recovery_returns_expired_rows_charging_only_started_attempts(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    await insert(conn, 3, max_attempts=2)
    started, unstarted, spent = sorted(await store.claim_jobs(3), key=lambda j: j.id)
    await conn.execute(
        "UPDATE acta.job SET started_at = now() WHERE id = ANY($1)", [started.id, spent.id]
    )
    await conn.execute("UPDATE acta.job SET attempts = 2 WHERE id = $1", spent.id)
    # The real 180 s lease, backdated instead of waited for.
    await conn.execute("UPDATE acta.job SET lease_expires_at = now() - interval '1 second'")
    rows = await store.recover_expired(100, recover_20)
    assert {r[0]: (r[1], r[2]) for r in rows} == {
        started.id: ("ready", True),
        unstarted.id: ("ready", False),
        spent.id: ("failed", True),
    }
    assert (await row(conn, started.id))["attempts"] == 1
    assert (await row(conn, unstarted.id))["attempts"] == 0
    r = await row(conn, spent.id)
    assert r["finished_at"] is not None and "budget spent" in json.loads(r["last_error"])["message"]
    # The stale worker's completion is fenced out.
    assert (
        await store.complete_executions([completion(started, Outcome.SUCCEEDED, "succeeded")])
        == set()
    )
    # The unstarted loss made the job a suspect (never charged, however often that
    # happens among others); the started one, lost for the first time, did not.
    assert (await row(conn, unstarted.id))["suspect"] is True
    assert (await row(conn, started.id))["suspect"] is False


async def test_recovery_marks_silent_workers_dead_and_frees_their_locks(
    db: str, conn: asyncpg.Connection, store: WorkerStore
) -> None:
    other = await new_store(db)
    try:
        await conn.execute(
            "UPDATE acta.worker SET heartbeat_at = now() - interval '10 minutes' WHERE id = $1",
            other.worker_id,
        )
        await conn.execute(
            "INSERT INTO acta.lock (namespace, name, job_id, execution_id, worker_id, "
            "lease_expires_at) VALUES ('default', 'l', 1, 1, $1, now() + interval '1 hour')",
            other.worker_id,
        )
        assert await store.mark_dead_workers() == [other.worker_id]
        assert (
            await conn.fetchval("SELECT status FROM acta.worker WHERE id = $1", other.worker_id)
            == "dead"
        )
        assert await conn.fetchval("SELECT count(*) FROM acta.lock") == 0
    finally:
        await other.close()


async def test_prune_deletes_finished_jobs_past_retention_in_bounded_chunks(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    await conn.execute(
        "INSERT INTO acta.job (kind, status, finished_at) SELECT 'k', 'succeeded', "
        "now() - interval '8 days' FROM generate_series(1, 25)"
    )
    await insert(conn, 2, status="succeeded")  # finished just now: kept
    await insert(conn, 1)  # ready: kept
    assert await store.prune_finished(10, 7 * 24 * 3600.0) == 10
    assert await store.prune_finished(100, 7 * 24 * 3600.0) == 15
    assert await conn.fetchval("SELECT count(*) FROM acta.job") == 3


async def test_one_role_connection_serves_concurrent_callers(store: WorkerStore) -> None:
    # Recovery and a definitions reload may share the admin connection at the same time.
    results = await asyncio.gather(
        *(store.admin_conn.fetch("SELECT pg_sleep(0.01), $1::int", i) for i in range(5))
    )
    assert [r[0][1] for r in results] == list(range(5))


async def test_named_locks_are_exclusive_fenced_and_expire_with_their_lease(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    await insert(conn, 2)
    a, b = sorted(await store.claim_jobs(2), key=lambda j: j.id)
    assert await store.take_lock("acct:1", a.id, a.execution_id)
    assert not await store.take_lock("acct:1", b.id, b.execution_id)
    assert await store.take_lock("acct:1", a.id, a.execution_id)  # its own hold
    await store.release_lock("acct:1", b.id, b.execution_id)  # not b's: changes nothing
    assert not await store.take_lock("acct:1", b.id, b.execution_id)
    await store.release_lock("acct:1", a.id, a.execution_id)
    assert await store.take_lock("acct:1", b.id, b.execution_id)
    # The heartbeat renews b's hold; a's claim on it is no longer answered.
    report = await store.heartbeat(
        [(b.id, b.execution_id, True)],
        [("acct:1", b.id, b.execution_id), ("acct:1", a.id, a.execution_id)],
    )
    assert report.locks_renewed == {("acct:1", b.id, b.execution_id)}
    # A hold whose lease ran out (its worker died) is free for the taking.
    await conn.execute("UPDATE acta.lock SET lease_expires_at = now() - interval '1 second'")
    assert await store.take_lock("acct:1", a.id, a.execution_id)
    assert await conn.fetchval("SELECT job_id FROM acta.lock WHERE name = 'acct:1'") == a.id


async def test_a_worker_is_dead_after_seven_of_its_own_beats_whoever_recovers(
    db: str, conn: asyncpg.Connection
) -> None:
    fast = WorkerStore(db, "acta", "default", Timings.from_heartbeat(0.5))
    slow = await new_store(db)  # 45 s beats
    try:
        await fast.register_worker("h", 1, 8, [], "t")
        await conn.execute(
            "UPDATE acta.worker SET heartbeat_at = now() - interval '30 seconds' WHERE id = $1",
            slow.worker_id,
        )
        # 30 s is 60 of the fast worker's beats but not 7 of the slow one's.
        assert await fast.mark_dead_workers() == []
        await conn.execute(
            "UPDATE acta.worker SET heartbeat_at = now() - interval '316 seconds' WHERE id = $1",
            slow.worker_id,
        )
        assert await fast.mark_dead_workers() == [slow.worker_id]
    finally:
        await fast.close()
        await slow.close()


async def test_recovery_leaves_a_row_renewed_since_it_was_read(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    """Recovery's finish is guarded by the lease still expired: a row whose worker renewed
    it between the read and the finish (it was only slow) is left alone."""
    [job_id] = await insert(conn)
    [job] = await store.claim_jobs(1)
    await conn.execute("UPDATE acta.job SET lease_expires_at = now() - interval '1 second'")
    found = await store.admin_conn.fetch(store.sql.select_expired, "default", 10)
    batch = [recover_20(ExpiredLease._make(r)).completion for r in found]
    assert [c.job_id for c in batch] == [job_id]
    await store.heartbeat([(job.id, job.execution_id, True)])  # the renewal
    core, features = complete.encode(batch)
    assert (
        await store.admin_conn.fetch(store.sql.finish_expired, core, None, features, [job_id]) == []
    )
    r = await row(conn, job_id)
    assert (r["status"], r["attempts"]) == ("executing", 1)
    # Nor is it made a suspect mid-attempt: the flag would read as "claimed alone".
    assert r["suspect"] is False
    assert await conn.fetchval("SELECT count(*) FROM acta.attempt") == 0


async def test_recovery_ends_a_cancel_requested_row_cancelled_and_records_the_loss(
    db: str, conn: asyncpg.Connection, store: WorkerStore
) -> None:
    other = await new_store(db)
    try:
        await insert(conn, 2, max_attempts=1)
        started, unstarted = sorted(await other.claim_jobs(2), key=lambda j: j.id)
    finally:
        await other.close()
    await conn.execute(
        "UPDATE acta.job SET started_at = now() - interval '5 seconds' WHERE id = $1", started.id
    )
    await conn.execute(
        "UPDATE acta.job SET cancel_requested = true, "
        "lease_expires_at = now() - interval '1 second'"
    )
    rows = await store.recover_expired(100, recover_20)
    assert sorted(rows) == [(started.id, "cancelled", True), (unstarted.id, "cancelled", False)]
    assert (await row(conn, unstarted.id))["attempts"] == 0
    history = {r["job_id"]: r for r in await conn.fetch("SELECT * FROM acta.attempt ORDER BY id")}
    assert {h["outcome"] for h in history.values()} == {"lost"}
    # The loss is the lost worker's attempt, dated from the row's own start.
    assert {h["worker_id"] for h in history.values()} == {other.worker_id}
    assert history[started.id]["started_at"] is not None
    assert history[unstarted.id]["started_at"] is None
    assert history[started.id]["error_type"] == "acta.LeaseExpired"
    assert (await row(conn, started.id))["finished_at"] is not None


# ------------------------------------------------------------------ suspects run alone


async def lose(conn: asyncpg.Connection, *ids: int) -> None:
    """The lease of ``ids`` ran out (backdated instead of waited for)."""
    await conn.execute(
        "UPDATE acta.job SET lease_expires_at = now() - interval '1 second' WHERE id = ANY($1)",
        list(ids),
    )


async def test_the_plain_claim_never_takes_a_suspect(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    plain = await insert(conn, 3)
    [suspect] = await insert(conn, suspect=True)
    jobs = await store.claim_plain(10)
    assert sorted(j.id for j in jobs) == plain and not any(j.alone for j in jobs)
    assert (await row(conn, suspect))["status"] == "ready"
    assert await store.claim_plain(10) == []


async def test_the_claim_never_puts_a_suspect_in_a_batch_with_others(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    plain = await insert(conn, 5)
    [suspect] = await insert(conn, suspect=True)
    [later] = await insert(conn, suspect=True)
    await conn.execute(
        "UPDATE acta.job SET run_at = now() + interval '1 hour' WHERE id = $1", later
    )
    # A worker with work in flight takes nothing while a suspect is due: it must drain.
    held = await store.claim(10, alone=False)
    assert held.jobs == [] and held.suspect_due
    assert await conn.fetchval("SELECT count(*) FROM acta.job WHERE status = 'executing'") == 0
    # A worker with nothing in flight takes the suspect, and only it.
    alone = await store.claim(10, alone=True)
    assert [(j.id, j.alone) for j in alone.jobs] == [(suspect, True)] and alone.suspect_due
    # A suspect not yet due holds nothing back; plain rows are never claimed "alone".
    rest = await store.claim(10, alone=True)
    assert sorted(j.id for j in rest.jobs) == plain and not rest.suspect_due
    assert not any(j.alone for j in rest.jobs)
    assert (await row(conn, later))["status"] == "ready"
    # A claim of nothing (the stage connection's prepare) takes no suspect either.
    await conn.execute("UPDATE acta.job SET run_at = now() WHERE id = $1", later)
    assert (await store.claim(0, alone=True)).jobs == []


async def test_recovery_charges_only_what_it_must_and_the_culprit_names_itself(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    """A worker dies with a batch it had not yet reported started: none of it is charged,
    all of it becomes suspect; each suspect then runs alone, and the one that dies alone is
    charged until its budget is spent, saying so."""
    batch = await insert(conn, 3, max_attempts=2)
    claimed = await store.claim_jobs(3)
    assert sorted(j.id for j in claimed) == batch
    await lose(conn, *batch)
    rows = await store.recover_expired(100, recover_20)
    assert sorted(rows) == [(j, "ready", False) for j in batch]
    r = await conn.fetch(
        "SELECT attempts, suspect FROM acta.job WHERE id = ANY($1) ORDER BY id", batch
    )
    assert [tuple(x) for x in r] == [(0, True)] * 3
    # The innocent ones run alone and succeed; the culprit dies alone, twice.
    culprit = batch[1]
    for _ in range(3):
        [one] = (await store.claim(10, alone=True)).jobs
        assert one.alone
        if one.id != culprit:
            done = completions.succeeded(one, None, 0.01)
            assert await store.complete_executions([done]) == {one.id}
        else:
            await lose(conn, one.id)
            assert await store.recover_expired(100, recover_20) == [(culprit, "ready", True)]
    [one] = (await store.claim(10, alone=True)).jobs
    assert one.id == culprit
    await lose(conn, culprit)
    assert await store.recover_expired(100, recover_20) == [(culprit, "failed", True)]
    r = await row(conn, culprit)
    message = json.loads(r["last_error"])["message"]
    assert "alone" in message and message.endswith("attempt 2 of 2, failure budget spent")
    statuses = dict(await conn.fetch("SELECT id, status FROM acta.job WHERE id = ANY($1)", batch))
    assert statuses == {batch[0]: "succeeded", culprit: "failed", batch[2]: "succeeded"}
    history = await conn.fetch(
        "SELECT job_id, outcome, error_message FROM acta.attempt ORDER BY finished_at, id"
    )
    lost_innocent = [h for h in history if h["job_id"] != culprit and h["outcome"] == "lost"]
    assert len(lost_innocent) == 2
    assert all("not charged" in h["error_message"] for h in lost_innocent)
