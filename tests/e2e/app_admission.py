"""The app of the admission e2e tests (tests/e2e/test_admission.py), run in real
`acta worker` processes.

Every handler start and end goes to the run log (``tests.harness.record``, read back with
``tests.harness.read_runs``) with its concurrency key or lane as the run's ``key``: the
oracle of what ran when, and under which key.
"""

from __future__ import annotations

import asyncio

from acta_sqla import Acta, Context
from tests.harness import record

acta = Acta(namespace="admission")


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
