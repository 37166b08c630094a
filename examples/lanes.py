"""Lanes: the jobs of one lane run one at a time, in commit order. Ledger entries of one
account must apply in order; entries of different accounts still run in parallel.

``python examples/lanes.py`` (the embedded PostgreSQL, or ``ACTA_DATABASE_URL``)."""

from __future__ import annotations

import asyncio

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from acta_sqla import Acta, Context, engine_options, migrate
from acta_sqla.database import database_url
from acta_sqla.settings import load_settings
from acta_sqla.testing import drain

acta = Acta(namespace="example-lanes")
applied: dict[int, list[int]] = {}


@acta.job(lane="account:{account_id}")  # one lane per account
async def apply_entry(ctx: Context, account_id: int, amount: int) -> int:
    await asyncio.sleep(0.01)  # the entries of one account never overlap
    applied.setdefault(account_id, []).append(amount)
    return sum(applied[account_id])  # the balance after this entry


async def run(url: str, schema: str) -> None:
    engine = create_async_engine(
        make_url(url).set(drivername="postgresql+asyncpg"), execution_options=engine_options(schema)
    )
    async with AsyncSession(engine, expire_on_commit=False) as session:
        jobs = [
            apply_entry.job(account_id=account, amount=amount)
            for amount in (100, -30, 5)
            for account in (1, 2)
        ]
        session.add_all(jobs)
        await session.commit()
        for job in jobs:
            await session.refresh(job)
        # The head of each lane is ready; the entries behind it wait for it.
        print("enqueued:", ", ".join(f"{job.lane_key}={job.status}" for job in jobs))

        await drain(acta, database_url=url)  # the worker, in-process, until nothing is due
        for account, amounts in sorted(applied.items()):
            print(f"account {account}: entries applied in commit order {amounts}")
        for job in jobs:
            await session.refresh(job)
        print("balances:", [job.result for job in jobs if job.args["account_id"] == 1])
    await engine.dispose()


def main() -> None:
    settings = load_settings()
    url = database_url(settings)  # ACTA_DATABASE_URL, or the embedded PostgreSQL
    migrate.upgrade(url, "head", settings.db_schema)  # acta's tables (a no-op once done)
    asyncio.run(run(url, settings.db_schema))


if __name__ == "__main__":
    main()
