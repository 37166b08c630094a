"""The app of the admission e2e tests (tests/e2e/test_admission.py), run in real
`acta worker` processes.

Every handler start and end is appended to the file named by ACTA_E2E_LOG as one line
``<event> <job_id> <attempt> <pid> <unix time> <key>`` (O_APPEND writes of one short line
do not interleave between processes): the oracle of what ran when.
"""

from __future__ import annotations

import asyncio
import os
import time

from acta_sqla import Acta, Context

acta = Acta(namespace="admission")


def record(event: str, ctx: Context, key: str) -> None:
    path = os.environ.get("ACTA_E2E_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{event} {ctx.job_id} {ctx.attempt} {os.getpid()} {time.time():.6f} {key}\n")


@acta.job(concurrency_key="{key}", concurrency_limit=2)
async def keyed(ctx: Context, key: str, n: int = 0) -> None:
    record("start", ctx, key)
    await asyncio.sleep(0.02)
    record("end", ctx, key)


@acta.job(rate="10/s")
async def rated(ctx: Context, n: int = 0) -> None:
    record("start", ctx, "rated")
    record("end", ctx, "rated")


@acta.job(lane="{line}")
async def laned(ctx: Context, line: str, seq: int = 0) -> None:
    record("start", ctx, line)
    await asyncio.sleep(0.01)
    record("end", ctx, line)
