"""Parent and children: a report fans out one child job per region, waits (holding no
worker) until every child has ended, then runs again and sums their results. A child's
failure never fails its parent: the parent reads each child's status and decides.

``python examples/children.py`` (the embedded PostgreSQL, or ``ACTA_DATABASE_URL``)."""

from __future__ import annotations

import asyncio

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from acta_sqla import Acta, Context, Fail, WaitForChildren, engine_options, migrate
from acta_sqla.database import database_url
from acta_sqla.settings import load_settings
from acta_sqla.testing import drain

acta = Acta(namespace="example-children")
SALES = {"eu": 120, "us": 300, "apac": 80}


@acta.job(max_attempts=1)
async def region_sales(ctx: Context, region: str) -> int:
    if region not in SALES:
        raise Fail(f"no sales data for {region}")
    return SALES[region]


@acta.job()
async def sales_report(ctx: Context, regions: list[str]) -> dict[str, object]:
    if ctx.resumed is None:  # first run: one child per region, enqueued with the wait
        return WaitForChildren(  # type: ignore[return-value]
            [region_sales.job(region=region) for region in regions]
        )
    # Runs again once every child has succeeded, failed or been cancelled (spawn order).
    return {
        "total": sum(c.result for c in ctx.children if c.status == "succeeded"),
        "missing": [
            r for r, c in zip(regions, ctx.children, strict=True) if c.status != "succeeded"
        ],
    }


async def run(url: str, schema: str) -> None:
    engine = create_async_engine(
        make_url(url).set(drivername="postgresql+asyncpg"), execution_options=engine_options(schema)
    )
    async with AsyncSession(engine, expire_on_commit=False) as session:
        report = sales_report.job(regions=["eu", "us", "apac", "mars"])
        session.add(report)
        await session.commit()

        # The worker, in-process: the report spawns its children, they run, the report
        # resumes; drain returns when nothing is left to do.
        await drain(acta, database_url=url)
        await session.refresh(report)
        print(f"sales report: {report.status}, result {report.result}")
    await engine.dispose()


def main() -> None:
    settings = load_settings()
    url = database_url(settings)  # ACTA_DATABASE_URL, or the embedded PostgreSQL
    migrate.upgrade(url, "head", settings.db_schema)  # acta's tables (a no-op once done)
    asyncio.run(run(url, settings.db_schema))


if __name__ == "__main__":
    main()
