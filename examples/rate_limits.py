"""Rate limits: at most 2 calls a second per API account, across every worker (GCRA: the
starts of one key are at least 0.5 s apart). A job refused by its rate is due again when
the meter says, uncharged.

``python examples/rate_limits.py`` (the embedded PostgreSQL, or ``ACTA_DATABASE_URL``)."""

from __future__ import annotations

import asyncio

from sqlalchemy import select
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from acta_sqla import Acta, Context, engine_options, migrate
from acta_sqla.database import database_url
from acta_sqla.models import attempt_history
from acta_sqla.settings import load_settings
from acta_sqla.status import TERMINAL_STATUSES
from acta_sqla.testing import drain

acta = Acta(namespace="example-rates")


@acta.job(rate="2/s", rate_key="api:{account}")
async def call_api(ctx: Context, account: str, n: int) -> None:
    ctx.log.info("calling the API for {} ({})", account, n)


async def run(url: str, schema: str) -> None:
    engine = create_async_engine(
        make_url(url).set(drivername="postgresql+asyncpg"), execution_options=engine_options(schema)
    )
    async with AsyncSession(engine, expire_on_commit=False) as session:
        jobs = [call_api.job(account="acme", n=n) for n in range(4)]
        session.add_all(jobs)
        await session.commit()

        # The worker, in-process: drain runs what is due; the calls the meter refused are
        # due again when it admits them, so drain until every job has finished.
        while True:
            await drain(acta, database_url=url)
            for job in jobs:
                await session.refresh(job)
            if all(job.status in TERMINAL_STATUSES for job in jobs):
                break
            await asyncio.sleep(0.1)
        # Every attempt (acta.attempt, the one place to read a job's history) keeps when it
        # was claimed, on the database's clock, the meter's. A claim comes before its
        # admission, so single gaps can be a little under 0.5 s on a busy machine; the
        # first to the last claim of 4 calls at 2/s span at least 1 s whatever the load.
        claimed = (
            await session.scalars(
                select(attempt_history.c.claimed_at)
                .where(attempt_history.c.job_id.in_([job.id for job in jobs]))
                .order_by(attempt_history.c.claimed_at)
            )
        ).all()
        span = (claimed[-1] - claimed[0]).total_seconds()
        print(f"api:acme made {len(claimed)} calls over {span:.2f} s")
        print("attempts charged:", sorted({job.attempts for job in jobs}))
    await engine.dispose()


def main() -> None:
    settings = load_settings()
    url = database_url(settings)  # ACTA_DATABASE_URL, or the embedded PostgreSQL
    migrate.upgrade(url, "head", settings.db_schema)  # acta's tables (a no-op once done)
    asyncio.run(run(url, settings.db_schema))


if __name__ == "__main__":
    main()
