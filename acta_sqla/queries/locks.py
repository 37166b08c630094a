"""Named locks, held by a (job, execution) and fenced by it.

Each builder returns SQL text with asyncpg ``$n`` parameters for one schema; ``WorkerSQL``
renders them once per worker. No SQLAlchemy here."""

from __future__ import annotations

from ._render import quote


def take_lock(schema: str) -> str:
    """Named locks. Take: a free name, an expired hold, or one this execution holds already.
    Fenced by the holder's (job, execution) pair, so a release or renewal by a stale
    attempt matches nothing."""
    s = quote(schema)
    return f"""
        INSERT INTO {s}.lock AS k (namespace, name, job_id, execution_id, worker_id,
                                   lease_expires_at)
        VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))
        ON CONFLICT (namespace, name) DO UPDATE SET
            job_id = excluded.job_id, execution_id = excluded.execution_id,
            worker_id = excluded.worker_id, acquired_at = now(),
            lease_expires_at = excluded.lease_expires_at
        WHERE k.lease_expires_at < now()
           OR (k.job_id = excluded.job_id AND k.execution_id = excluded.execution_id)
        RETURNING 1"""


def release_lock(schema: str) -> str:
    """Release a named lock, fenced by its holder's (job, execution): a stale release
    matches nothing."""
    s = quote(schema)
    return f"""
        DELETE FROM {s}.lock
        WHERE namespace = $1 AND name = $2 AND job_id = $3 AND execution_id = $4"""
