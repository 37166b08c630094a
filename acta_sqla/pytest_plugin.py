"""acta's pytest plugin: fixtures for testing an application's jobs (docs/testing.md).

Registered through the ``pytest11`` entry point, so it is active wherever acta-sqla is
installed; nothing here runs, connects or imports more than pytest until a test asks for
one of its fixtures:

* ``acta_database_url`` (session): a database of its own for this test session (for each
  pytest-xdist worker: its own), on the server ``ACTA_TEST_DATABASE_URL`` names, or on an
  embedded PostgreSQL started for the session; acta's migrations run once; dropped at the
  end. The URL in plain ``postgresql://`` form.
* ``acta_engine``: an ``AsyncEngine`` (asyncpg) on it, acta's tables emptied first (as
  Django's ``TransactionTestCase`` does), ``ACTA_DATABASE_URL`` set to it for the test (so
  ``drain(acta)`` and the faults find it).
* ``acta_session``: an ``AsyncSession`` of ``acta_engine`` (``expire_on_commit=False``);
  its commits are real, so a worker or ``drain`` in the same test sees them.
* ``acta_sync_engine`` / ``acta_sync_session``: the same for a sync ``Session`` (psycopg 3,
  or psycopg2).
* ``acta_worker``: ``await acta_worker(acta)`` starts an in-process worker for ``acta`` on
  the test database (``executors=`` as ``acta worker``'s) and returns it; it is stopped at
  the end of the test.

The async fixtures need pytest-asyncio (or another plugin that runs async fixtures).
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

try:  # strict mode needs the decorator; auto mode takes it too
    from pytest_asyncio import fixture as _async_fixture
except ImportError:  # pragma: no cover - without pytest-asyncio
    _async_fixture = pytest.fixture  # type: ignore[assignment]

_TRUNCATE_LOCK_TIMEOUT = "10s"


def _plain(url: str, database: str | None = None) -> str:
    from sqlalchemy.engine import make_url

    parsed = make_url(url).set(drivername="postgresql")
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


async def _admin(server_url: str, statement: str) -> None:
    import asyncpg

    from .database import asyncpg_dsn

    conn = await asyncpg.connect(asyncpg_dsn(server_url))
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def _run(coro: Awaitable[Any]) -> Any:
    """Run ``coro`` to its end from a sync fixture (in a thread of its own: a loop may be
    running in this one)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def acta_database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh database for this session (per xdist worker), acta migrated to head."""
    from . import embedded, migrate

    configured = os.environ.get("ACTA_TEST_DATABASE_URL")
    data_dir = None
    if configured:
        server = _plain(configured)
    else:
        data_dir = tmp_path_factory.mktemp("acta-embedded-pg") / "pgdata"
        server = _plain(embedded.start(data_dir))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    name = f"acta_test_{worker}_{secrets.token_hex(4)}"
    try:
        _run(_admin(server, f'CREATE DATABASE "{name}"'))
        url = _plain(server, name)
        try:
            migrate.upgrade(url)
            yield url
        finally:
            _run(_admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        if data_dir is not None:
            embedded.stop(data_dir)


async def _empty_tables(url: str) -> None:
    """Every table of acta's schema emptied (the version table excepted), sequences
    restarted."""
    import asyncpg

    from .database import asyncpg_dsn
    from .queries import admin
    from .schema import SCHEMA
    from .settings import SCHEMA_VERSION_TABLE

    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        tables = await conn.fetch(admin.schema_tables(), SCHEMA, SCHEMA_VERSION_TABLE)
        sequences = await conn.fetch(admin.schema_sequences(), SCHEMA)
        statements = [f"SET lock_timeout = '{_TRUNCATE_LOCK_TIMEOUT}'"]
        if tables:
            listed = ", ".join(f'"{SCHEMA}"."{t[0]}"' for t in tables)
            statements.append(f"TRUNCATE {listed} RESTART IDENTITY CASCADE")
        statements += [f'ALTER SEQUENCE "{SCHEMA}"."{s[0]}" RESTART' for s in sequences]
        await conn.execute("; ".join(statements))
    finally:
        await conn.close()


@pytest.fixture
def _acta_test_database(acta_database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test database, acta's tables empty, ``ACTA_DATABASE_URL`` naming it."""
    _run(_empty_tables(acta_database_url))
    monkeypatch.setenv("ACTA_DATABASE_URL", acta_database_url)
    return acta_database_url


@_async_fixture
async def acta_engine(_acta_test_database: str) -> AsyncIterator[Any]:
    """An ``AsyncEngine`` (asyncpg) on the test database; acta's tables are empty."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(make_url(_acta_test_database).set(drivername="postgresql+asyncpg"))
    try:
        yield engine
    finally:
        await engine.dispose()


@_async_fixture
async def acta_session(acta_engine: Any) -> AsyncIterator[Any]:
    """An ``AsyncSession`` on the test database whose commits are real."""
    from sqlalchemy.ext.asyncio import AsyncSession

    async with AsyncSession(acta_engine, expire_on_commit=False) as session:
        yield session


@pytest.fixture
def acta_sync_engine(_acta_test_database: str) -> Iterator[Any]:
    """A sync ``Engine`` on the test database (psycopg 3, else psycopg2)."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    try:
        import psycopg  # noqa: F401

        driver = "postgresql+psycopg"
    except ImportError:
        try:
            import psycopg2  # type: ignore[import-untyped, unused-ignore]  # noqa: F401

            driver = "postgresql+psycopg2"
        except ImportError:
            pytest.fail("acta_sync_engine needs a sync driver: pip install 'psycopg[binary]'")
    engine = create_engine(make_url(_acta_test_database).set(drivername=driver))
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def acta_sync_session(acta_sync_engine: Any) -> Iterator[Any]:
    """A sync ``Session`` on the test database whose commits are real."""
    from sqlalchemy.orm import Session

    with Session(acta_sync_engine, expire_on_commit=False) as session:
        yield session


@_async_fixture
async def acta_worker(_acta_test_database: str) -> AsyncIterator[Callable[..., Awaitable[Any]]]:
    """``worker = await acta_worker(acta, executors=None)``: an in-process worker for
    ``acta`` on the test database, running while the test runs (stopped at its end)."""
    from contextlib import AsyncExitStack

    from .testing import running_worker

    async with AsyncExitStack() as stack:

        async def start(acta: Any, *, executors: int | None = None, grace: float = 5.0) -> Any:
            return await stack.enter_async_context(
                running_worker(
                    acta, database_url=_acta_test_database, executors=executors, grace=grace
                )
            )

        yield start
