"""Schedules: a recurring job, fired exactly once per tick whatever the number of workers
(a 6-field cron leads with seconds: this one ticks every second). Each fire is a job of the
kind, and ``ctx.scheduled_at`` is its tick.

``python examples/schedules.py`` (the embedded PostgreSQL, or ``ACTA_DATABASE_URL``) runs
a worker in-process for the two seconds it takes (``in_process_worker``, of the
``acta-sqla[fastapi]`` extra).
``acta schedules ls`` then shows the schedule, its next and last fire."""

from __future__ import annotations

import asyncio

from sqlalchemy import func, select
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from acta_sqla import Acta, Context, Job, JobStatus, engine_options, migrate
from acta_sqla.database import database_url
from acta_sqla.fastapi import in_process_worker  # no FastAPI app needed, only the extra
from acta_sqla.settings import load_settings

acta = Acta(namespace="example-schedules")


@acta.job(max_attempts=3)
async def refresh_prices(ctx: Context, market: str) -> str:
    assert ctx.scheduled_at is not None
    return f"{market} prices as of {ctx.scheduled_at:%H:%M:%S}"


acta.schedule("prices-every-second", "* * * * * *", refresh_prices, args={"market": "eu"})


async def run(url: str, schema: str) -> None:
    engine = create_async_engine(
        make_url(url).set(drivername="postgresql+asyncpg"), execution_options=engine_options(schema)
    )
    async with AsyncSession(engine, expire_on_commit=False) as session:
        started = await session.scalar(select(func.now()))
        fires = select(Job).where(
            Job.namespace == acta.namespace,
            Job.schedule_name == "prices-every-second",
            Job.status == JobStatus.SUCCEEDED,
            Job.scheduled_at > started,
        )
        # A worker in this process for as long as the block runs (a deployment runs
        # `acta worker --app examples.schedules:acta`): its start stores the schedule and
        # enqueues the next tick's fire; each fire's completion enqueues the one after it.
        settings = load_settings(database_url=url, namespace=acta.namespace)
        async with in_process_worker(acta, settings=settings):
            done: list[Job] = []
            for _ in range(100):  # at most 10 s
                done = list((await session.scalars(fires.order_by(Job.scheduled_at))).all())
                await session.commit()
                if len(done) >= 2:
                    break
                await asyncio.sleep(0.1)
        first, second = (job.scheduled_at for job in done[:2] if job.scheduled_at is not None)
        print(f"2 fires, {(second - first).total_seconds()} s apart, on the second:", end=" ")
        print(first.microsecond == second.microsecond == 0)
        print("results:", [job.result.split(" as of ")[0] for job in done[:2]])
    await engine.dispose()


def main() -> None:
    settings = load_settings()
    url = database_url(settings)  # ACTA_DATABASE_URL, or the embedded PostgreSQL
    migrate.upgrade(url, "head", settings.db_schema)  # acta's tables (a no-op once done)
    asyncio.run(run(url, settings.db_schema))


if __name__ == "__main__":
    main()
