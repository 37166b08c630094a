"""A scratch database for one benchmark: dropped if left over, created, migrated to head,
and dropped again at the end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from sqlalchemy.engine import make_url


@asynccontextmanager
async def scratch_database(dsn: str, name: str) -> AsyncIterator[str]:
    """Database ``name`` on the server of ``dsn`` (a role that may CREATE DATABASE), fresh
    and migrated: its URL, for the ``async with`` block."""
    from acta_sqla import migrate

    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
        url = make_url(dsn).set(database=name).render_as_string(hide_password=False)
        await asyncio.to_thread(migrate.upgrade, url)
        yield url
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
