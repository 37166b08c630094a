"""Signals: a refund waits, holding no worker, until a manager approves it (a signal sent
in the approver's own transaction), then runs again from the top with the payload.

``python examples/signals.py`` (the embedded PostgreSQL, or ``ACTA_DATABASE_URL``).
From a shell, the signal is ``acta signal <job id> approved --payload '{"by": "grace"}'``."""

from __future__ import annotations

import asyncio

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from acta_sqla import Acta, Context, Fail, WaitForSignal, engine_options, migrate
from acta_sqla.database import database_url
from acta_sqla.settings import load_settings
from acta_sqla.testing import drain

acta = Acta(namespace="example-signals")


@acta.job()
async def refund(ctx: Context, order_id: int, amount: int) -> dict[str, object]:
    if ctx.resumed is None:  # first run: ask for approval, wait up to a day
        return WaitForSignal("approved", timeout=24 * 3600)  # type: ignore[return-value]
    if ctx.resumed == "timeout":
        raise Fail(f"refund of order {order_id} was not approved within a day")
    approval = ctx.signals["approved"]
    return {"order_id": order_id, "refunded": amount, "approved_by": approval["by"]}


async def run(url: str, schema: str) -> None:
    engine = create_async_engine(
        make_url(url).set(drivername="postgresql+asyncpg"), execution_options=engine_options(schema)
    )
    async with AsyncSession(engine, expire_on_commit=False) as session:
        job = refund.job(order_id=7, amount=1250)
        session.add(job)
        await session.commit()

        await drain(acta, database_url=url)  # the worker, in-process: the job parks
        await session.refresh(job)
        print(f"refund job {job.id}: {job.status}, waiting for {job.awaited_signal!r}")

        await acta.signal(session, job.id, "approved", {"by": "grace"})
        await session.commit()  # the signal is sent when the approver's transaction commits

        await drain(acta, database_url=url)
        await session.refresh(job)
        print(f"refund job {job.id}: {job.status}, result {job.result}")
    await engine.dispose()


def main() -> None:
    settings = load_settings()
    url = database_url(settings)  # ACTA_DATABASE_URL, or the embedded PostgreSQL
    migrate.upgrade(url, "head", settings.db_schema)  # acta's tables (a no-op once done)
    asyncio.run(run(url, settings.db_schema))


if __name__ == "__main__":
    main()
