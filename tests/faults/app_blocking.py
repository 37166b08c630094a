"""Handlers that block their worker's event loop (issue 10 item 1), for real `acta worker`
processes: ``acta worker --app tests.faults.app_blocking:acta``.

The most common asyncio mistake: blocking work (``time.sleep``, a CPU loop, a sync driver)
inside an ``async def`` handler. Runs are recorded in the run log of ``tests.faults.app``
(``ACTA_RUNS_LOG``), so the oracle checks them the same way. The namespace is the fault
tests' own, and ``quick`` (an innocent ``asyncio.sleep``) is served here too, so that
innocent jobs can share the blocked loop.
"""

from __future__ import annotations

import os
import time
from typing import Any

from acta_sqla import Acta, Context
from tests.faults.app import _run
from tests.harness import record

acta = Acta(namespace="faults")


@acta.job(timeout=120)
async def quick(ctx: Context, pause: float = 0.0) -> dict[str, Any]:
    """Innocent: sleeps ``pause`` seconds without blocking the loop."""
    return await _run(ctx, pause)


@acta.job(timeout=120)
async def blocks_loop(ctx: Context, seconds: float) -> dict[str, Any]:
    """Blocks its worker's event loop for ``seconds`` (``time.sleep`` in an async handler)."""
    record("start", ctx)
    time.sleep(seconds)  # noqa: ASYNC251 -- the fault under test
    record("end", ctx)
    return {"pid": os.getpid(), "execution": ctx.execution_id}


@acta.job(timeout=6)
async def blocks_loop_in(ctx: Context, pid: int, seconds: float) -> dict[str, Any]:
    """Blocks the event loop of worker process ``pid`` for ``seconds`` (far past its 6 s
    execution timeout: a loop that does not come back); returns at once anywhere else."""
    record("start", ctx)
    if os.getpid() == pid:
        time.sleep(seconds)  # noqa: ASYNC251 -- the fault under test
    record("end", ctx)
    return {"pid": os.getpid(), "execution": ctx.execution_id}
