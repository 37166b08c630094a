"""Fixtures of the db tier (real PostgreSQL) beyond the shared ones of tests/conftest.py.

* ``conn``: a plain asyncpg connection to the test database, for the worker's statements
  (which are asyncpg SQL, not SQLAlchemy).
* ``store``: a registered worker's ``WorkerStore`` (namespace ``default``, the default 45 s
  heartbeat); :func:`new_store` makes more (another namespace, a second worker).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from acta_sqla.database import asyncpg_dsn
from acta_sqla.settings import Timings
from acta_sqla.store import WorkerStore


@pytest.fixture
async def conn(db: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(asyncpg_dsn(db))
    try:
        yield c
    finally:
        await c.close()


async def new_store(db: str, namespace: str = "default") -> WorkerStore:
    store = WorkerStore(db, "acta", namespace, Timings.from_heartbeat(45.0))
    await store.register_worker("test-host", 1, 8, ["k"], "test")
    return store


@pytest.fixture
async def store(db: str) -> AsyncIterator[WorkerStore]:
    s = await new_store(db)
    try:
        yield s
    finally:
        await s.close()
