"""The app the fault-injection tests run in real `acta worker` processes (and in-process).

Every handler start and end goes to the run log (``tests.harness.record``: one line per
event, ``start``, ``end`` (returned), ``cancel`` (cancelled: deadline, lease lost,
shutdown) or ``error`` (raised), with CLOCK_MONOTONIC times comparable across workers).

Every handler returns ``{"pid": ..., "execution": ...}`` so that a job's stored result
names the attempt that wrote it.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from acta_sqla import Acta, Context
from tests.harness import record

acta = Acta(namespace="faults")


async def _run(ctx: Context, seconds: float) -> dict[str, Any]:
    record("start", ctx)
    try:
        if seconds > 0:
            await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        record("cancel", ctx)
        raise
    except BaseException:
        record("error", ctx)
        raise
    record("end", ctx)
    return {"pid": os.getpid(), "execution": ctx.execution_id}


@acta.job(timeout=120)
async def quick(ctx: Context, pause: float = 0.0) -> dict[str, Any]:
    """Sleeps ``pause`` seconds."""
    return await _run(ctx, pause)


@acta.job(timeout=120)
async def slow_in(ctx: Context, pid: int, slow: float, fast: float = 0.0) -> dict[str, Any]:
    """Sleeps ``slow`` seconds in the worker process ``pid``, ``fast`` seconds anywhere else:
    the test knows which worker it will stop or kill, whatever the attempt count says."""
    return await _run(ctx, slow if os.getpid() == pid else fast)


@acta.job(timeout=120, max_attempts=1)
async def exits_worker(ctx: Context) -> None:
    """Takes its worker down at once, as a segfaulting C extension would."""
    record("start", ctx)
    os._exit(3)


@acta.job(timeout=120)
async def ignores_cancel(ctx: Context) -> None:
    """Swallows every cancellation (a common asyncio mistake: ``except BaseException``)."""
    record("start", ctx)
    while True:
        try:
            await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            record("cancel", ctx)
