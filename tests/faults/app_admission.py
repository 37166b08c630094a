"""The app of the admission fault tests (tests/faults/test_admission_faults.py).

Every handler start and end goes to the run log (``tests.harness.record``), as in
tests/faults/app.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from acta_sqla import Acta, Context
from tests.harness import record

acta = Acta(namespace="faults")


@acta.job(concurrency_key="{key}", concurrency_limit=1, max_attempts=5)
async def keyed_hold(ctx: Context, key: str, seconds: float = 0.0) -> dict[str, Any]:
    """Holds its key's one slot for ``seconds`` on its first attempt, briefly after."""
    record("start", ctx)
    await asyncio.sleep(seconds if ctx.attempt == 1 else 0.05)
    record("end", ctx)
    return {"execution": ctx.execution_id}


@acta.job(lane="{line}", max_attempts=5)
async def laned_hold(ctx: Context, line: str, seconds: float = 0.0) -> dict[str, Any]:
    """A lane's job: holds the lane for ``seconds`` on its first attempt, briefly after."""
    record("start", ctx)
    await asyncio.sleep(seconds if ctx.attempt == 1 else 0.05)
    record("end", ctx)
    return {"execution": ctx.execution_id}
