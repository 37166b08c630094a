"""Schedules in the database: storing them, the first fire, a fire's completion enqueuing
its successor in the same batch, once (I10), and two workers racing at start-up."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import asyncpg

from acta_sqla import Acta, Context, schedules
from acta_sqla.policy import Policy
from acta_sqla.queries import schedules as q
from acta_sqla.schedules import Schedule, successor_feature
from acta_sqla.store import WorkerStore
from acta_sqla.values import ClaimedJob
from acta_sqla.worker import completions
from acta_sqla.worker.fires import ensure_fires
from tests.db.conftest import new_store

APP = Acta()


@APP.job()
async def tick(ctx: Context, label: str = "x") -> None: ...


MINUTELY = APP.schedule("minutely", "* * * * *", tick, args={"label": "m"})
SCHEDULES = {"minutely": MINUTELY}


async def fires(conn: asyncpg.Connection) -> list[tuple[str, datetime, str]]:
    rows = await conn.fetch(
        "SELECT schedule_name, scheduled_at, status FROM acta.job "
        "WHERE schedule_name IS NOT NULL ORDER BY scheduled_at"
    )
    return [(r[0], r[1], r[2]) for r in rows]


async def claim_fire(conn: asyncpg.Connection, store: WorkerStore) -> ClaimedJob:
    # Make the pending fire due now, then claim it.
    await conn.execute(
        "UPDATE acta.job SET run_at = now() WHERE schedule_name IS NOT NULL AND status = 'ready'"
    )
    [job] = await store.claim_jobs(10)
    return job


def chained(job: ClaimedJob, completion: completions.Completion) -> completions.Completion:
    assert job.scheduled_at is not None
    feature = successor_feature(MINUTELY, "default", job.scheduled_at, datetime.now(UTC))
    return completion._replace(features={"next": feature})


async def test_start_up_stores_the_schedule_and_enqueues_its_next_tick(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    assert await store.store_schedules([MINUTELY]) == []
    [(name, at)] = await ensure_fires(store, SCHEDULES)
    assert name == "minutely" and at.second == 0 and at > datetime.now(UTC)
    row = await conn.fetchrow(
        "SELECT kind, args::text, run_at = scheduled_at AS due_at_tick FROM acta.job"
    )
    assert (row["kind"], row["args"], row["due_at_tick"]) == ("tick", '{"label": "m"}', True)
    # A second ensure finds the pending fire: nothing more.
    assert await ensure_fires(store, SCHEDULES) == []


async def test_a_fire_and_its_successor_commit_in_one_batch_once(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    await store.store_schedules([MINUTELY])
    await ensure_fires(store, SCHEDULES)
    fire = await claim_fire(conn, store)
    assert fire.schedule_name == "minutely" and fire.scheduled_at is not None
    await conn.execute("INSERT INTO acta.job (kind) VALUES ('other')")
    other = next(j for j in await store.claim_jobs(10) if j.kind == "other")
    err = completions.ErrorFields("E", "m", "")
    # A retry of the fire, in a batch with a plain completion: the successor comes with it.
    retry = chained(fire, completions.failed(fire, Policy(max_attempts=3), err, 0.1))
    assert await store.complete_executions([retry, completions.succeeded(other, None, 0.1)]) == {
        fire.id,
        other.id,
    }
    after = await fires(conn)
    assert [(n, s) for n, _, s in after] == [("minutely", "ready"), ("minutely", "ready")]
    assert after[1][1] - after[0][1] == timedelta(minutes=1)
    # The same completion again (a repeat) is fenced out; the retried fire's next
    # completion, a success, finds the successor there and enqueues no other.
    assert await store.complete_executions([retry]) == set()
    again = [j for j in await store.claim_jobs(10) if j.id == fire.id]
    if not again:  # its retry is not due yet: make it due
        await conn.execute("UPDATE acta.job SET run_at = now() WHERE id = $1", fire.id)
        again = [j for j in await store.claim_jobs(10) if j.id == fire.id]
    [second] = again
    await store.complete_executions([chained(second, completions.succeeded(second, None, 0.1))])
    assert [s for _, _, s in await fires(conn)] == ["succeeded", "ready"]


async def test_a_failed_fire_still_schedules_the_next_tick(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    await store.store_schedules([MINUTELY])
    await ensure_fires(store, SCHEDULES)
    fire = await claim_fire(conn, store)
    err = completions.ErrorFields("E", "m", "")
    await store.complete_executions([chained(fire, completions.fail_now(fire, err, 0.1))])
    assert [s for _, _, s in await fires(conn)] == ["failed", "ready"]


async def test_a_paused_or_dropped_schedule_gets_no_successor(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    await store.store_schedules([MINUTELY])
    await ensure_fires(store, SCHEDULES)
    fire = await claim_fire(conn, store)
    await conn.execute("UPDATE acta.schedule SET enabled = false")
    await store.complete_executions([chained(fire, completions.succeeded(fire, None, 0.1))])
    assert [s for _, _, s in await fires(conn)] == ["succeeded"]
    assert await ensure_fires(store, SCHEDULES) == []  # paused: nothing
    # Code that no longer declares it drops it, cancelling a pending fire.
    await conn.execute("UPDATE acta.schedule SET enabled = true")
    await ensure_fires(store, SCHEDULES)
    assert await store.store_schedules([]) == ["minutely"]
    assert [s for _, _, s in await fires(conn)] == ["succeeded", "cancelled"]


async def test_two_workers_starting_at_once_enqueue_one_fire(
    db: str, conn: asyncpg.Connection
) -> None:
    stores = [await new_store(db), await new_store(db)]
    try:
        await asyncio.gather(*(s.store_schedules([MINUTELY]) for s in stores))
        for _ in range(5):
            await asyncio.gather(*(ensure_fires(s, SCHEDULES) for s in stores))
        assert len(await fires(conn)) == 1
        assert await conn.fetchval("SELECT count(*) FROM acta.schedule") == 1
    finally:
        for s in stores:
            await s.close()


KEYED = Acta(namespace="keyed")


@KEYED.job(
    priority=-3,
    lane="lane:{region}",
    concurrency_key="region:{region}",
    concurrency_limit=2,
    rate="50/s",
    rate_key="rate:{region}",
    unique_key="u:{region}",
)
async def keyed_report(ctx: Context, region: str) -> None: ...


KEYED_SCHEDULE = KEYED.schedule("reports", "* * * * *", keyed_report, args={"region": "eu"})
FIRE_FIELDS = "priority, lane_key, concurrency_key, rate_key, unique_key"
AS_HANDLER_JOB = (-3, "lane:eu", "region:eu", "rate:eu", None)
"""What ``keyed_report.job(region="eu")`` gives a job, less the unique key (a fire's
uniqueness is its tick)."""


async def test_every_fire_takes_the_kinds_priority_and_keys(
    db: str, conn: asyncpg.Connection
) -> None:
    made = keyed_report.job(region="eu")
    assert (made.priority, made.lane_key, made.concurrency_key, made.rate_key) == (
        AS_HANDLER_JOB[:4]
    )
    store = await new_store(db, "keyed")
    try:
        await store.store_schedules([KEYED_SCHEDULE])
        # The worker's start-up (and every recovery pass): the first fire.
        await ensure_fires(store, {"reports": KEYED_SCHEDULE})
        rows = await conn.fetch(f"SELECT {FIRE_FIELDS} FROM acta.job")
        assert [tuple(r) for r in rows] == [AS_HANDLER_JOB]
        # The fire's completion: its successor.
        await conn.execute("UPDATE acta.job SET run_at = now()")
        [fire] = await store.claim_jobs(10)
        assert (fire.priority, fire.lane_key, fire.concurrency_key, fire.rate_key) == (
            AS_HANDLER_JOB[:4]
        )
        feature = successor_feature(KEYED_SCHEDULE, "keyed", fire.scheduled_at, datetime.now(UTC))
        done = completions.succeeded(fire, None, 0.1)._replace(features={"next": feature})
        await store.complete_executions([done])
        rows = await conn.fetch(f"SELECT {FIRE_FIELDS}, status FROM acta.job ORDER BY id")
        assert [tuple(r) for r in rows] == [
            (*AS_HANDLER_JOB, "succeeded"),
            (*AS_HANDLER_JOB, "ready"),
        ]
    finally:
        await store.close()
    # The operator's side, without the code: `acta schedules run` and `resume`.
    schema = "acta"
    [(extra,)] = await conn.fetch(q.run_schedule_now(schema), "keyed", "reports")
    row = await conn.fetchrow(f"SELECT {FIRE_FIELDS} FROM acta.job WHERE id = $1", extra)
    assert tuple(row) == AS_HANDLER_JOB
    await conn.execute("DELETE FROM acta.job")
    await conn.execute("UPDATE acta.schedule SET enabled = false")
    tick = await schedules.resume(conn, schema, "keyed", "reports")
    rows = await conn.fetch(f"SELECT {FIRE_FIELDS}, scheduled_at FROM acta.job")
    assert [tuple(r) for r in rows] == [(*AS_HANDLER_JOB, tick)]


async def test_a_changed_kind_changes_the_stored_fire_fields(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    await store.store_schedules([MINUTELY])
    stored = "SELECT priority, lane_key, concurrency_key, rate_key FROM acta.schedule"
    assert tuple(await conn.fetchrow(stored)) == (0, None, None, None)
    # The next deploy declares the kind with a priority and a key: the worker stores them.
    changed = Acta()

    @changed.job(kind="tick", priority=5, concurrency_key="label:{label}")
    async def tick_v2(ctx: Context, label: str = "x") -> None: ...

    again = changed.schedule("minutely", "* * * * *", tick_v2, args={"label": "m"})
    assert await store.store_schedules([again]) == []
    assert tuple(await conn.fetchrow(stored)) == (5, None, "label:m", None)


async def test_a_skewed_host_clock_neither_skips_nor_delays_a_tick(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    # This host's clock an hour ahead of the database's: by the host, every tick since the
    # last fire was missed (`latest` would fire a tick an hour away); by the database, none.
    store.wall = lambda: time.time() + 3600
    await store.store_schedules([MINUTELY])
    [(_, first)] = await ensure_fires(store, SCHEDULES)
    db_now = await conn.fetchval("SELECT now()")
    assert timedelta(0) < first - db_now <= timedelta(minutes=1)
    # The clock a fire's completion computes its successor against (Fires.chain).
    assert abs(store.db_now() - await conn.fetchval("SELECT now()")) < timedelta(seconds=1)
    assert MINUTELY.successor(first, store.db_now()) == first + timedelta(minutes=1)


async def test_pausing_or_dropping_a_schedule_cancels_a_fire_queued_in_its_lane(
    db: str, conn: asyncpg.Connection
) -> None:
    store = await new_store(db, "keyed")
    try:
        await store.store_schedules([KEYED_SCHEDULE])
        # The lane is busy: the fire queues behind its head, `waiting`.
        await conn.execute(
            "INSERT INTO acta.job (namespace, kind, lane_key) VALUES ('keyed', 'head', 'lane:eu')"
        )
        await ensure_fires(store, {"reports": KEYED_SCHEDULE})
        fire = "SELECT status FROM acta.job WHERE schedule_name = 'reports'"
        assert await conn.fetchval(fire) == "waiting"
        await schedules.pause(conn, "acta", "keyed", "reports")
        assert await conn.fetchval(fire) == "cancelled"
        # The head ends and hands the lane on: no fire of the paused schedule runs.
        await conn.execute("UPDATE acta.job SET status = 'cancelled' WHERE kind = 'head'")
        assert await conn.fetchval(fire) == "cancelled"
        # Dropped from the code the same way.
        await conn.execute("DELETE FROM acta.job")
        await conn.execute("UPDATE acta.schedule SET enabled = true")
        await conn.execute(
            "INSERT INTO acta.job (namespace, kind, lane_key) VALUES ('keyed', 'head', 'lane:eu')"
        )
        await ensure_fires(store, {"reports": KEYED_SCHEDULE})
        assert await conn.fetchval(fire) == "waiting"
        assert await store.store_schedules([]) == ["reports"]
        assert await conn.fetchval(fire) == "cancelled"
    finally:
        await store.close()


YEARLY = APP.schedule("yearly", "0 0 1 1 *", tick, args={"label": "y"})
"""Its coming tick is months away: a pause and a resume in a test never straddle it."""


async def test_resuming_a_paused_schedule_brings_back_the_fire_the_pause_cancelled(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    await store.store_schedules([YEARLY])
    [(_, coming)] = await ensure_fires(store, {"yearly": YEARLY})
    # Resuming a schedule that is not paused keeps its pending fire and says which it is.
    assert await schedules.resume(conn, "acta", "default", "yearly") == coming
    await schedules.pause(conn, "acta", "default", "yearly")
    assert [s for _, _, s in await fires(conn)] == ["cancelled"]
    # The coming tick did not pass while paused: the resumed schedule fires it after all
    # (the tick is unique for good: the cancelled fire is made ready again).
    assert await schedules.resume(conn, "acta", "default", "yearly") == coming
    assert await fires(conn) == [("yearly", coming, "ready")]
    assert await conn.fetchval("SELECT run_at FROM acta.job") == coming
    assert await ensure_fires(store, {"yearly": YEARLY}) == []  # one chain


async def test_a_schedule_dropped_and_declared_again_fires_the_tick_its_drop_cancelled(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    """A rolling deploy: a worker of older code drops the new schedule, cancelling its
    coming fire; the new code declares it again. The coming tick had not passed: it fires
    (the cancelled fire made ready again). It was skipped for good: the cancelled fire
    counted as the latest tick and the next one was a year later."""
    await store.store_schedules([YEARLY])
    [(_, coming)] = await ensure_fires(store, {"yearly": YEARLY})
    assert await store.store_schedules([]) == ["yearly"]
    assert [s for _, _, s in await fires(conn)] == ["cancelled"]

    await store.store_schedules([YEARLY])
    assert await ensure_fires(store, {"yearly": YEARLY}) == [("yearly", coming)]

    assert await fires(conn) == [("yearly", coming, "ready")]
    assert await ensure_fires(store, {"yearly": YEARLY}) == []  # one chain


def _redeclared(cron: str) -> Schedule:
    """YEARLY's name and kind with another cron: the schedule as a later deploy declares it."""
    app = Acta()

    @app.job()
    async def tick(ctx: Context, label: str = "x") -> None: ...

    return app.schedule("yearly", cron, tick, args={"label": "y"})


async def _paused_then_every_minute(
    conn: asyncpg.Connection, store: WorkerStore
) -> tuple[datetime, Schedule]:
    """YEARLY stored with its fire of next January, paused (that fire cancelled), then
    declared again every minute: the January tick and the new declaration."""
    await store.store_schedules([YEARLY])
    [(_, january)] = await ensure_fires(store, {"yearly": YEARLY})
    await schedules.pause(conn, "acta", "default", "yearly")
    every_minute = _redeclared("* * * * *")
    await store.store_schedules([every_minute])
    return january, every_minute


async def test_resume_after_the_cron_changed_while_paused_enqueues_the_new_cron_s_tick(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    """Paused with its fire of next January cancelled, redeclared every minute, resumed: the
    next minute's fire is enqueued and named. It named that tick, enqueued nothing (the
    cancelled January fire blocked the insert) and left the schedule silent until January."""
    january, every_minute = await _paused_then_every_minute(conn, store)

    named = await schedules.resume(conn, "acta", "default", "yearly")

    assert named is not None and named < january and named.second == 0
    assert await fires(conn) == [("yearly", named, "ready"), ("yearly", january, "cancelled")]
    assert await ensure_fires(store, {"yearly": every_minute}) == []  # one chain


async def test_a_worker_starting_after_the_cron_changed_while_paused_and_resumed(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    """The worker's side of the same: a schedule with only a cancelled fire of a later tick
    gets the new cron's coming tick at start-up, not one after the cancelled fire."""
    january, every_minute = await _paused_then_every_minute(conn, store)
    await conn.execute("UPDATE acta.schedule SET enabled = true")  # resumed by hand

    [(_, coming)] = await ensure_fires(store, {"yearly": every_minute})

    assert coming < january and coming > datetime.now(UTC)
    assert [s for _, _, s in await fires(conn)] == ["ready", "cancelled"]


async def test_the_new_cron_s_chain_goes_on_past_a_cancelled_fire_of_a_later_tick(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    """After a cron changed while paused, each fire's completion enqueues the next: the
    cancelled fire of next January does not count as a later fire (it did, so the chain
    stopped after one fire until a recovery pass)."""
    january, every_minute = await _paused_then_every_minute(conn, store)
    named = await schedules.resume(conn, "acta", "default", "yearly")
    assert named is not None

    fire = await claim_fire(conn, store)
    assert fire.scheduled_at == named
    successor = successor_feature(every_minute, "default", named, named)
    done = completions.succeeded(fire, None, 0.1)._replace(features={"next": successor})
    await store.complete_executions([done])

    assert await fires(conn) == [
        ("yearly", named, "succeeded"),
        ("yearly", named + timedelta(minutes=1), "ready"),
        ("yearly", january, "cancelled"),
    ]


async def test_a_fire_s_successor_at_a_cancelled_fire_s_tick_makes_that_fire_ready_again(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    """The next tick's row is a fire cancelled before it started (a pause, resumed while
    the fire before it was pending): the completion makes it ready again, as the schedule
    declares it now (the tick's unique key made the insert a no-op: the chain ended)."""
    await store.store_schedules([MINUTELY])
    [(_, first)] = await ensure_fires(store, SCHEDULES)
    second = first + timedelta(minutes=1)
    await conn.execute(
        "INSERT INTO acta.job (namespace, kind, args, schedule_name, scheduled_at, run_at,"
        " status, finished_at) VALUES ('default', 'tick', '{}', 'minutely', $1, $1,"
        " 'cancelled', now())",
        second,
    )
    fire = await claim_fire(conn, store)
    assert fire.scheduled_at == first
    await store.complete_executions([chained(fire, completions.succeeded(fire, None, 0.1))])

    assert await fires(conn) == [
        ("minutely", first, "succeeded"),
        ("minutely", second, "ready"),
    ]
    args = await conn.fetchval("SELECT args::text FROM acta.job WHERE scheduled_at = $1", second)
    assert args == '{"label": "m"}'  # the schedule's, not the cancelled row's
