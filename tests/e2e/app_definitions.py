"""The app of the live-definitions tests (tests/e2e/test_definitions.py,
tests/faults/test_definition_faults.py), run in real `acta worker` processes; each run's
start and end go to the run log with the kind as key."""

from __future__ import annotations

import asyncio

from acta_sqla import Acta, Context
from tests.harness import record

acta = Acta(namespace="defs")


@acta.job(timeout=60, max_attempts=1, concurrency_key="all", concurrency_limit=4)
async def held(ctx: Context, seconds: float = 0.3) -> None:
    record("start", ctx, "held")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:  # its timeout: the run ends here
        record("cancel", ctx, "held")
        raise
    record("end", ctx, "held")


@acta.job()
async def quick(ctx: Context) -> None:
    record("start", ctx, "quick")
    record("end", ctx, "quick")
