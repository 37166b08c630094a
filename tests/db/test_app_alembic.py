"""An application's own Alembic environment next to acta's (docs/migrations.md).

* The application's autogenerate, comparing its own MetaData with a database where acta is
  migrated, proposes nothing about acta's schema: by default, and with
  ``include_schemas=True`` plus ``exclude_acta_schema``.
* The ``env.py`` printed in docs/migrations.md, run as the application would run it,
  brings both histories to head, each in its own version table.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import Column, Engine, Integer, MetaData, Table, Text, create_engine, text
from sqlalchemy.engine import make_url

from acta_sqla import migrate
from acta_sqla.models import SCHEMA
from alembic import command

DOCS = Path(__file__).resolve().parents[2] / "docs" / "migrations.md"


def _app_metadata() -> MetaData:
    metadata = MetaData()
    Table("app_user", metadata, Column("id", Integer, primary_key=True), Column("name", Text))
    return metadata


def _flatten(diffs: list[Any]) -> list[tuple[Any, ...]]:
    # compare_metadata returns tuples, or lists of tuples for column modifications.
    out: list[tuple[Any, ...]] = []
    for diff in diffs:
        out.extend(diff if isinstance(diff, list) else [diff])
    return out


def _schemas_touched(diffs: list[Any]) -> set[str | None]:
    """The schema of the table each diff is about (None: the default schema)."""
    touched: set[str | None] = set()
    for diff in _flatten(diffs):
        op = diff[0]
        if op.startswith("modify_") or op in ("add_column", "remove_column"):
            touched.add(diff[1])  # (op, schema, table name, ...)
            continue
        obj = diff[1]
        table = obj if isinstance(obj, Table) else getattr(obj, "table", None)
        touched.add(getattr(table, "schema", None))
    return touched


@pytest.fixture
def app_engine(scratch_database: Callable[[], str]) -> Iterator[Engine]:
    """A new database with acta migrated into it (and nothing of the application's yet)."""
    url = scratch_database()
    migrate.upgrade(url)
    engine = create_engine(make_url(url).set(drivername="postgresql+psycopg"))
    try:
        yield engine
    finally:
        engine.dispose()


def _compare(engine: Engine, metadata: MetaData, **opts: Any) -> list[Any]:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"target_metadata": metadata, **opts})
        return compare_metadata(context, metadata)


def test_default_autogenerate_does_not_see_acta(app_engine: Engine) -> None:
    diffs = _compare(app_engine, _app_metadata())

    assert [(d[0], d[1].name) for d in _flatten(diffs)] == [("add_table", "app_user")]
    assert SCHEMA not in _schemas_touched(diffs)


def test_include_schemas_without_the_filter_would_drop_acta(app_engine: Engine) -> None:
    # The hazard the filter exists for: proves the comparison really sees acta's schema.
    diffs = _compare(app_engine, _app_metadata(), include_schemas=True)

    dropped = {d[1].name for d in _flatten(diffs) if d[0] == "remove_table"}
    assert {"job", "execution", "worker"} <= dropped
    assert SCHEMA in _schemas_touched(diffs)


def test_include_schemas_with_exclude_acta_schema(app_engine: Engine) -> None:
    diffs = _compare(
        app_engine,
        _app_metadata(),
        include_schemas=True,
        include_name=migrate.exclude_acta_schema,
    )

    assert [(d[0], d[1].name) for d in _flatten(diffs)] == [("add_table", "app_user")]
    assert SCHEMA not in _schemas_touched(diffs)


def test_exclude_acta_schema_follows_acta_schema(
    scratch_database: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = scratch_database()
    migrate.upgrade(url, schema="jobs")
    monkeypatch.setenv("ACTA_SCHEMA", "jobs")
    engine = create_engine(make_url(url).set(drivername="postgresql+psycopg"))
    try:
        metadata = _app_metadata()
        metadata.tables["app_user"].to_metadata(metadata, schema="reports")
        with engine.begin() as conn:
            conn.execute(text("CREATE SCHEMA reports"))
        diffs = _compare(
            engine, metadata, include_schemas=True, include_name=migrate.exclude_acta_schema
        )
    finally:
        engine.dispose()

    # Other schemas are still compared; only acta's is skipped.
    assert sorted((d[0], str(d[1].schema)) for d in _flatten(diffs)) == [
        ("add_table", "None"),
        ("add_table", "reports"),
    ]


def test_exclude_acta_schema_keeps_everything_else() -> None:
    assert migrate.exclude_acta_schema("acta", "schema", {}) is False
    assert migrate.exclude_acta_schema(None, "schema", {}) is True
    assert migrate.exclude_acta_schema("public", "schema", {}) is True
    assert migrate.exclude_acta_schema("job", "table", {"schema_name": None}) is True


# ------------------------------------------------------------ the env.py of the docs

APP_MODELS = """
from sqlalchemy import Column, Integer, Text
from sqlalchemy.orm import DeclarativeBase


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "app_user"
    id = Column(Integer, primary_key=True)
    name = Column(Text)
"""

APP_REVISION = """
import sqlalchemy as sa
from alembic import op

revision = "app0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "app_user",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.Text()),
    )


def downgrade() -> None:
    op.drop_table("app_user")
"""


def _docs_env_py() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S)
    [env_py] = [b for b in blocks if "def run_migrations_online" in b]
    return env_py


@pytest.fixture
def app_alembic(
    tmp_path: Path, scratch_database: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Config, Engine]]:
    """An application's Alembic environment using the docs' env.py, on an empty database."""
    package = tmp_path / "src" / "myapp"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(textwrap.dedent(APP_MODELS))
    env = tmp_path / "migrations"
    (env / "versions").mkdir(parents=True)
    (env / "env.py").write_text(_docs_env_py())
    (env / "versions" / "app0001_users.py").write_text(textwrap.dedent(APP_REVISION))
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    for name in ("myapp", "myapp.models"):
        monkeypatch.delitem(sys.modules, name, raising=False)

    url = make_url(scratch_database()).set(drivername="postgresql+psycopg")
    cfg = Config()
    cfg.set_main_option("script_location", str(env))
    # Config values are interpolated: a socket path's %2F must be written %%2F.
    rendered = url.render_as_string(hide_password=False).replace("%", "%%")
    cfg.set_main_option("sqlalchemy.url", rendered)
    engine = create_engine(url)
    try:
        yield cfg, engine
    finally:
        engine.dispose()
        for name in ("myapp", "myapp.models"):
            sys.modules.pop(name, None)


def _versions(engine: Engine) -> tuple[list[str], list[str]]:
    with engine.connect() as conn:
        app = conn.scalars(text("SELECT version_num FROM public.alembic_version")).all()
        acta = conn.scalars(text(f"SELECT version_num FROM {SCHEMA}.alembic_version")).all()
    return list(app), list(acta)


def test_docs_env_py_runs_both_histories(app_alembic: tuple[Config, Engine]) -> None:
    cfg, engine = app_alembic

    command.upgrade(cfg, "head")

    assert _versions(engine) == (["app0001"], migrate.heads())
    with engine.connect() as conn:
        assert conn.scalar(text("SELECT to_regclass('public.app_user')")) == "app_user"
        assert conn.scalar(text(f"SELECT to_regclass('{SCHEMA}.job')")) == f"{SCHEMA}.job"

    # The application's own `alembic check` sees no drift: acta's tables are left alone.
    command.check(cfg)

    # Taking the application's history back does not touch acta's.
    command.downgrade(cfg, "base")
    assert _versions(engine) == ([], migrate.heads())
    with engine.connect() as conn:
        assert conn.scalar(text("SELECT to_regclass('public.app_user')")) is None
        assert conn.scalar(text(f"SELECT to_regclass('{SCHEMA}.job')")) == f"{SCHEMA}.job"


def test_upgrade_connection_before_the_apps_own_migrations(
    app_alembic: tuple[Config, Engine],
) -> None:
    cfg, engine = app_alembic
    env_py = Path(cfg.get_main_option("script_location") or "") / "env.py"
    source = env_py.read_text()
    # Move the call to the top of the connection block, before context.configure.
    source = source.replace("        upgrade_connection(connection)\n", "")
    source = source.replace(
        "    with connectable.connect() as connection:\n",
        "    with connectable.connect() as connection:\n        upgrade_connection(connection)\n",
    )
    env_py.write_text(source)

    command.upgrade(cfg, "head")

    assert _versions(engine) == (["app0001"], migrate.heads())


def test_upgrade_connection_commits_only_what_it_began(
    scratch_database: Callable[[], str],
) -> None:
    engine = create_engine(make_url(scratch_database()).set(drivername="postgresql+psycopg"))
    job_table = text(f"SELECT to_regclass('{SCHEMA}.job')")
    try:
        # Inside the caller's transaction: acta's tables share its fate.
        with engine.connect() as conn:
            conn.begin()
            migrate.upgrade_connection(conn)
            assert conn.scalar(job_table) is not None
            conn.rollback()
        with engine.connect() as conn:
            assert conn.scalar(job_table) is None

        # No transaction open: acta's migrations are committed before it returns.
        with engine.connect() as conn:
            migrate.upgrade_connection(conn)
            assert not conn.in_transaction()
        with engine.connect() as conn:
            assert conn.scalar(job_table) is not None
    finally:
        engine.dispose()
