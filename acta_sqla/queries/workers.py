"""The worker row: register (with its namespace), mark stopped; and the connection's name.

Each builder returns SQL text with asyncpg ``$n`` parameters for one schema; ``WorkerSQL``
renders them once per worker. No SQLAlchemy here."""

from __future__ import annotations

from ._render import quote


def register_worker(schema: str) -> str:
    """Register: the namespace (if new) and the worker row in one statement, and the admin
    connection named after the new id, so that every connection of a worker can be found
    in pg_stat_activity. A namespace whose next recovery pass is due later than this
    worker's own recovery interval ($9) is pulled in to it: a worker with a long heartbeat
    may have taken the last pass alone, and this one's shorter leases must not wait for
    the long interval (I1, no lost job)."""
    s = quote(schema)
    return f"""
        WITH ns AS (
            INSERT INTO {s}.namespace (name) VALUES ($1) ON CONFLICT (name) DO NOTHING
        ),
        pull_in AS (
            UPDATE {s}.namespace SET recovery_due_at = now() + make_interval(secs => $9)
            WHERE name = $1 AND recovery_due_at > now() + make_interval(secs => $9)
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
    """Mark worker $1 stopped at its clean shutdown (recovery then never calls it dead)."""
    s = quote(schema)
    return f"""
        UPDATE {s}.worker SET status = 'stopped', stopped_at = now()
        WHERE id = $1 AND status <> 'stopped'"""


def set_application_name() -> str:
    """Rename this connection ($1): it was opened before the worker's id was known."""
    return "SELECT set_config('application_name', $1, false)"


def schema_revision(schema: str, version_table: str) -> str:
    """The Alembic revision acta's schema is at (one row; fails if never migrated)."""
    return f"SELECT version_num FROM {quote(schema)}.{version_table}"
