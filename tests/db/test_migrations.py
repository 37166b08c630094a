"""acta's own migrations: no drift between models and migrations, a clean round trip on an
empty database, and a non-default schema."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
from sqlalchemy import create_engine, select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from acta_sqla import Job, migrate
from acta_sqla.models import SCHEMA, Base

REPO_ROOT = Path(__file__).resolve().parents[2]
ALEMBIC_TIMEOUT_SECONDS = 60


def _alembic(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The real `alembic` command, from the repo root (where alembic.ini is)."""
    script = Path(sys.executable).parent / "alembic"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "alembic"]
    return subprocess.run(
        [*cmd, *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=ALEMBIC_TIMEOUT_SECONDS,
    )


def _inventory(url: str, schema: str = SCHEMA) -> dict[str, set[str]]:
    """What exists in ``schema``: tables, functions, triggers on the job table, sequences."""
    with psycopg.connect(url) as conn:

        def names(sql: str) -> set[str]:
            return {row[0] for row in conn.execute(sql, (schema,))}

        return {
            "tables": names("SELECT tablename FROM pg_tables WHERE schemaname = %s"),
            "functions": names(
                "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = %s"
            ),
            "triggers": names(
                "SELECT t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND NOT t.tgisinternal"
            ),
            "sequences": names("SELECT sequencename FROM pg_sequences WHERE schemaname = %s"),
        }


MODEL_TABLES = {table.name for table in Base.metadata.tables.values()}


def test_alembic_upgrade_head_then_check_finds_no_drift(
    scratch_database: Callable[[], str], acta_env_for: Callable[..., dict[str, str]]
) -> None:
    env = acta_env_for(scratch_database())

    upgrade = _alembic("upgrade", "head", env=env)
    assert upgrade.returncode == 0, upgrade.stderr

    check = _alembic("check", env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "No new upgrade operations detected" in check.stdout + check.stderr


def test_upgrade_downgrade_upgrade_on_an_empty_database(
    scratch_database: Callable[[], str],
) -> None:
    url = scratch_database()
    assert migrate.current(url) is None

    migrate.upgrade(url)
    created = _inventory(url)
    assert created["tables"] == MODEL_TABLES | {"alembic_version"}
    assert created["functions"]  # the NOTIFY trigger's
    assert created["triggers"]
    assert "execution_id_seq" in created["sequences"]
    assert migrate.current(url) == migrate.heads()[0]

    migrate.upgrade(url)  # already at head: nothing to do, no error
    migrate.downgrade(url, "base")
    assert _inventory(url) == {
        "tables": {"alembic_version"},
        "functions": set(),
        "triggers": set(),
        "sequences": set(),
    }
    assert migrate.current(url) is None

    migrate.upgrade(url)
    assert _inventory(url) == created
    assert migrate.current(url) == migrate.heads()[0]


def test_upgrade_into_another_schema(scratch_database: Callable[[], str]) -> None:
    url = scratch_database()

    migrate.upgrade(url, schema="acta_custom")

    assert _inventory(url, "acta_custom")["tables"] == MODEL_TABLES | {"alembic_version"}
    assert _inventory(url, SCHEMA)["tables"] == set()
    assert migrate.current(url, schema="acta_custom") == migrate.heads()[0]
    assert migrate.current(url) is None

    # The models map onto it with schema_translate_map.
    engine = create_engine(
        make_url(url).set(drivername="postgresql+psycopg"),
        execution_options={"schema_translate_map": {SCHEMA: "acta_custom"}},
    )
    try:
        with Session(engine) as session:
            session.add(Job(kind="ping", args={"n": 1}))
            session.commit()
            assert session.scalars(select(Job.args)).all() == [{"n": 1}]
    finally:
        engine.dispose()


def test_migrations_are_found_by_the_package() -> None:
    path = migrate.migrations_path()
    assert (path / "env.py").exists()
    assert any((path / "versions").glob("*.py"))
    assert migrate.heads()
