"""One database URL for every path: libpq parameters in ``ACTA_DATABASE_URL``
(``?sslmode=disable&application_name=...&connect_timeout=5``) work in the worker (asyncpg),
in the commands and migrations (SQLAlchemy engines) and in the dashboard alike; an invalid
one is one line and a non-zero exit, never a retry loop or a traceback."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from acta_sqla import migrate
from acta_sqla.dashboard import acta_dashboard
from acta_sqla.database import create_engine
from tests.harness import SqlRunner, insert_jobs, invoke_acta, one_line_error, run_acta

APP = "tests.e2e.app:acta"
NS = "e2e"
LIBPQ_PARAMETERS = "sslmode=disable&application_name=acta-test&connect_timeout=5"
WORKER_TIMEOUT_SECONDS = 30


def _with_parameters(url: str, parameters: str = LIBPQ_PARAMETERS) -> str:
    return f"{url}{'&' if '?' in url else '?'}{parameters}"


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


def test_libpq_parameters_work_in_every_command_and_the_worker(
    scratch_database: Callable[[], str], tmp_path: Path
) -> None:
    plain = scratch_database()
    url = _with_parameters(plain)
    [head] = migrate.heads()

    def acta(*args: str) -> subprocess.CompletedProcess[str]:
        return invoke_acta(url, NS, tmp_path, *args)

    assert _ok(acta("db", "current")) == "none\n"
    assert f"upgraded none -> {head} (head)" in _ok(acta("db", "upgrade"))
    assert _ok(acta("db", "current")) == f"{head} (head)\n"

    sql = SqlRunner(plain)
    try:
        [job_id] = insert_jobs(sql, NS, "work", args='{"n": 7}')
        _ok(
            run_acta(
                url, NS, tmp_path, "worker", "--app", APP, "--burst", timeout=WORKER_TIMEOUT_SECONDS
            )
        )
        [(status,)] = sql("SELECT status FROM acta.job WHERE id = %s", job_id)
        assert status == "succeeded"
    finally:
        sql.close()

    assert str(job_id) in _ok(acta("jobs", "ls"))
    _ok(acta("status"))
    _ok(acta("definitions", "ls"))
    assert "-> none" in _ok(acta("db", "downgrade", "base"))


def test_migrations_and_engines_take_libpq_parameters(
    scratch_database: Callable[[], str],
) -> None:
    url = _with_parameters(scratch_database())
    [head] = migrate.heads()

    migrate.upgrade(url)
    assert migrate.current(url) == head

    async def application_name() -> str | None:
        engine = create_engine(url, "acta")
        try:
            async with engine.connect() as conn:
                return await conn.scalar(text("SELECT current_setting('application_name')"))
        finally:
            await engine.dispose()

    # The URL's parameters reach the server as the worker's DSN would send them.
    assert asyncio.run(application_name()) == "acta-test"


async def test_the_dashboard_takes_libpq_parameters(db: str) -> None:
    app = acta_dashboard(_with_parameters(db), namespace=NS)
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            page = await client.get("/")
        assert page.status_code == 200, page.text[:500]
    finally:
        await app.state.acta.engine.dispose()


def test_an_invalid_libpq_value_stops_the_worker_with_one_line(
    database_url: str, tmp_path: Path
) -> None:
    url = _with_parameters(database_url, "sslmode=bogus")

    # Before: "database unavailable, retrying" for ever (asyncpg's ClientConfigurationError
    # is an InterfaceError, which read as a lost connection).
    worker = run_acta(
        url, NS, tmp_path, "worker", "--app", APP, "--burst", timeout=WORKER_TIMEOUT_SECONDS
    )

    line = one_line_error(worker, "worker")
    assert worker.returncode == 2
    assert "sslmode" in line
    assert "retrying" not in worker.stdout + worker.stderr


@pytest.mark.parametrize("args", [["db", "current"], ["jobs", "ls"]], ids=" ".join)
def test_an_invalid_libpq_value_is_one_line_in_a_command(
    database_url: str, tmp_path: Path, args: list[str]
) -> None:
    url = _with_parameters(database_url, "sslmode=bogus")

    result = invoke_acta(url, NS, tmp_path, *args)

    line = one_line_error(result, " ".join(args))
    assert result.returncode == 2
    assert "sslmode" in line
