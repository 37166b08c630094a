"""The app the e2e tests run in real `acta worker` processes.

Every handler start and end is appended to the file named by ACTA_E2E_LOG as one line
``<event> <job_id> <attempt> <pid>`` (O_APPEND writes of one short line do not interleave
between processes): the oracle of what ran.
"""

from __future__ import annotations

import asyncio
import os

from acta_sqla import Acta, Context

acta = Acta(namespace="e2e")


def record(event: str, ctx: Context) -> None:
    path = os.environ.get("ACTA_E2E_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{event} {ctx.job_id} {ctx.attempt} {os.getpid()}\n")


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


@acta.job(max_attempts=50)
async def exclusive(ctx: Context) -> None:
    async with ctx.lock("the-one-printer", wait=0.2):
        record("start", ctx)
        await asyncio.sleep(0.01)
        record("end", ctx)
