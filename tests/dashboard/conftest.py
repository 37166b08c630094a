"""The dashboard under test: the real ASGI app on the session's test database, driven
through httpx (pages and actions) or a real browser (test_browser.py)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import func
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.applications import Starlette

from acta_sqla import Job, JobStatus
from acta_sqla.dashboard import acta_dashboard
from acta_sqla.models import Execution

NS = "dash"
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    match = _CSRF.search(html)
    assert match, "the page has no CSRF token"
    return match.group(1)


@pytest.fixture
async def make_app(db: str) -> AsyncIterator[Callable[..., Starlette]]:
    apps: list[Starlette] = []

    def make(**options: Any) -> Starlette:
        options.setdefault("namespace", NS)
        app = acta_dashboard(db, **options)
        apps.append(app)
        return app

    yield make
    for app in apps:
        await app.state.acta.engine.dispose()


@pytest.fixture
async def client(make_app: Callable[..., Starlette]) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(make_app()) as c:
        yield c


def _client(app: Any, base_url: str = "http://testserver") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base_url)


@pytest.fixture(name="client_for")
def _client_for() -> Callable[..., httpx.AsyncClient]:
    return _client


@pytest.fixture
def add_job(async_session: AsyncSession) -> Callable[..., Any]:
    """``await add_job(kind, status=..., **fields)``: one job row as a worker would have
    left it (finished ones with finished_at; failed ones with last_error); its id."""

    async def add(kind: str = "send", status: JobStatus = JobStatus.READY, **fields: Any) -> int:
        fields.setdefault("namespace", NS)
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED):
            fields.setdefault("finished_at", func.now())
        if status == JobStatus.FAILED:
            fields.setdefault("last_error", {"type": "ValueError", "message": "bad value"})
        if status == JobStatus.EXECUTING:
            fields.setdefault("lease_expires_at", func.now())
        job = Job(kind=kind, status=status, **fields)
        async_session.add(job)
        await async_session.commit()
        return job.id

    return add


@pytest.fixture
def add_execution(async_session: AsyncSession) -> Callable[..., Any]:
    async def add(job_id: int, attempt: int, **fields: Any) -> None:
        async_session.add(
            Execution(job_id=job_id, id=1000 + job_id * 10 + attempt, attempt=attempt, **fields)
        )
        await async_session.commit()

    return add


async def status_of(session: AsyncSession, job_id: int) -> JobStatus | None:
    from sqlalchemy import select

    session.expire_all()
    return (await session.execute(select(Job.status).where(Job.id == job_id))).scalar()
