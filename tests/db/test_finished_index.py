"""Migration 0017: one index of every finished job. ``job_finished_idx`` (namespace,
finished_at) is gone (a job that succeeds writes one B-tree entry fewer); the dashboard's
windows of recent finished jobs over every kind read ``job_prune_idx`` (namespace, kind,
finished_at) kind by kind from the window's start, and the failure pages
``job_failed_idx`` (failed rows only): the window's rows, never the history
(docs/performance.md, the ninth pass)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import asyncpg
import psycopg
import pytest
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql import Select

from acta_sqla import migrate
from acta_sqla.queries import inspect as q
from tests.plans import examined, nodes, outline

KINDS = 6
OLD_PER_KIND = 5000
"""Finished two days ago: the history a window must not read."""
RECENT_PER_KIND = 20
"""Finished within the last 10 minutes, half of them failed with error type ``E``."""
HOUR = 3600.0
TERMINAL = "status IN ('succeeded', 'failed', 'cancelled')"


async def populate(conn: asyncpg.Connection) -> None:
    for k in range(KINDS):
        await conn.execute(
            "INSERT INTO acta.job (kind, status, finished_at) "
            "SELECT $1, 'succeeded', now() - interval '2 days' - g * interval '1 second' "
            "FROM generate_series(1, $2) AS g",
            f"kind{k}",
            OLD_PER_KIND,
        )
        await conn.execute(
            "INSERT INTO acta.job (kind, status, finished_at, last_error) "
            "SELECT $1, CASE WHEN g % 2 = 0 THEN 'failed' ELSE 'succeeded' END, "
            "       now() - g * interval '20 seconds', "
            "       CASE WHEN g % 2 = 0 THEN $3::jsonb END "
            "FROM generate_series(1, $2) AS g",
            f"kind{k}",
            RECENT_PER_KIND,
            json.dumps({"type": "E", "message": "broke"}),
        )
    # Unfinished jobs are in no window.
    await conn.execute("INSERT INTO acta.job (kind) SELECT 'kind0' FROM generate_series(1, 50)")
    await conn.execute("ANALYZE acta.job")


WINDOWS: dict[str, Callable[[], Select[Any]]] = {
    "finished_since": lambda: q.finished_since("default", HOUR),
    "finished_series": lambda: q.finished_series("default", HOUR, 60.0, None),
    "finished_series_of_a_kind": lambda: q.finished_series("default", HOUR, 60.0, "kind2"),
    "kind_rates": lambda: q.kind_rates("default", HOUR),
    "failure_groups": lambda: q.failure_groups("default", HOUR, 50),
    "failed_ids": lambda: q.failed_ids("default", "E", HOUR, 1000),
    "failed_ids_of_a_kind": lambda: q.failed_ids("default", "E", HOUR, 1000, "kind2"),
}
FAILURE_PAGES = {"failure_groups", "failed_ids", "failed_ids_of_a_kind"}


def literal(statement: Select[Any]) -> str:
    return str(
        statement.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})
    )


def generic_explain(statement: Select[Any]) -> tuple[str, str]:
    """PREPARE of the statement with ``$n`` parameters (as asyncpg sends it), and the
    EXPLAIN ANALYZE of its EXECUTE with the values."""
    compiled = statement.compile(dialect=postgresql.dialect(paramstyle="numeric_dollar"))
    values = [compiled.params[name] for name in compiled.positiontup or ()]
    args = ", ".join(
        "'" + v.replace("'", "''") + "'" if isinstance(v, str) else repr(v) for v in values
    )
    return (
        f"PREPARE w AS {compiled}",
        f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE w({args})",
    )


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
@pytest.mark.parametrize("name", list(WINDOWS))
async def test_a_window_reads_each_kinds_range_never_the_history(
    conn: asyncpg.Connection, name: str, generic: bool
) -> None:
    await populate(conn)
    if generic:
        # The plan PostgreSQL may switch to after five executions, which cannot see the
        # parameters' values: the statuses the partial indexes' predicates need are
        # written into the statement.
        prepare, explain = generic_explain(WINDOWS[name]())
        await conn.execute(prepare)
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        raw = await conn.fetchval(explain)
    else:
        raw = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + literal(WINDOWS[name]()))
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    every = nodes(plan)
    scans = [n for n in every if n.get("Relation Name") == "job"]
    assert scans, outline(plan)
    assert not [n for n in scans if n["Node Type"] == "Seq Scan"], outline(plan)
    indexes = {n["Index Name"] for n in every if "Index Name" in n}
    if name in FAILURE_PAGES:
        # The window's failed rows only.
        assert indexes == {"job_failed_idx"}, outline(plan)
        limit = KINDS * RECENT_PER_KIND // 2
    else:
        # The window's rows, and the kinds' walk (a row per kind and its end).
        assert indexes == {"job_prune_idx"}, outline(plan)
        limit = KINDS * RECENT_PER_KIND + 2 * KINDS + 2
    # None of the KINDS * OLD_PER_KIND rows of history.
    read = sum(examined(n) for n in scans)
    assert read <= limit, (read, outline(plan))


async def test_the_windows_count_what_finished_in_them(conn: asyncpg.Connection) -> None:
    await populate(conn)

    async def rows(name: str) -> list[asyncpg.Record]:
        return await conn.fetch(literal(WINDOWS[name]()))

    half = RECENT_PER_KIND // 2
    assert sorted(tuple(r) for r in await rows("finished_since")) == sorted(
        (f"kind{k}", status, half) for k in range(KINDS) for status in ("failed", "succeeded")
    )
    series = await rows("finished_series")
    assert sum(r["succeeded"] for r in series) == KINDS * half
    assert sum(r["failed"] for r in series) == KINDS * half
    assert sum(r["failed"] for r in await rows("finished_series_of_a_kind")) == half
    assert [(r["kind"], r["succeeded"], r["failed"]) for r in await rows("kind_rates")] == [
        (f"kind{k}", half, half) for k in range(KINDS)
    ]
    assert sorted(
        (r["kind"], r["error_type"], r["count"]) for r in await rows("failure_groups")
    ) == [(f"kind{k}", "E", half) for k in range(KINDS)]
    failed = await conn.fetch(
        "SELECT id FROM acta.job WHERE status = 'failed' "
        "AND finished_at > now() - interval '1 hour' ORDER BY id DESC"
    )
    assert [r["id"] for r in await rows("failed_ids")] == [r["id"] for r in failed]


def test_the_migration_drops_the_index_keeps_the_rows_and_its_downgrade_builds_it_again(
    scratch_database: Callable[[], str],
) -> None:
    url = scratch_database()
    libpq = url.replace("postgresql+psycopg://", "postgresql://")

    def index(c: psycopg.Connection[Any], name: str) -> str | None:
        row = c.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = 'acta' AND indexname = %s",
            (name,),
        ).fetchone()
        return row[0] if row else None

    def finished_index(c: psycopg.Connection[Any]) -> str | None:
        return index(c, "job_finished_idx")

    def jobs(c: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
        return c.execute("SELECT id, kind, status FROM acta.job ORDER BY id").fetchall()

    migrate.upgrade(url, "0016")
    with psycopg.connect(libpq, autocommit=True) as c:
        c.execute(
            "INSERT INTO acta.job (kind, status, finished_at) VALUES "
            "('a', 'succeeded', now()), ('b', 'failed', now()), ('a', 'ready', NULL)"
        )
        before = jobs(c)
        built = finished_index(c)
        assert built is not None and "(namespace, finished_at)" in built, built

        assert index(c, "job_failed_idx") is None

        migrate.upgrade(url)
        assert migrate.current(url) == "0017"
        assert finished_index(c) is None
        failed = index(c, "job_failed_idx")
        assert failed is not None and "(namespace, finished_at)" in failed, failed
        assert "WHERE ((status)::text = 'failed'::text)" in failed, failed
        assert jobs(c) == before
        # Its one failed row is in it (an index-only count through its predicate).
        assert c.execute(
            "SELECT count(*) FROM acta.job WHERE status = 'failed' AND finished_at IS NOT NULL"
        ).fetchone() == (1,)

        migrate.downgrade(url, "0016")
        assert finished_index(c) == built
        assert index(c, "job_failed_idx") is None
        assert jobs(c) == before

        # An operator with a large table builds each index first without blocking writes
        # (the way the migration's docstring gives); the migration then finds it.
        c.execute(
            "CREATE INDEX CONCURRENTLY job_failed_idx ON acta.job "
            "(namespace, finished_at) WHERE status = 'failed'"
        )
        migrate.upgrade(url)
        assert index(c, "job_failed_idx") == failed
        c.execute(
            "CREATE INDEX CONCURRENTLY job_finished_idx ON acta.job "
            f"(namespace, finished_at) WHERE {TERMINAL}"
        )
        migrate.downgrade(url, "0016")
        assert finished_index(c) == built
        assert migrate.current(url) == "0016"
