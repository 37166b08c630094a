"""Helpers for your own tests.

``await drain(acta, database_url=...)`` runs every due job in-process through the same
pipeline ``acta worker`` uses (claimer, executors, finalizer), and returns when no job is
due and nothing is in flight. Jobs scheduled for later (including retries whose backoff
has not passed) are left for a later drain; pass ``include_scheduled=True`` to make every
ready job of the namespace due now first.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from .app import Acta
from .database import asyncpg_dsn
from .database import database_url as resolve_url
from .queries import admin
from .settings import ActaSettings, load_settings


@dataclass(frozen=True, slots=True)
class DrainResult:
    claimed: int
    """Rows the drain claimed (a job retried within the drain counts each time)."""
    batches: int
    """complete_executions calls made."""
    crashed: bool
    """True if a stage of the worker died of an internal error (a bug in acta)."""


async def drain(
    acta: Acta,
    *,
    database_url: str | None = None,
    settings: ActaSettings | None = None,
    include_scheduled: bool = False,
    executors: int | None = None,
) -> DrainResult:
    """Run every due job of ``acta``'s namespace to completion, in this process."""
    from .worker import Worker

    settings = settings or load_settings(
        database_url=database_url, namespace=acta.namespace, executors=executors
    )
    if include_scheduled:
        await _make_due(settings, acta.namespace)
    worker = Worker(acta, settings, burst=True, grace=0)
    await worker.run()
    return DrainResult(
        claimed=worker.claimer.claimed_rows,
        batches=worker.finalizer.batches,
        crashed=worker.crashed,
    )


async def _make_due(settings: ActaSettings, namespace: str) -> None:
    conn = await asyncpg.connect(asyncpg_dsn(resolve_url(settings)))
    try:
        await conn.execute(admin.make_due(settings.db_schema), namespace)
    finally:
        await conn.close()
