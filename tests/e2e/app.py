"""The app the e2e tests run in real `acta worker` processes.

Every handler start and end is appended to the run log named by ACTA_RUNS_LOG
(``tests.harness.record``; read back with ``tests.harness.read_runs``): what ran.
"""

from __future__ import annotations

import asyncio

from acta_sqla import Acta, Context
from tests.harness import record

acta = Acta(namespace="e2e")


@acta.job
async def work(ctx: Context, n: int = 0) -> dict[str, int]:
    record("start", ctx)
    record("end", ctx)
    return {"n": n}


@acta.job(max_attempts=3, backoff_base=0.0)
async def always_fails(ctx: Context) -> None:
    record("start", ctx)
    raise RuntimeError(f"attempt {ctx.attempt} failed")


@acta.job(timeout=0.3, max_attempts=1)
async def too_slow(ctx: Context) -> None:
    record("start", ctx)
    await asyncio.sleep(30)


@acta.job(timeout=120)
async def sleepy(ctx: Context, seconds: float) -> str:
    record("start", ctx)
    await asyncio.sleep(seconds)
    record("end", ctx)
    return "rested"


@acta.job(max_attempts=50, backoff_base=0.05, backoff_max=0.2)
async def exclusive(ctx: Context) -> None:
    """Under a named lock with a short wait; a job that cannot take it is retried soon (a
    short backoff: the test is about exclusion, not about the retry's delay)."""
    async with ctx.lock("the-one-printer", wait=0.2):
        record("start", ctx)
        await asyncio.sleep(0.01)
        record("end", ctx)
