"""The quickstart: two handlers, enqueued inside the application's own transaction, run by
an in-process worker. ``python examples/quickstart.py`` runs it on the embedded PostgreSQL
(or on ``ACTA_DATABASE_URL``); ``acta worker --app examples.quickstart:acta`` serves the
same jobs from a worker process."""

from __future__ import annotations

import asyncio

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from acta_sqla import Acta, Context, Retry, engine_options, migrate
from acta_sqla.database import database_url
from acta_sqla.settings import load_settings
from acta_sqla.status import TERMINAL_STATUSES
from acta_sqla.testing import drain

acta = Acta(namespace="quickstart")


@acta.job(max_attempts=5, timeout=60)
async def send_welcome(ctx: Context, user_id: int, template: str = "basic") -> dict[str, object]:
    ctx.log.info("sending the {} welcome to user {}", template, user_id)
    return {"sent": True, "user_id": user_id, "template": template}


@acta.job(max_attempts=3, backoff_base=0.1)
def resize_avatar(ctx: Context, user_id: int) -> dict[str, object]:
    """A sync handler: it runs in the worker's thread pool."""
    if ctx.attempt == 1:
        raise Retry(after=0.2, reason="the image store was busy")
    return {"user_id": user_id, "sizes": [64, 128, 256]}


async def run(url: str, schema: str) -> None:
    engine = create_async_engine(
        make_url(url).set(drivername="postgresql+asyncpg"), execution_options=engine_options(schema)
    )
    async with AsyncSession(engine, expire_on_commit=False) as session:
        # One transaction: the application's own rows would be added here too.
        jobs = [send_welcome.job(user_id=42), resize_avatar.job(user_id=42)]
        session.add_all(jobs)
        await session.commit()

        # The worker, in-process: drain runs every due job and returns; resize_avatar's
        # retry is due 0.2 s later, so drain again until both have finished.
        while True:
            await drain(acta, database_url=url)
            for job in jobs:
                await session.refresh(job)
            if all(job.status in TERMINAL_STATUSES for job in jobs):
                break
            await asyncio.sleep(0.1)
        for job in jobs:
            print(f"{job.kind}: {job.status} after {job.attempts} attempt(s), result {job.result}")
    await engine.dispose()


def main() -> None:
    settings = load_settings()
    url = database_url(settings)  # ACTA_DATABASE_URL, or the embedded PostgreSQL
    migrate.upgrade(url, "head", settings.db_schema)  # acta's tables (a no-op once done)
    asyncio.run(run(url, settings.db_schema))


if __name__ == "__main__":
    main()
