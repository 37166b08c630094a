"""Statements of acta's own tools, outside the worker and the application's session: the
migrations' view of acta's schema, and the test helper that makes scheduled jobs due.

Plain SQL text (no SQLAlchemy here): the migrations wrap it in ``text()``, the test helper
runs it on asyncpg."""

from __future__ import annotations

from ._render import quote
from .workers import schema_revision as schema_revision


def create_schema(schema: str) -> str:
    """Create acta's schema if it is missing (the migrations' first step)."""
    return f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}"


def version_table_exists(schema: str, version_table: str) -> str:
    """True once acta's migrations have run in ``schema`` (its version table exists)."""
    return f"SELECT to_regclass('{quote(schema)}.{version_table}') IS NOT NULL"


def make_due(schema: str) -> str:
    """Make every ready job of namespace $1 that is scheduled for later due now
    (``testing.drain(include_scheduled=True)``)."""
    return (
        f"UPDATE {quote(schema)}.job SET run_at = now() "
        "WHERE namespace = $1 AND status = 'ready' AND run_at > now()"
    )


def make_due_later(schema: str) -> str:
    """Make every ready job scheduled for later due now, of namespace $1 or of every
    namespace when $1 is NULL; their ids (``testing.faults.make_due``)."""
    return (
        f"UPDATE {quote(schema)}.job SET run_at = now() "
        "WHERE ($1::text IS NULL OR namespace = $1) AND status = 'ready' AND run_at > now() "
        "RETURNING id"
    )


def time_out_waits(schema: str) -> str:
    """Wake every signal wait with a timeout as timed out now (as the heartbeat's
    ``wake_timed_out`` does once its deadline passes), of namespace $1 or of every namespace
    when $1 is NULL; their ids (``testing.faults.make_due``)."""
    return (
        f"UPDATE {quote(schema)}.job SET status = 'ready', run_at = now(), "
        "resumed = 'timeout', awaited_signal = NULL "
        "WHERE ($1::text IS NULL OR namespace = $1) AND status = 'waiting' "
        "AND awaited_signal IS NOT NULL AND run_at > now() AND run_at < 'infinity' "
        "RETURNING id"
    )


def expire_leases(schema: str) -> str:
    """End the leases of the executing jobs among ids $1 now; their ids
    (``testing.faults.expire_lease``)."""
    return (
        f"UPDATE {quote(schema)}.job SET lease_expires_at = now() - interval '1 millisecond' "
        "WHERE id = ANY($1::bigint[]) AND status = 'executing' RETURNING id"
    )


def terminate_worker_connections() -> str:
    """Cut every acta worker connection (named ``acta:*``) to the current database but this
    one (``testing.faults.database_outage``)."""
    return (
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
        "AND application_name LIKE 'acta:%'"
    )


def schema_tables() -> str:
    """The tables of schema $1 but the version table $2 (the pytest plugin empties them
    between tests)."""
    return (
        "SELECT tablename FROM pg_tables WHERE schemaname = $1 AND tablename <> $2 "
        "ORDER BY tablename"
    )


def schema_sequences() -> str:
    """The sequences of schema $1 (the pytest plugin restarts them between tests)."""
    return "SELECT sequencename FROM pg_sequences WHERE schemaname = $1 ORDER BY sequencename"
