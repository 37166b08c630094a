"""Live definitions: an operator changes a kind's policy, or pauses it, while the workers
run; every worker applies it within one heartbeat, no deploy. The same as
``acta definitions set send_mail max_attempts=1`` and ``acta pause send_mail``.

``python examples/definitions.py`` (the embedded PostgreSQL, or ``ACTA_DATABASE_URL``)."""

from __future__ import annotations

import asyncio

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from acta_sqla import Acta, Context, engine_options, migrate
from acta_sqla.database import database_url
from acta_sqla.settings import load_settings
from acta_sqla.testing import drain

acta = Acta(namespace="example-definitions")


@acta.job(max_attempts=5, backoff_base=0)  # the code's policy: 5 attempts
async def send_mail(ctx: Context, to: str) -> str:
    if to.endswith("@bounce.example"):
        raise ConnectionError(f"{to}: mailbox unavailable")
    return f"sent to {to}"


async def run(url: str, schema: str) -> None:
    engine = create_async_engine(
        make_url(url).set(drivername="postgresql+asyncpg"), execution_options=engine_options(schema)
    )
    async with AsyncSession(engine, expire_on_commit=False) as session:
        await drain(acta, database_url=url)  # a worker's start stores its kinds' definitions

        # The operator's override, in their own transaction: at most 1 attempt.
        await acta.set_policy(session, "send_mail", max_attempts=1)
        await session.commit()
        bounced = send_mail.job(to="nobody@bounce.example")
        session.add(bounced)
        await session.commit()
        await drain(acta, database_url=url)
        await session.refresh(bounced)
        print(f"with max_attempts=1: {bounced.status} after {bounced.attempts} attempt(s)")

        # Paused: its jobs stay queued (running ones would finish) until it is resumed.
        await acta.pause(session, "send_mail")
        mail = send_mail.job(to="ada@example.com")
        session.add(mail)
        await session.commit()
        await drain(acta, database_url=url)
        await session.refresh(mail)
        print(f"paused: {mail.status}")
        await acta.resume(session, "send_mail")
        await session.commit()
        await drain(acta, database_url=url)
        await session.refresh(mail)
        print(f"resumed: {mail.status}, result {mail.result!r}")

        await acta.reset_policy(session, "send_mail")  # back to the code's policy
        await session.commit()
    await engine.dispose()


def main() -> None:
    settings = load_settings()
    url = database_url(settings)  # ACTA_DATABASE_URL, or the embedded PostgreSQL
    migrate.upgrade(url, "head", settings.db_schema)  # acta's tables (a no-op once done)
    asyncio.run(run(url, settings.db_schema))


if __name__ == "__main__":
    main()
