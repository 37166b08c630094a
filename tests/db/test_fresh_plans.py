"""The claim and the completion keep their plan for the worker's life (generic plans, made at
its start): planned while the table held one row, they must still read the claim index in
order and the primary key once 10,000 rows have arrived that no ANALYZE has seen (issue 30:
a parent's fan-out, or a worker started on an empty queue)."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from acta_sqla.queries import complete
from acta_sqla.store import WorkerStore
from acta_sqla.values import Completion, Outcome
from tests.plans import examined, nodes, outline

CHILDREN = 10_000


async def one_parent(conn: asyncpg.Connection) -> int:
    """The table as a fan-out starts it: one parent running, and statistics of just that."""
    parent: int = await conn.fetchval(
        "INSERT INTO acta.job (kind, status) VALUES ('fan', 'executing') RETURNING id"
    )
    await conn.execute("ANALYZE acta.job")
    return parent


async def spawn(conn: asyncpg.Connection, parent: int) -> None:
    """The parent's children, in one statement, after the last ANALYZE."""
    await conn.execute(
        "INSERT INTO acta.job (kind, args, parent_id) "
        "SELECT 'k', jsonb_build_object('i', i), $1 FROM generate_series(1, $2) AS i",
        parent,
        CHILDREN,
    )


async def prepare(c: asyncpg.Connection, name: str, sql: str, *args: Any) -> None:
    """``PREPARE name`` on ``c`` and run it once with ``args``: the generic plan is made now."""
    await c.execute(f"PREPARE {name} AS {sql}")
    await c.fetch(f"EXECUTE {name}({await literals(c, name, args)})")


async def literals(c: asyncpg.Connection, name: str, args: tuple[Any, ...]) -> str:
    types = await c.fetchval(
        "SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = $1", name
    )
    return ", ".join(
        [
            await c.fetchval(f"SELECT quote_nullable($1::{t}::text) || '::{t}'", arg)
            for t, arg in zip(types, args, strict=True)
        ]
    )


async def explain(c: asyncpg.Connection, name: str, *args: Any) -> dict[str, Any]:
    """The prepared statement run under ``EXPLAIN (ANALYZE)``: its cached plan, as run."""
    text = await c.fetchval(
        f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {name}({await literals(c, name, args)})"
    )
    plan: dict[str, Any] = json.loads(text)[0]["Plan"]
    return plan


def scans_of_job(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [n for n in nodes(plan) if n.get("Relation Name") == "job"]


@pytest.mark.parametrize("statement", ["claim_jobs", "claim_plain", "claim_plain_lean"])
async def test_a_claim_planned_on_one_row_walks_the_claim_index_over_fresh_children(
    conn: asyncpg.Connection, store: WorkerStore, statement: str
) -> None:
    parent = await one_parent(conn)
    claim = await store.claim_conn.get()  # the worker's own claim connection, its settings
    sql = getattr(store.sql, statement)
    args: tuple[Any, ...] = ("default", 0, store.worker_id, 180.0)
    if statement == "claim_jobs":
        args += (False,)
    await prepare(claim, "fresh_claim", sql, *args)
    await spawn(conn, parent)

    plan = await explain(claim, "fresh_claim", "default", 64, *args[2:])
    shown = outline(plan)
    assert not any(n["Node Type"] == "Seq Scan" for n in scans_of_job(plan)), shown
    [walk] = [n for n in nodes(plan) if n.get("Index Name") == "job_claim_idx"]
    # In claim order straight from the index, stopped by the LIMIT: no sort of the ready set.
    assert walk["Node Type"] == "Index Scan", shown
    assert walk["Actual Rows"] == 64 and examined(walk) <= 64, shown
    lock = next(n for n in nodes(plan) if n["Node Type"] == "LockRows" and walk in nodes(n))
    assert not any(n["Node Type"] in ("Sort", "Incremental Sort") for n in nodes(lock)), shown
    # The picked rows are updated by primary key.
    assert any(n.get("Index Name") == "job_pkey" for n in scans_of_job(plan)), shown
    assert (
        await conn.fetchval(
            "SELECT count(*) FROM acta.job WHERE status = 'executing' AND parent_id = $1", parent
        )
        == 64
    )


async def test_without_the_setting_the_same_plan_reads_the_whole_table(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    """The case above is the one that went wrong: a generic plan made on one row, with
    sequential scans allowed, reads and sorts every child at each claim."""
    parent = await one_parent(conn)
    plain = await asyncpg.connect(
        store.dsn, server_settings={"plan_cache_mode": "force_generic_plan"}
    )
    try:
        args = ("default", 0, store.worker_id, 180.0)
        await prepare(plain, "fresh_claim", store.sql.claim_plain_lean, *args)
        await spawn(conn, parent)
        plan = await explain(plain, "fresh_claim", "default", 64, *args[2:])
    finally:
        await plain.close()
    seq = [n for n in scans_of_job(plan) if n["Node Type"] == "Seq Scan"]
    assert seq and max(examined(n) for n in seq) > CHILDREN, outline(plan)


async def test_a_completion_planned_on_one_row_finds_fresh_children_by_primary_key(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    parent = await one_parent(conn)
    done = await store.complete_conn.get()  # the worker's own completion connection
    await prepare(done, "fresh_complete", store.sql.complete_plain, "[]", store.worker_id, "{}")
    await spawn(conn, parent)
    jobs = await store.claim_plain(64)
    assert len(jobs) == 64
    batch = [
        Completion(
            job_id=j.id,
            execution_id=j.execution_id,
            outcome=Outcome.SUCCEEDED,
            status="succeeded",
            attempt=j.attempts,
        )
        for j in jobs
    ]
    plan = await explain(
        done, "fresh_complete", complete.encode(batch)[0], store.worker_id, complete.NO_FEATURES
    )
    shown = outline(plan)
    assert not any(n["Node Type"] == "Seq Scan" for n in scans_of_job(plan)), shown
    assert any(n.get("Index Name") == "job_pkey" for n in scans_of_job(plan)), shown
    assert (
        await conn.fetchval(
            "SELECT count(*) FROM acta.job WHERE status = 'succeeded' AND parent_id = $1", parent
        )
        == 64
    )
