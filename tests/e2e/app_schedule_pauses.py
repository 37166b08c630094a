"""The app of tests/e2e/test_schedules.py's pause race, run in a real `acta worker`:
three 1-second schedules (``every-second-0`` … ``-2``) whose fires write
``<schedule>:<tick>`` to the run log as their key, so that three pause loops can run at
once, each on its own schedule."""

from __future__ import annotations

import asyncio

from acta_sqla import Acta, Context
from tests.harness import record

acta = Acta(namespace="sched-pauses")

SCHEDULES = tuple(f"every-second-{i}" for i in range(3))


@acta.job(concurrency_key="beat:{label}")
async def beat(ctx: Context, label: str = "") -> None:
    tick = str(int(ctx.scheduled_at.timestamp())) if ctx.scheduled_at else "none"
    record("start", ctx, f"{label}:{tick}")
    await asyncio.sleep(0.05)
    record("end", ctx, f"{label}:{tick}")


for name in SCHEDULES:
    acta.schedule(name, "* * * * * *", beat, args={"label": name}, missed="all")
