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
