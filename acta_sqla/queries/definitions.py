"""Kinds' policies: store what the code declares, load the effective ones.

Each builder returns SQL text with asyncpg ``$n`` parameters for one schema; ``WorkerSQL``
renders them once per worker. No SQLAlchemy here."""

from __future__ import annotations

from ._render import quote


def store_definitions(schema: str) -> str:
    """Store the code's declared policies; a change moves the namespace's definitions version
    so that every worker reloads within one heartbeat."""
    s = quote(schema)
    return f"""
        WITH d AS (
            SELECT * FROM unnest($2::text[], $3::text[]) AS d(kind, declared)
        ),
        up AS (
            INSERT INTO {s}.definition AS def (namespace, kind, declared)
            SELECT $1, d.kind, d.declared::jsonb FROM d
            ON CONFLICT (namespace, kind) DO UPDATE
                SET declared = excluded.declared, updated_at = now()
                WHERE def.declared IS DISTINCT FROM excluded.declared
            RETURNING 1
        )
        UPDATE {s}.namespace SET definitions_version = definitions_version + 1
        WHERE name = $1 AND EXISTS (SELECT 1 FROM up)
        RETURNING definitions_version"""


def load_definitions(schema: str) -> str:
    """The namespace's definitions version and every kind's declared and override policies
    (one row with a null kind when the namespace has none)."""
    s = quote(schema)
    return f"""
        SELECT d.kind, d.declared::text, d.overrides::text, n.definitions_version
        FROM {s}.namespace n LEFT JOIN {s}.definition d ON d.namespace = n.name
        WHERE n.name = $1"""
