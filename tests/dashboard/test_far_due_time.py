"""A due time out of Python's datetime range, stored by older code (``delay=10**12 - 1``
reached year 33715 before the one bound of ``durations.py``): the dashboard's job list and
job page still answer, showing the clamped time, never an ``OverflowError``."""

from __future__ import annotations

import httpx

from tests.harness import Sql

from .conftest import NS


async def test_the_job_pages_show_a_due_time_past_year_9999(
    client: httpx.AsyncClient, sql: Sql
) -> None:
    job_id = int(
        sql(
            "INSERT INTO acta.job (namespace, kind, run_at) "
            "VALUES (%s, 'far', now() + make_interval(secs => 1e12 - 1)) RETURNING id",
            NS,
        )[0][0]
    )
    listing = await client.get("/jobs")
    assert listing.status_code == 200 and f"/jobs/{job_id}" in listing.text
    page = await client.get(f"/jobs/{job_id}")
    assert page.status_code == 200 and "9999-12-30" in page.text
