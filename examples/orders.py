"""Durable waits: an order charges each item as a child job, then waits for the warehouse
to say it shipped (a signal), for at most a week. Run a worker on it with
``acta worker --app examples.orders:acta`` and send the signal with
``acta signal <order job id> shipped --payload '{"tracking": "1Z999"}'``."""

from __future__ import annotations

from acta_sqla import Acta, Context, Fail, WaitForChildren, WaitForSignal

acta = Acta(namespace="orders")

WEEK = 7 * 24 * 3600.0


@acta.job(max_attempts=3)
async def charge_item(ctx: Context, order_id: int, sku: str) -> dict[str, object]:
    return {"order_id": order_id, "sku": sku, "charged": True}


@acta.job()
async def fulfil_order(ctx: Context, order_id: int, skus: list[str]) -> dict[str, object]:
    if ctx.resumed is None:
        # First run: one child per item; the order waits until every one has ended.
        return WaitForChildren(  # type: ignore[return-value]
            [charge_item.job(order_id=order_id, sku=sku) for sku in skus]
        )
    if ctx.resumed == "children":
        unpaid = [c.id for c in ctx.children if c.status != "succeeded"]
        if unpaid:
            raise Fail(f"order {order_id}: items {unpaid} could not be charged")
        return WaitForSignal("shipped", timeout=WEEK)  # type: ignore[return-value]
    if ctx.resumed == "timeout":
        raise Fail(f"order {order_id} was not shipped within a week")
    return {
        "order_id": order_id,
        "items": len(ctx.children),
        "tracking": ctx.signals["shipped"]["tracking"],
    }
