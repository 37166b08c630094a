"""The worker row: register (with its namespace) and mark stopped.

Each builder returns SQL text with asyncpg ``$n`` parameters for one schema; ``WorkerSQL``
renders them once per worker. No SQLAlchemy here."""

from __future__ import annotations

from ._render import quote


def register_worker(schema: str) -> str:
    """Register: the namespace (if new) and the worker row in one statement, and the admin
    connection named after the new id, so that every connection of a worker can be found
    in pg_stat_activity."""
    s = quote(schema)
    return f"""
        WITH ns AS (
            INSERT INTO {s}.namespace (name) VALUES ($1) ON CONFLICT (name) DO NOTHING
        ),
        w AS (
            INSERT INTO {s}.worker (namespace, hostname, pid, status, executors, kinds,
                                    version, heartbeat_seconds)
            VALUES ($1, $2, $3, 'running', $4, $5::jsonb, $6, $7)
            RETURNING id
        )
        SELECT id, set_config('application_name', $8 || id, false) AS application_name
        FROM w"""


def stop_worker(schema: str) -> str:
    """stop_worker"""
    s = quote(schema)
    return f"""
        UPDATE {s}.worker SET status = 'stopped', stopped_at = now()
        WHERE id = $1 AND status <> 'stopped'"""
