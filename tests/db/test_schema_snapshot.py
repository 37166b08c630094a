"""The database code as it stands at the head revision, in one checked-in file
(acta_sqla/queries/schema.sql): every function of acta's schema (``pg_get_functiondef``),
every trigger (``pg_get_triggerdef``), and the tables, sequences and indexes, read back from
a freshly migrated database. A reader sees the current ``admit``, the current terminal
effects, without digging through the migrations that wrote them; migrations stay frozen
history.

The test migrates a new database to head, renders the snapshot from it and compares it
with the file, so a new migration, or a hand edit
of the file, fails here. After an intended change (a new migration), regenerate it::

    ACTA_UPDATE_SQL_SNAPSHOT=1 pytest tests/db/test_schema_snapshot.py
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from acta_sqla import migrate
from acta_sqla.models import SCHEMA
from acta_sqla.settings import SCHEMA_HEAD, SCHEMA_VERSION_TABLE
from tests.conftest import _libpq

SNAPSHOT = Path(__file__).parents[2] / "acta_sqla" / "queries" / "schema.sql"
UPDATE_ENV = "ACTA_UPDATE_SQL_SNAPSHOT"
COMMAND = f"{UPDATE_ENV}=1 pytest tests/db/test_schema_snapshot.py"

_SEQUENCES = """
SELECT sequencename, data_type::text, start_value, increment_by, min_value, max_value,
       cache_size, cycle
  FROM pg_sequences WHERE schemaname = %(schema)s ORDER BY sequencename
"""

_TABLES = """
SELECT c.oid, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p') AND c.relname <> %(version)s
 ORDER BY c.relname
"""

_COLUMNS = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
       pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated
  FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE a.attrelid = %(oid)s AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum
"""

# NOT NULL is said on the column: PostgreSQL 18 also lists it as a constraint (contype
# 'n'), 15 does not, and the file must read the same from either.
_CONSTRAINTS = """
SELECT conname, pg_get_constraintdef(oid, true) FROM pg_constraint
 WHERE conrelid = %(oid)s AND contype <> 'n' ORDER BY contype, conname
"""

_INDEXES = """
SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
 WHERE x.indrelid = %(oid)s
   AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.oid)
 ORDER BY i.relname
"""

_FUNCTIONS = """
SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid)
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = %(schema)s
 ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)
"""

_TRIGGERS = """
SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid, true)
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = %(schema)s AND NOT t.tgisinternal
 ORDER BY c.relname, t.tgname
"""


def _table(conn: psycopg.Connection, oid: int, name: str) -> list[str]:
    lines = []
    for column, type_, not_null, default, identity, generated in conn.execute(
        _COLUMNS, {"oid": oid}
    ):
        line = f"    {column} {type_}"
        if generated == "s":
            line += f" GENERATED ALWAYS AS ({default}) STORED"
        elif default is not None:
            line += f" DEFAULT {default}"
        if identity:
            line += " GENERATED " + ("ALWAYS" if identity == "a" else "BY DEFAULT") + " AS IDENTITY"
        if not_null:
            line += " NOT NULL"
        lines.append(line)
    for constraint, definition in conn.execute(_CONSTRAINTS, {"oid": oid}):
        lines.append(f"    CONSTRAINT {constraint} {definition}")
    blocks = [f"-- table {name}\nCREATE TABLE {SCHEMA}.{name} (\n" + ",\n".join(lines) + "\n);"]
    for index, definition in conn.execute(_INDEXES, {"oid": oid}):
        blocks.append(f"-- index {index}\n{definition};")
    return blocks


def render(url: str) -> str:
    """The snapshot of acta's schema in the database at ``url`` (migrated to head)."""
    params = {"schema": SCHEMA, "version": SCHEMA_VERSION_TABLE}
    blocks = [
        f"-- acta's database code at revision {SCHEMA_HEAD}, read back from a freshly migrated\n"
        "-- database (tests/db/test_schema_snapshot.py): the tables, sequences and indexes,\n"
        "-- every function (pg_get_functiondef) and trigger (pg_get_triggerdef) as they stand.\n"
        "-- Generated: do not edit by hand (the test fails). After a new migration:\n"
        f"--   {COMMAND}"
    ]
    with psycopg.connect(_libpq(url), autocommit=True) as conn:
        for name, type_, start, increment, min_, max_, cache, cycle in conn.execute(
            _SEQUENCES, params
        ):
            blocks.append(
                f"-- sequence {name}\nCREATE SEQUENCE {SCHEMA}.{name} AS {type_} "
                f"START {start} INCREMENT {increment} MINVALUE {min_} MAXVALUE {max_} "
                f"CACHE {cache}{' CYCLE' if cycle else ''};"
            )
        for oid, name in conn.execute(_TABLES, params).fetchall():
            blocks += _table(conn, oid, name)
        for name, arguments, definition in conn.execute(_FUNCTIONS, params):
            body = "\n".join(line.rstrip() for line in definition.strip().splitlines())
            blocks.append(f"-- function {name}({arguments})\n{body};")
        for table, name, definition in conn.execute(_TRIGGERS, params):
            blocks.append(f"-- trigger {name} on {table}\n{definition};")
    return "\n\n".join(blocks) + "\n"


def test_the_head_schema_matches_the_checked_in_snapshot(
    scratch_database: Callable[[], str],
) -> None:
    # A database of its own, migrated here: not the session's, which other tests may have
    # altered (a trigger disabled and restored, say).
    url = scratch_database()
    migrate.upgrade(url)
    rendered = render(url)
    if os.environ.get(UPDATE_ENV) == "1":
        SNAPSHOT.write_text(rendered)
    assert SNAPSHOT.exists(), f"no {SNAPSHOT.name}: run {COMMAND} to create it"
    expected = SNAPSHOT.read_text()
    if rendered != expected:
        diff = difflib.unified_diff(
            expected.splitlines(), rendered.splitlines(), SNAPSHOT.name, "migrated", lineterm=""
        )
        pytest.fail(
            f"the migrated schema differs from {SNAPSHOT.name} (a new migration, or an edit by "
            f"hand); review and regenerate it with {COMMAND}\n" + "\n".join(list(diff)[:200])
        )
