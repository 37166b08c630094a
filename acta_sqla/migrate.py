"""Running acta's Alembic migrations: from the repo (`alembic upgrade head`), from an
installed package (`acta db upgrade`), or inside an application's own Alembic environment.

To fold acta into your own ``env.py``, call :func:`upgrade_connection` with the connection
your ``run_migrations_online`` already has, before or after your own migrations; acta keeps
its own version table in its schema, so the two histories never mix (docs/migrations.md).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, text

from .database import create_engine
from .errors import ConfigurationError
from .models import SCHEMA, Base
from .queries import admin
from .settings import SCHEMA_HEAD, SCHEMA_VERSION_TABLE, ActaSettings, load_settings

# Constants live in settings so that a worker can check the schema without importing this
# module (and SQLAlchemy with it).
VERSION_TABLE = SCHEMA_VERSION_TABLE
HEAD = SCHEMA_HEAD
_target_schema: str = SCHEMA


def target_schema() -> str:
    """The schema the running migration writes to (``ACTA_SCHEMA``, default ``acta``)."""
    return _target_schema


def migrations_path() -> Path:
    """The folder of env.py and versions/: shipped in the wheel as ``acta_sqla/_migrations``,
    or the repo's ``alembic/`` in a source checkout (editable install)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_migrations", here.parent / "alembic"):
        if (candidate / "env.py").exists():
            return candidate
    raise FileNotFoundError(f"acta's migrations are missing: looked in {here / '_migrations'}")


def alembic_config(
    url: str | None = None, schema: str | None = None, connection: Connection | None = None
) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_path()))
    cfg.attributes["acta_url"] = url
    cfg.attributes["acta_schema"] = schema
    cfg.attributes["connection"] = connection
    return cfg


def upgrade(url: str | None = None, revision: str = "head", schema: str | None = None) -> None:
    from alembic import command

    command.upgrade(alembic_config(url, schema), revision)


def downgrade(url: str | None = None, revision: str = "-1", schema: str | None = None) -> None:
    from alembic import command

    command.downgrade(alembic_config(url, schema), revision)


def upgrade_connection(connection: Connection, schema: str | None = None) -> None:
    """Bring acta's schema to head on an open (sync) connection, e.g. inside your env.py.

    Runs before or after your own migrations. When ``connection`` has no transaction open,
    acta's migrations are committed here; inside your transaction they commit with it.
    """
    from alembic import command
    from alembic import context as alembic_context
    from alembic import op as alembic_op

    # Alembic's `context` and `op` are module-level proxies that a command installs on entry
    # and deletes on exit. Run inside an application's env.py, acta's nested command would
    # delete the application's proxies, and its env.py would then fail (KeyError /
    # AttributeError on `context.configure`). Put them back.
    outer = [
        proxy
        for proxy in (getattr(alembic_context, "_proxy", None), getattr(alembic_op, "_proxy", None))
        if proxy is not None
    ]
    began = not connection.in_transaction()
    try:
        command.upgrade(alembic_config(schema=schema, connection=connection), "head")
    except BaseException:
        if began and connection.in_transaction():
            connection.rollback()
        raise
    finally:
        for proxy in outer:
            proxy._install_proxy()
    # Acta's env found no transaction of the caller's to join and ran in one it began
    # implicitly; without this commit, closing the connection would roll acta's tables back.
    if began and connection.in_transaction():
        connection.commit()


def current(url: str | None = None, schema: str | None = None) -> str | None:
    """The revision the database is at, or None before the first upgrade."""
    settings = load_settings(db_schema=schema)
    resolved = resolve_url(url, settings)

    async def read() -> str | None:
        engine = create_engine(resolved)
        try:
            async with engine.connect() as conn:
                schema = settings.db_schema
                if not await conn.scalar(text(admin.version_table_exists(schema, VERSION_TABLE))):
                    return None
                return await conn.scalar(text(admin.schema_revision(schema, VERSION_TABLE)))
        finally:
            await engine.dispose()

    return asyncio.run(read())


def heads() -> list[str]:
    from alembic.script import ScriptDirectory

    return list(ScriptDirectory.from_config(alembic_config()).get_heads())


def resolve_url(url: str | None, settings: ActaSettings) -> str:
    """``url``, else the settings' (or the embedded default's)."""
    from .database import database_url

    return url or database_url(settings)


def _include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    # Autogenerate (and `alembic check`) compares only acta's own schema.
    if type_ == "schema":
        return name == SCHEMA
    return True


def exclude_acta_schema(name: str | None, type_: str, parent_names: Any) -> bool:
    """An ``include_name`` hook for an application's own Alembic env.py.

    An application whose autogenerate runs with ``include_schemas=True`` would otherwise
    see acta's tables as tables it does not model and propose to drop them::

        context.configure(..., include_schemas=True, include_name=exclude_acta_schema)

    Skips the schema ``acta`` and the one ``ACTA_SCHEMA`` names; everything else is kept.
    (With the default ``include_schemas=False`` autogenerate never looks at acta's schema
    and no filter is needed.)
    """
    if type_ == "schema":
        return name not in _acta_schemas()
    return True


def _acta_schemas() -> set[str]:
    try:
        configured = load_settings().db_schema
    except ConfigurationError:
        # A bad ACTA_* value elsewhere must not break the application's own autogenerate.
        configured = SCHEMA
    return {SCHEMA, configured}


def _configure_and_run(context: Any, connection: Connection, schema: str) -> None:
    global _target_schema
    _target_schema = schema
    connection.execute(text(admin.create_schema(schema)))
    if schema != SCHEMA:
        connection = connection.execution_options(schema_translate_map={SCHEMA: schema})
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        version_table_schema=schema,
        include_schemas=True,
        include_name=_include_name,
        compare_type=True,
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_env(context: Any) -> None:
    """The body of alembic/env.py."""
    cfg = context.config
    attrs = cfg.attributes
    settings = load_settings(db_schema=attrs.get("acta_schema"))
    schema = settings.db_schema
    connection = attrs.get("connection")
    if connection is not None:
        _configure_and_run(context, connection, schema)
        return
    url = attrs.get("acta_url") or cfg.get_main_option("sqlalchemy.url")
    resolved = resolve_url(url, settings)

    async def run() -> None:
        engine = create_engine(resolved)
        try:
            async with engine.connect() as conn:
                await conn.run_sync(lambda c: _configure_and_run(context, c, schema))
                await conn.commit()
        finally:
            await engine.dispose()

    asyncio.run(run())
