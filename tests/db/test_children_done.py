"""A completion batch's children, counted per parent by ONE statement-level update of each
waiting parent (``job_children_done``, migration 0015), where the row trigger updated the
parent once per child."""

from __future__ import annotations

import asyncpg

from acta_sqla.store import WorkerStore
from acta_sqla.worker import completions

WAIT = 7_000_001
"""The parent's waiting attempt (its execution id)."""


async def parent_with_children(
    conn: asyncpg.Connection, pending: int, waits: list[int | None]
) -> tuple[int, list[int]]:
    parent = await conn.fetchval(
        "INSERT INTO acta.job (kind, status, execution_id, pending_children, run_at) "
        "VALUES ('p', 'waiting', $1, $2, 'infinity') RETURNING id",
        WAIT,
        pending,
    )
    children = [
        await conn.fetchval(
            "INSERT INTO acta.job (kind, parent_id, parent_execution_id) "
            "VALUES ('c', $1, $2) RETURNING id",
            parent,
            wait,
        )
        for wait in waits
    ]
    return parent, children


async def count_parent_updates(conn: asyncpg.Connection, parent: int) -> None:
    """Log every UPDATE of the parent's row (a test-only trigger)."""
    await conn.execute("CREATE TABLE IF NOT EXISTS public.parent_updates (id bigint)")
    await conn.execute("TRUNCATE public.parent_updates")
    await conn.execute(
        f"""CREATE OR REPLACE FUNCTION public.log_parent_update() RETURNS trigger
        LANGUAGE plpgsql AS $$ BEGIN
            INSERT INTO public.parent_updates VALUES (NEW.id); RETURN NULL;
        END $$;
        DROP TRIGGER IF EXISTS log_parent_update ON acta.job;
        CREATE TRIGGER log_parent_update AFTER UPDATE ON acta.job FOR EACH ROW
        WHEN (OLD.id = {parent}) EXECUTE FUNCTION public.log_parent_update()"""
    )


async def finish_all(store: WorkerStore, n: int) -> None:
    jobs = await store.claim_jobs(n)
    assert len(jobs) == n
    await store.complete_executions([completions.succeeded(j, None, 0.01) for j in jobs])


async def parent_row(conn: asyncpg.Connection, parent: int) -> tuple[object, ...]:
    r = await conn.fetchrow(
        "SELECT status, pending_children, resumed FROM acta.job WHERE id = $1", parent
    )
    return tuple(r)


async def test_a_batch_of_children_updates_their_parent_once(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    parent, _ = await parent_with_children(conn, 10, [WAIT] * 10)
    await count_parent_updates(conn, parent)
    await finish_all(store, 6)
    assert await parent_row(conn, parent) == ("waiting", 4, None)
    await finish_all(store, 4)
    assert await parent_row(conn, parent) == ("ready", 0, "children")
    # One update of the parent per completion batch, not one per child.
    assert await conn.fetchval("SELECT count(*) FROM public.parent_updates") == 2
    await conn.execute("DROP TRIGGER log_parent_update ON acta.job")


async def test_a_child_counts_only_toward_the_wait_that_spawned_it_within_one_batch(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    """Children of an earlier wait (another execution id) ending in the same batch as the
    current wait's count for nothing; children from before migration 0012 (no wait
    recorded) count toward whatever wait the parent is in, as they always did."""
    parent, _ = await parent_with_children(conn, 3, [WAIT, WAIT - 1, None, WAIT - 1])
    await finish_all(store, 4)
    assert await parent_row(conn, parent) == ("waiting", 1, None)
    await conn.execute(
        "INSERT INTO acta.job (kind, parent_id, parent_execution_id) VALUES ('c', $1, $2)",
        parent,
        WAIT,
    )
    await finish_all(store, 1)
    assert await parent_row(conn, parent) == ("ready", 0, "children")


async def test_children_of_two_parents_in_one_batch_each_count_toward_their_own(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    one, _ = await parent_with_children(conn, 2, [WAIT, WAIT])
    two, _ = await parent_with_children(conn, 3, [WAIT, WAIT])
    await finish_all(store, 4)
    assert await parent_row(conn, one) == ("ready", 0, "children")
    assert await parent_row(conn, two) == ("waiting", 1, None)


async def test_a_cancel_of_children_by_hand_counts_them(
    conn: asyncpg.Connection,
) -> None:
    """Every writer goes through the statement trigger: here a hand-written UPDATE."""
    parent, children = await parent_with_children(conn, 3, [WAIT] * 3)
    await conn.execute(
        "UPDATE acta.job SET status = 'cancelled', finished_at = now() WHERE id = ANY($1)",
        children,
    )
    assert await parent_row(conn, parent) == ("ready", 0, "children")
