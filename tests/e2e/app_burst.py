"""The app of the burst tests (tests/e2e/test_burst.py): jobs admission bounces (a
concurrency key of limit 1, a rate), and a kind whose jobs are delayed on purpose. Run by
``testing.drain`` in the test's process and by a real `acta worker --burst`."""

from __future__ import annotations

import asyncio

from acta_sqla import Acta, Context

acta = Acta(namespace="burst")


@acta.job(concurrency_key="{key}", concurrency_limit=1)
async def keyed(ctx: Context, key: str, n: int = 0) -> None:
    await asyncio.sleep(0.05)  # long enough that its batch-mates of the key bounce


@acta.job(rate="20/s")
async def rated(ctx: Context, n: int = 0) -> None:
    return None


@acta.job
async def later(ctx: Context) -> None:
    return None
