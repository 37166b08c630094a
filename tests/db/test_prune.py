"""Recovery's prune against a real PostgreSQL: which finished jobs it deletes (each kind's
own retention), in bounded chunks, around locked rows; and that a pass costs what it
deletes: its plan reads each kind's due rows on ``job_prune_idx``, never the finished
history inside retention (issue 10, item 5: 1.85 s per pass at 1M rows to delete nothing)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import asyncpg
import psycopg
import pytest
from alembic.script import ScriptDirectory

from acta_sqla import migrate
from acta_sqla.database import asyncpg_dsn
from acta_sqla.store import WorkerStore
from acta_sqla.worker import recovery
from tests.plans import examined, nodes, outline

DAY = 24 * 3600.0
DEFAULT_RETENTION = 7 * DAY
TERMINAL = "status IN ('succeeded', 'failed', 'cancelled')"


async def define(
    conn: asyncpg.Connection,
    kind: str,
    declared: dict[str, Any],
    overrides: dict[str, Any] | None = None,
    namespace: str = "default",
) -> None:
    await conn.execute(
        "INSERT INTO acta.namespace (name) VALUES ($1) ON CONFLICT DO NOTHING", namespace
    )
    await conn.execute(
        "INSERT INTO acta.definition (namespace, kind, declared, overrides) "
        "VALUES ($1, $2, $3::jsonb, $4::jsonb)",
        namespace,
        kind,
        json.dumps(declared),
        json.dumps(overrides or {}),
    )


async def finished(
    conn: asyncpg.Connection,
    kind: str,
    age_seconds: float,
    n: int = 1,
    status: str = "succeeded",
    namespace: str = "default",
) -> list[int]:
    """``n`` jobs of ``kind`` that finished ``age_seconds`` ago, each with one execution."""
    ids = await conn.fetch(
        "INSERT INTO acta.job (namespace, kind, status, finished_at) "
        "SELECT $1, $2, $3, now() - make_interval(secs => $4) FROM generate_series(1, $5) "
        "RETURNING id",
        namespace,
        kind,
        status,
        age_seconds,
        n,
    )
    await conn.execute(
        "INSERT INTO acta.execution (job_id, id, attempt, outcome) "
        "SELECT id, id, 1, 'succeeded' FROM unnest($1::bigint[]) id",
        [r["id"] for r in ids],
    )
    return [r["id"] for r in ids]


async def remaining(conn: asyncpg.Connection, ids: list[int]) -> set[int]:
    rows = await conn.fetch("SELECT id FROM acta.job WHERE id = ANY($1::bigint[])", ids)
    return {r["id"] for r in rows}


async def prune_all(store: WorkerStore, limit: int = 1000) -> int:
    total = 0
    while (n := await store.prune_finished(limit, DEFAULT_RETENTION)) > 0:
        total += n
    return total


async def test_each_kind_is_pruned_past_its_own_retention(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    await define(conn, "plain", {"timeout": 10})  # no retention named: the default
    await define(conn, "short", {"retention": 3600})
    await define(conn, "overridden", {"retention": 3600}, {"retention": 30 * DAY})
    await define(conn, "forever", {"retention": 3600}, {"retention": None})
    # "unknown" has no definition at all: the default, like "plain".
    due: list[int] = []
    kept: list[int] = []
    for kind in ("plain", "unknown"):
        for status in ("succeeded", "failed", "cancelled"):
            due += await finished(conn, kind, 8 * DAY, 2, status)
        kept += await finished(conn, kind, 6 * DAY, 2)
    due += await finished(conn, "short", 2 * 3600, 3)
    kept += await finished(conn, "short", 1800, 3)
    due += await finished(conn, "overridden", 31 * DAY, 2)
    kept += await finished(conn, "overridden", 8 * DAY, 2)  # past its declared 1 h
    kept += await finished(conn, "forever", 365 * DAY, 3)
    # Another namespace's jobs, past every retention: not this worker's to prune.
    kept += await finished(conn, "plain", 30 * DAY, 2, namespace="other")
    # An old finish time on a job retried since (ready again): not finished, kept.
    [retried] = await finished(conn, "plain", 30 * DAY)
    await conn.execute("UPDATE acta.job SET status = 'ready' WHERE id = $1", retried)
    kept.append(retried)

    assert await prune_all(store) == len(due)

    assert await remaining(conn, due + kept) == set(kept)
    history = await conn.fetch("SELECT job_id FROM acta.attempt")
    assert {r["job_id"] for r in history} == set(kept)  # the pruned jobs' executions went too


async def test_a_finished_child_stays_while_its_parent_has_not_ended(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    waiting = await conn.fetchval(
        "INSERT INTO acta.job (kind, status, pending_children) VALUES ('p', 'waiting', 1) "
        "RETURNING id"
    )
    [done_parent] = await finished(conn, "p", 30 * DAY)
    kept = await finished(conn, "child", 30 * DAY, n=2)
    gone = await finished(conn, "child", 30 * DAY, n=2)
    await conn.execute("UPDATE acta.job SET parent_id = $1 WHERE id = ANY($2)", waiting, kept)
    await conn.execute("UPDATE acta.job SET parent_id = $1 WHERE id = ANY($2)", done_parent, gone)
    assert await prune_all(store) == 3  # the finished parent and its children
    # The waiting parent's next run reads its children (ctx.children): all of them are there.
    assert await remaining(conn, kept + gone + [done_parent, waiting]) == {*kept, waiting}


async def test_a_chunk_deletes_at_most_its_limit_across_kinds(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    await define(conn, "short", {"retention": 60})
    due = await finished(conn, "a", 8 * DAY, 7)
    due += await finished(conn, "b", 8 * DAY, 6)
    due += await finished(conn, "short", 120, 12)
    kept = await finished(conn, "b", DAY, 4)

    chunks = [await store.prune_finished(10, DEFAULT_RETENTION) for _ in range(4)]

    assert chunks == [10, 10, 5, 0]
    assert await remaining(conn, due + kept) == set(kept)


async def test_a_pass_prunes_past_its_first_chunks_while_behind_within_its_budget(
    conn: asyncpg.Connection, store: WorkerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recovery pass runs at least PRUNE_CHUNKS chunks, then goes on while chunks come
    back full and its budget lasts: a fixed quota per pass capped a namespace's prune at
    20,000 jobs per recovery interval (111 jobs/s at the default heartbeat), so a busier
    namespace grew without bound (docs/scaling.md). Chunks of 5, at least 2 a pass here."""
    monkeypatch.setattr(recovery, "PRUNE_CHUNK", 5)
    monkeypatch.setattr(recovery, "PRUNE_CHUNKS", 2)
    due = await finished(conn, "a", 8 * DAY, 37)
    kept = await finished(conn, "a", DAY, 3)

    # No budget: the two chunks every pass runs, no more.
    assert (await recovery.run_recovery(store, prune_budget=0)).pruned == 10
    assert len(await remaining(conn, due)) == 27
    # A budget: on past the first chunks until one comes back short.
    assert (await recovery.run_recovery(store, prune_budget=60)).pruned == 27
    assert await remaining(conn, due + kept) == set(kept)
    assert (await recovery.run_recovery(store, prune_budget=60)).pruned == 0


async def test_a_locked_row_is_skipped_and_pruned_by_a_later_pass(
    db: str, conn: asyncpg.Connection, store: WorkerStore
) -> None:
    due = await finished(conn, "a", 8 * DAY, 5)
    holder = await asyncpg.connect(asyncpg_dsn(db))
    try:
        tx = holder.transaction()
        await tx.start()
        await holder.execute("SELECT 1 FROM acta.job WHERE id = $1 FOR UPDATE", due[0])

        assert await store.prune_finished(10, DEFAULT_RETENTION) == 4
        assert await remaining(conn, due) == {due[0]}

        await tx.rollback()
    finally:
        await holder.close()
    assert await store.prune_finished(10, DEFAULT_RETENTION) == 1
    assert await remaining(conn, due) == set()


# ---------------------------------------------------------------- the plan

KINDS = 8
KEPT_PER_KIND = 1000
DUE = 30


def _job_scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The nodes that read acta.job (the DELETE's ModifyTable node only writes)."""
    return [
        n
        for n in nodes(plan)
        if n.get("Relation Name") == "job" and n["Node Type"].endswith("Scan")
    ]


async def explain_pass(
    conn: asyncpg.Connection, store: WorkerStore, generic: bool
) -> dict[str, Any]:
    """EXPLAIN ANALYZE of the store's own statement (rolled back): as a custom plan (the
    first executions of a prepared statement) or the generic plan PostgreSQL may switch to
    after five."""
    tx = conn.transaction()
    await tx.start()
    try:
        await conn.execute(f"PREPARE prune(text, bigint, float8) AS {store.sql.prune_finished}")
        mode = "force_generic_plan" if generic else "force_custom_plan"
        await conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
        raw = await conn.fetchval(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
            f"EXECUTE prune('default', 1000, {DEFAULT_RETENTION})"
        )
    finally:
        await tx.rollback()
    return json.loads(raw)[0]


@pytest.fixture
async def history(conn: asyncpg.Connection) -> list[int]:
    """KINDS kinds of KEPT_PER_KIND finished rows inside retention each (one with a short
    retention of its own, one kept forever, one without a definition), analyzed; no row
    due. Returns the ids."""
    await define(conn, "kind0", {"retention": 3 * DAY})
    await define(conn, "kind1", {}, {"retention": None})
    ids: list[int] = []
    for k in range(KINDS):
        ids += await finished(conn, f"kind{k}", DAY, KEPT_PER_KIND)
    await conn.execute("ANALYZE acta.job")
    await conn.execute("ANALYZE acta.execution")
    return ids


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
async def test_a_pass_reads_no_finished_row_inside_retention(
    conn: asyncpg.Connection, store: WorkerStore, history: list[int], generic: bool
) -> None:
    plan = await explain_pass(conn, store, generic)

    scans = _job_scans(plan["Plan"])
    assert scans
    assert not [n for n in scans if n["Node Type"] == "Seq Scan"], outline(plan["Plan"])
    indexes = {n["Index Name"] for n in nodes(plan["Plan"]) if "Index Name" in n}
    assert "job_finished_idx" not in indexes, outline(plan["Plan"])
    assert "job_prune_idx" in indexes, outline(plan["Plan"])
    read = sum(examined(n) for n in scans)
    # One row per kind to find the kinds (plus the walk's end), none of the history: the
    # statement this replaced read all KINDS * KEPT_PER_KIND.
    assert read <= 2 * KINDS + 2, (read, outline(plan["Plan"]))
    assert await store.prune_finished(1000, DEFAULT_RETENTION) == 0


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
async def test_a_pass_with_rows_due_reads_about_what_it_deletes(
    conn: asyncpg.Connection, store: WorkerStore, history: list[int], generic: bool
) -> None:
    due = await finished(conn, "kind3", 8 * DAY, DUE // 2)
    due += await finished(conn, "kind0", 4 * DAY, DUE // 2)  # past its own 3 days
    await conn.execute("ANALYZE acta.job")

    plan = await explain_pass(conn, store, generic)

    scans = _job_scans(plan["Plan"])
    assert not [n for n in scans if n["Node Type"] == "Seq Scan"], outline(plan["Plan"])
    read = sum(examined(n) for n in scans)
    # The due rows, read once to lock and once to delete by primary key, plus the kinds.
    assert read <= 2 * DUE + 2 * KINDS + 2, (read, outline(plan["Plan"]))
    assert await store.prune_finished(1000, DEFAULT_RETENTION) == DUE
    assert await remaining(conn, due + history) == set(history)


def test_the_migration_builds_the_index_adopts_a_prebuilt_one_and_drops_it(
    scratch_database: Callable[[], str],
) -> None:
    url = scratch_database()
    libpq = url.replace("postgresql+psycopg://", "postgresql://")

    def prune_index() -> str | None:
        with psycopg.connect(libpq) as c:
            row = c.execute(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = 'acta' "
                "AND indexname = 'job_prune_idx'"
            ).fetchone()
        return row[0] if row else None

    migrate.upgrade(url)
    built = prune_index()
    assert built is not None and "(namespace, kind, finished_at)" in built, built

    migrate.downgrade(url, "0003")  # below 0004, whatever came after it
    assert prune_index() is None
    assert (
        migrate.current(url)
        == ScriptDirectory.from_config(migrate.alembic_config()).get_revision("0004").down_revision
    )

    # An operator with a large table builds it first without blocking writes (the way
    # migration 0004's docstring gives); the upgrade then finds it and succeeds.
    with psycopg.connect(libpq, autocommit=True) as c:
        c.execute(
            "CREATE INDEX CONCURRENTLY job_prune_idx ON acta.job "
            f"(namespace, kind, finished_at) WHERE {TERMINAL}"
        )
    migrate.upgrade(url, "0004")
    assert prune_index() == built
    assert migrate.current(url) == "0004"
