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
