"""The app of the durable-wait tests (tests/e2e/test_waits.py, tests/faults/test_wait_faults.py),
run in real `acta worker` processes. Every handler start and end goes to the run log
(``tests.harness.record``) with why it runs (``first``, or ``ctx.resumed``) as its key."""

from __future__ import annotations

import asyncio

from acta_sqla import Acta, Context, Fail, WaitForChildren, WaitForSignal
from tests.harness import record

acta = Acta(namespace="waits")


@acta.job()
async def approval(ctx: Context, order: int, timeout: float | None = None) -> dict[str, object]:
    """Waits for "approved" once; its next run answers what it was told."""
    record("start", ctx, ctx.resumed or "first")
    if ctx.resumed is None and "approved" not in ctx.signals:
        record("end", ctx, "waits")
        return WaitForSignal("approved", timeout=timeout)  # type: ignore[return-value]
    record("end", ctx, ctx.resumed or "first")
    return {"order": order, "resumed": ctx.resumed, "signals": ctx.signals}


@acta.job()
async def leaf(ctx: Context, i: int, fail: bool = False, pause: float = 0.0) -> int:
    record("start", ctx, "leaf")
    if pause:
        await asyncio.sleep(pause)
    if fail:
        record("error", ctx, "leaf")
        raise Fail(f"leaf {i} failed")
    record("end", ctx, "leaf")
    return i * 10


@acta.job()
async def fan_out(
    ctx: Context, n: int, fail_index: int = -1, pause: float = 0.0
) -> list[list[object]]:
    """Spawns ``n`` leaves and waits for them; its next run answers what each came to."""
    record("start", ctx, ctx.resumed or "first")
    if ctx.resumed is None:
        record("end", ctx, "waits")
        return WaitForChildren(  # type: ignore[return-value]
            [leaf.job(i=i, fail=i == fail_index, pause=pause) for i in range(n)]
        )
    record("end", ctx, ctx.resumed)
    return [[c.kind, c.status, c.result] for c in ctx.children]


@acta.job()
async def tree(ctx: Context, depth: int) -> int:
    """A tree of waits: each node spawns two of depth - 1; a leaf answers 1; a node the sum."""
    record("start", ctx, ctx.resumed or "first")
    if depth == 0:
        record("end", ctx, "leaf")
        return 1
    if ctx.resumed is None:
        record("end", ctx, "waits")
        return WaitForChildren([tree.job(depth=depth - 1) for _ in range(2)])  # type: ignore[return-value]
    record("end", ctx, ctx.resumed)
    return sum(int(c.result) for c in ctx.children)


@acta.job()
async def cross_lane(ctx: Context, child_lane: str, pause: float = 0.0) -> list[list[object]]:
    """Waits for one leaf queued in ``child_lane``: two of them in each other's lanes wait
    for each other (issue 28, item 10)."""
    record("start", ctx, ctx.resumed or "first")
    if ctx.resumed is None:
        record("end", ctx, "waits")
        return WaitForChildren(  # type: ignore[return-value]
            [leaf.job(i=1, lane=child_lane, pause=pause)]
        )
    record("end", ctx, ctx.resumed)
    return [[c.kind, c.status, c.result] for c in ctx.children]
