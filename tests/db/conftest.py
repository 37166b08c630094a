"""Fixtures of the db tier (real PostgreSQL) beyond the shared ones of tests/conftest.py.

* ``conn``: a plain asyncpg connection to the test database, for the worker's statements
  (which are asyncpg SQL, not SQLAlchemy).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from acta_sqla.database import asyncpg_dsn


@pytest.fixture
async def conn(db: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(asyncpg_dsn(db))
    try:
        yield c
    finally:
        await c.close()
