"""Durable waits, the worker's side: a resumed parent's children, and the heartbeat's wake
of signal waits past their deadline.

Each builder returns SQL text with asyncpg ``$n`` parameters for one schema; ``WorkerSQL``
renders them once per worker. No SQLAlchemy here."""

from __future__ import annotations

from ._render import quote

WAKE_LIMIT = 1000
"""Timed-out waits one heartbeat makes ready (the next beat takes the rest)."""


def children_of(schema: str) -> str:
    """``ctx.children``: the children of job $1 in spawn order, as one JSON array of
    ``[id, kind, status, result, last_error]`` (NULL when it has none). By
    ``job_parent_idx``; read only for a run that follows a wait."""
    s = quote(schema)
    return f"""
        SELECT json_agg(json_build_array(id, kind, status, result, last_error)
                        ORDER BY id)::text
        FROM {s}.job WHERE parent_id = $1"""


def lanes_held_above(schema: str) -> str:
    """The lanes held by job $1 and the ancestors above it that each wait for the child
    below (``waiting`` for children, not for a signal): (namespace, lane_key) rows. A
    child of $1's child in one of these lanes would queue behind a job that waits, through
    the chain, for that very child: the lane would be stranded. The walk stops at the
    first ancestor not waiting for children (above it nothing waits for this tree). By
    primary key, one row per level; read only when a child job spawns children with
    lanes."""
    s = quote(schema)
    return f"""
        WITH RECURSIVE up (id, parent_id, namespace, lane_key, depth) AS (
            SELECT j.id, j.parent_id, j.namespace, j.lane_key, 1 FROM {s}.job AS j
            WHERE j.id = $1 AND j.status = 'waiting' AND j.pending_children > 0
              AND j.awaited_signal IS NULL
            UNION ALL
            SELECT j.id, j.parent_id, j.namespace, j.lane_key, up.depth + 1
            FROM up JOIN {s}.job AS j ON j.id = up.parent_id
            WHERE j.status = 'waiting' AND j.pending_children > 0
              AND j.awaited_signal IS NULL AND up.depth < 1000
        )
        SELECT namespace, lane_key FROM up WHERE lane_key IS NOT NULL"""


def wake_timed_out(schema: str) -> str:
    """The heartbeat's CTE ``woken``: signal waits of namespace $1 whose deadline passed
    become ``ready`` now, told ``resumed = 'timeout'`` (the NOTIFY trigger wakes a
    worker). One probe of ``job_wait_deadline_idx``, normally empty. SKIP LOCKED: a row a
    signal is writing right now is left to it (the signal wins, or the next beat wakes it).
    Guard: still ``waiting`` for a signal (the UPDATE re-checks the row it locked)."""
    s = quote(schema)
    return f"""woken AS (
            UPDATE {s}.job AS j SET status = 'ready', run_at = now(), resumed = 'timeout',
                                     awaited_signal = NULL
            WHERE j.id IN (
                SELECT w.id FROM {s}.job AS w
                WHERE w.namespace = $1 AND w.status = 'waiting'
                  AND w.awaited_signal IS NOT NULL AND w.run_at <= now()
                ORDER BY w.run_at
                LIMIT {WAKE_LIMIT}
                FOR UPDATE SKIP LOCKED
            )
              AND j.status = 'waiting' AND j.awaited_signal IS NOT NULL
            RETURNING j.id
        )"""
