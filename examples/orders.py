"""Durable waits: an order charges each item as a child job, then waits for the warehouse
to say it shipped (a signal), for at most a week. Run a worker on it with
``acta worker --app examples.orders:acta`` and send the signal with
``acta signal <order job id> shipped --payload '{"tracking": "1Z999"}'``, or run it all
in-process with ``python examples/orders.py`` (the embedded PostgreSQL, or
``ACTA_DATABASE_URL``)."""

from __future__ import annotations

import asyncio

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from acta_sqla import Acta, Context, Fail, WaitForChildren, WaitForSignal, engine_options, migrate
from acta_sqla.database import database_url
from acta_sqla.settings import load_settings
from acta_sqla.testing import drain

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


async def run(url: str, schema: str) -> None:
    engine = create_async_engine(
        make_url(url).set(drivername="postgresql+asyncpg"), execution_options=engine_options(schema)
    )
    async with AsyncSession(engine, expire_on_commit=False) as session:
        order = fulfil_order.job(order_id=7, skus=["book", "lamp"])
        session.add(order)
        await session.commit()
        # The worker, in-process: the order spawns a child per item, they run, the order
        # resumes and parks waiting for "shipped".
        await drain(acta, database_url=url)
        await session.refresh(order)
        print(f"order job: {order.status}, waiting for {order.awaited_signal!r}")
        await acta.signal(session, order.id, "shipped", {"tracking": "1Z999"})
        await session.commit()
        await drain(acta, database_url=url)
        await session.refresh(order)
        print(f"order job: {order.status}, result {order.result}")
    await engine.dispose()


def main() -> None:
    settings = load_settings()
    url = database_url(settings)  # ACTA_DATABASE_URL, or the embedded PostgreSQL
    migrate.upgrade(url, "head", settings.db_schema)  # acta's tables (a no-op once done)
    asyncio.run(run(url, settings.db_schema))


if __name__ == "__main__":
    main()
