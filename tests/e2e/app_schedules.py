"""The app of the schedule tests (tests/e2e/test_schedules.py,
tests/faults/test_schedule_faults.py), run in real `acta worker` processes: a 1-second
schedule whose fires write their tick (epoch seconds) to the run log as their key. The
kind's priority and concurrency key are given to every fire (``FIRE_FIELDS``), whichever
statement writes it: a worker's start-up or recovery pass, a fire's completion, the CLI."""

from __future__ import annotations

import asyncio

from acta_sqla import Acta, Context
from tests.harness import record

acta = Acta(namespace="sched")


@acta.job(priority=-1, concurrency_key="beat:{label}")
async def beat(ctx: Context, label: str = "") -> None:
    tick = str(int(ctx.scheduled_at.timestamp())) if ctx.scheduled_at else "none"
    record("start", ctx, tick)
    await asyncio.sleep(0.05)
    record("end", ctx, tick)


acta.schedule("every-second", "* * * * * *", beat, args={"label": "s"}, missed="all")

FIRE_FIELDS = (-1, "beat:s")
"""(priority, concurrency_key) of every fire of ``every-second``."""
