"""Sync (``def``) handlers that run past their execution timeout (issue 10 item 3), for
real `acta worker` processes: ``acta worker --app tests.faults.app_sync:acta``.

A thread cannot be killed: a sync handler asked to stop keeps running until it returns.
Runs are recorded in the run log of ``tests.faults.app`` (``ACTA_RUNS_LOG``), so the
oracle checks them the same way.
"""

from __future__ import annotations

import os
import time
from typing import Any

from acta_sqla import Acta, Context
from tests.harness import record

acta = Acta(namespace="faults")


@acta.job(timeout=1, max_attempts=3, backoff_base=0.1)
def overruns(ctx: Context, seconds: float) -> dict[str, Any]:
    """Sleeps ``seconds`` (past its 1 s timeout) on its first attempt, ignoring every request
    to stop; returns at once on later attempts. The short back-off makes a retry due long
    before the first thread ends."""
    record("start", ctx)
    if ctx.attempt == 1:
        time.sleep(seconds)
    record("end", ctx)
    return {"pid": os.getpid(), "execution": ctx.execution_id}


@acta.job(timeout=30, max_attempts=3)
def hangs(ctx: Context, seconds: float) -> dict[str, Any]:
    """Sleeps ``seconds`` on its first attempt, within a timeout that a shutdown reaches
    first; returns at once on later attempts."""
    record("start", ctx)
    if ctx.attempt == 1:
        time.sleep(seconds)
    record("end", ctx)
    return {"pid": os.getpid(), "execution": ctx.execution_id}
