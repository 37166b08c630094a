"""Concurrency keys: at most 2 syncs of one customer at once, across every worker; other
customers are not held up. A job refused its slot is due again 2 s later, uncharged.

``python examples/concurrency_keys.py`` (the embedded PostgreSQL, or ``ACTA_DATABASE_URL``)."""

from __future__ import annotations

import asyncio

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from acta_sqla import Acta, Context, engine_options, migrate
from acta_sqla.database import database_url
from acta_sqla.settings import load_settings
from acta_sqla.status import TERMINAL_STATUSES
from acta_sqla.testing import drain

acta = Acta(namespace="example-concurrency")
running: dict[int, int] = {}
most: dict[int, int] = {}


@acta.job(concurrency_key="customer:{customer_id}", concurrency_limit=2)
async def sync_customer(ctx: Context, customer_id: int, page: int) -> None:
    running[customer_id] = running.get(customer_id, 0) + 1
    most[customer_id] = max(most.get(customer_id, 0), running[customer_id])
    await asyncio.sleep(0.2)  # talking to the customer's CRM
    running[customer_id] -= 1


async def run(url: str, schema: str) -> None:
    engine = create_async_engine(
        make_url(url).set(drivername="postgresql+asyncpg"), execution_options=engine_options(schema)
    )
    async with AsyncSession(engine, expire_on_commit=False) as session:
        jobs = [sync_customer.job(customer_id=1, page=page) for page in range(4)]
        jobs.append(sync_customer.job(customer_id=2, page=0))
        session.add_all(jobs)
        await session.commit()

        # The worker, in-process: drain runs what is due; the jobs refused a slot are due
        # again 2 s later, so drain until every job has finished.
        while True:
            await drain(acta, database_url=url)
            for job in jobs:
                await session.refresh(job)
            if all(job.status in TERMINAL_STATUSES for job in jobs):
                break
            await asyncio.sleep(0.2)
        for customer in sorted(most):
            done = sum(1 for job in jobs if job.args["customer_id"] == customer)
            print(f"customer {customer}: {done} jobs, at most {most[customer]} at once")
        print("attempts charged:", sorted({job.attempts for job in jobs}))
    await engine.dispose()


def main() -> None:
    settings = load_settings()
    url = database_url(settings)  # ACTA_DATABASE_URL, or the embedded PostgreSQL
    migrate.upgrade(url, "head", settings.db_schema)  # acta's tables (a no-op once done)
    asyncio.run(run(url, settings.db_schema))


if __name__ == "__main__":
    main()
