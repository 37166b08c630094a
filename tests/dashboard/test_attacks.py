"""The attacks of issue 35, each against the dashboard alone and mounted at ``/acta`` in a
FastAPI application (httpx through the ASGI app, on the test database): cookies replayed
after a logout, after a password change and after the lifetime; guesses sent in
parallel; oversized bodies and forms; NUL bytes in filters; ids of thousands of digits;
a login's ``next`` leaving the mount; Host headers; forged log lines; ``?ns=`` of a
pinned dashboard; and the bulk retry that stopped at the 1,000 newest when all were held.

The same attacks against ``acta dashboard`` itself (uvicorn, ``.env``) are in
test_serving.py; logout and the back button in a real browser in test_browser.py."""

from __future__ import annotations

import asyncio
import html
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from loguru import logger
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.applications import Starlette

from acta_sqla import JobStatus
from acta_sqla.dashboard import app as dashboard_app
from acta_sqla.errors import ConfigurationError
from acta_sqla.models import Schedule

from .conftest import NS, csrf_of, status_of

AddJob = Callable[..., Any]
PASSWORD = "correct horse"


@dataclass
class Board:
    """One dashboard app, served alone or mounted; clients of any address."""

    app: Starlette
    asgi: Any
    prefix: str

    def client(self, address: str = "10.0.0.1") -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=self.asgi, client=(address, 40000))
        return httpx.AsyncClient(transport=transport, base_url="http://testserver")


@pytest.fixture(params=["alone", "mounted"])
def board(
    request: pytest.FixtureRequest, make_app: Callable[..., Starlette]
) -> Callable[..., Board]:
    def make(**options: Any) -> Board:
        app = make_app(**options)
        if request.param == "alone":
            return Board(app, app, "")
        host = FastAPI()

        @host.get("/public")
        def public() -> dict[str, str]:
            return {"page": "the host application's own"}

        host.mount("/acta", app)
        return Board(app, host, "/acta")

    return make


async def _login(c: httpx.AsyncClient, prefix: str, password: str = PASSWORD) -> httpx.Response:
    page = await c.get(f"{prefix}/login")
    return await c.post(f"{prefix}/login", data={"csrf": csrf_of(page.text), "password": password})


def _cookies(c: httpx.AsyncClient) -> dict[str, str]:
    return {"cookie": f"acta_sid={c.cookies['acta_sid']}; acta_auth={c.cookies['acta_auth']}"}


@pytest.fixture
def logged() -> Iterator[list[str]]:
    """The dashboard's log lines (loguru, stage "dashboard"), as written."""
    lines: list[str] = []
    sink = logger.add(
        lambda m: lines.append(str(m).removesuffix("\n")),
        level="INFO",
        format="{message}",
        filter=lambda r: r["extra"].get("stage") == "dashboard",
    )
    logger.enable("acta_sqla")
    yield lines
    logger.remove(sink)


# ---------------------------------------------------------------- sessions


async def test_logout_revokes_the_login_a_copied_cookie_is_refused_after_it(
    board: Callable[..., Board],
) -> None:
    b = board(password=PASSWORD)
    async with b.client() as c:
        assert (await _login(c, b.prefix)).status_code == 303
        stolen = _cookies(c)
        page = await c.get(f"{b.prefix}/workers")
        assert page.status_code == 200
        token = csrf_of(page.text)
        async with b.client("10.6.6.6") as thief:
            # The copy works while the login lives (so the refusal below is the logout's).
            assert (await thief.get(f"{b.prefix}/workers", headers=stolen)).status_code == 200
        out = await c.post(f"{b.prefix}/logout", data={"csrf": token})
        assert out.status_code == 303 and out.headers["location"] == f"{b.prefix}/login"
        assert (await c.get(f"{b.prefix}/workers")).status_code == 303
    async with b.client("10.6.6.6") as thief:
        replay = await thief.get(f"{b.prefix}/workers", headers=stolen)
        assert replay.status_code == 303
        assert replay.headers["location"].startswith(f"{b.prefix}/login?next=")
        action = await thief.post(
            f"{b.prefix}/jobs/1/cancel", headers=stolen, data={"csrf": token, "confirmed": "1"}
        )
        assert action.status_code == 401


async def test_a_password_change_logs_everybody_out_the_same_secret_notwithstanding(
    make_app: Callable[..., Starlette], client_for: Callable[..., httpx.AsyncClient]
) -> None:
    before = make_app(password="old one", secret="shared secret")
    async with client_for(before) as c:
        assert (await _login(c, "", "old one")).status_code == 303
        cookies = _cookies(c)
    changed = make_app(password="new one", secret="shared secret")
    async with client_for(changed) as c:
        assert (await c.get("/workers", headers=cookies)).status_code == 303
    # A restart with the same password and secret keeps the login (a shared secret's use).
    same = make_app(password="old one", secret="shared secret")
    async with client_for(same) as c:
        assert (await c.get("/workers", headers=cookies)).status_code == 200


async def test_a_login_lasts_its_lifetime_then_the_login_page_returns(
    board: Callable[..., Board],
) -> None:
    b = board(password=PASSWORD, session_lifetime=600)
    keys = b.app.state.acta.keys
    async with b.client() as c:
        assert (await _login(c, b.prefix)).status_code == 303
        assert (await c.get(f"{b.prefix}/workers")).status_code == 200
        keys._clock = lambda: time.time() + 590  # issued-at is whole seconds
        assert (await c.get(f"{b.prefix}/workers")).status_code == 200
        keys._clock = lambda: time.time() + 601
        expired = await c.get(f"{b.prefix}/workers")
        assert expired.status_code == 303 and "/login?next=" in expired.headers["location"]
        login = await c.get(expired.headers["location"])
        assert login.status_code == 200 and 'type="password"' in login.text
    with pytest.raises(ConfigurationError, match="session_lifetime must be from 0"):
        board(password=PASSWORD, session_lifetime=0)


# ---------------------------------------------------------------- guessing


async def test_guesses_in_parallel_are_limited_per_client_and_overall(
    board: Callable[..., Board], logged: list[str]
) -> None:
    """60 wrong guesses at once from one client: 10 are compared with the password (each
    waits FAILED_LOGIN_DELAY), 50 are refused at once; then the right password is refused
    too, and a bearer; other clients go on until 30 failed overall."""
    b = board(password=PASSWORD)
    async with b.client("10.0.0.1") as c:
        token = csrf_of((await c.get(f"{b.prefix}/login")).text)
        began = time.monotonic()
        answers = await asyncio.gather(
            *(
                c.post(f"{b.prefix}/login", data={"csrf": token, "password": f"guess {i}"})
                for i in range(60)
            )
        )
        took = time.monotonic() - began
        assert Counter(a.status_code for a in answers) == {401: 10, 429: 50}
        assert took < 5, took  # the refused ones do not wait
        limited = next(a for a in answers if a.status_code == 429)
        assert "Too many failed logins: try again in" in limited.text
        assert int(limited.headers["retry-after"]) >= 1
        right = await c.post(f"{b.prefix}/login", data={"csrf": token, "password": PASSWORD})
        assert right.status_code == 429
        bearer = await c.get(f"{b.prefix}/", headers={"authorization": f"Bearer {PASSWORD}"})
        assert bearer.status_code == 429
    assert any("10 failed attempts from this client in 60 s" in line for line in logged)

    # Others: 20 more failures, then everybody is refused (the overall limit) with the
    # same answer, which does not say which limit it was.
    for address in ("10.0.0.2", "10.0.0.3"):
        async with b.client(address) as other:
            token = csrf_of((await other.get(f"{b.prefix}/login")).text)
            tries = await asyncio.gather(
                *(
                    other.post(f"{b.prefix}/login", data={"csrf": token, "password": "x"})
                    for _ in range(10)
                )
            )
            assert {t.status_code for t in tries} == {401}
    async with b.client("10.0.0.4") as fresh:
        token = csrf_of((await fresh.get(f"{b.prefix}/login")).text)
        refused = await fresh.post(f"{b.prefix}/login", data={"csrf": token, "password": PASSWORD})
        assert refused.status_code == 429

    def error(page: httpx.Response) -> str:
        found = re.search(r'role="alert">([^<]*)<', page.text)
        assert found, page.text
        return re.sub(r"\d+", "N", found.group(1))

    assert error(refused) == error(limited)
    assert any("30 failed attempts from all clients in 60 s" in line for line in logged)


async def test_the_throttle_forgets_failures_older_than_its_window() -> None:
    from acta_sqla.dashboard.security import Throttle

    now = [1000.0]
    throttle = Throttle(per_client=2, overall=3, window=60, clock=lambda: now[0])
    for _ in range(2):
        assert throttle.refused("a") is None
        throttle.failed("a")
    assert throttle.refused("a") == "2 failed attempts from this client in 60 s"
    assert throttle.refused("b") is None
    throttle.failed("b")
    assert throttle.refused("c") == "3 failed attempts from all clients in 60 s"
    now[0] += 60.5
    assert throttle.refused("a") is None and throttle.refused("c") is None


# ---------------------------------------------------------------- bodies


def _counting(chunks: int, size: int, read: list[int]) -> AsyncIterator[bytes]:
    async def body() -> AsyncIterator[bytes]:
        for _ in range(chunks):
            read.append(size)
            yield b"a" * size

    return body()


FORM = {"content-type": "application/x-www-form-urlencoded"}


@pytest.mark.parametrize("path", ["/login", "/logout", "/jobs/1/retry", "/jobs/bulk", "/"])
async def test_an_oversized_body_is_a_413_before_it_is_read(
    board: Callable[..., Board], path: str
) -> None:
    b = board(password=PASSWORD)
    method = "GET" if path == "/" else "POST"
    async with b.client() as c:
        read: list[int] = []
        declared = await c.request(
            method,
            b.prefix + path,
            content=_counting(100, 1 << 20, read),
            headers={**FORM, "content-length": str(100 << 20)},
        )
        assert declared.status_code == 413 and "at most 65,536 bytes" in declared.text
        assert read == []  # not one byte read
        read = []
        chunked = await c.request(
            method, b.prefix + path, content=_counting(1000, 16 << 10, read), headers=FORM
        )
        assert chunked.status_code == 413
        assert sum(read) <= 64 * 1024 + (16 << 10)  # read up to the bound, no further

        fields = "&".join(f"f{i}=1" for i in range(21))
        many = await c.request(method, b.prefix + path, content=fields, headers=FORM)
        assert many.status_code == 413 and "at most 20 fields" in many.text
        multipart = await c.request(method, b.prefix + path, files={"f": b"x"})
        assert multipart.status_code == 415


# ---------------------------------------------------------------- bad input


async def test_a_nul_in_any_filter_or_name_is_a_400_naming_it(
    board: Callable[..., Board], add_job: AddJob, async_session: AsyncSession
) -> None:
    failed = await add_job("a", JobStatus.FAILED)
    b = board()
    async with b.client() as c:
        for params, name in (
            ({"kind": "a\x00b"}, "kind"),
            ({"q": "x\x00"}, "q"),
            ({"status": "\x00"}, "status"),
            ({"ns": "x\x00y"}, "ns"),
        ):
            page = await c.get(f"{b.prefix}/jobs", params=params)
            assert page.status_code == 400, (params, page.text)
            assert f"{name} holds a NUL character" in html.unescape(page.text)
        for path, name in (("/lanes/a%00b", "lane"), ("/keys/%00", "key")):
            page = await c.get(b.prefix + path)
            assert page.status_code == 400 and f"{name} holds a NUL" in page.text, page.text
        token = csrf_of((await c.get(f"{b.prefix}/jobs")).text)
        bulk = await c.post(
            f"{b.prefix}/jobs/bulk",
            data={"csrf": token, "op": "retry", "status": "failed", "kind": "a\x00"},
        )
        assert bulk.status_code == 400 and "kind holds a NUL" in bulk.text
        group = await c.post(
            f"{b.prefix}/failures/retry",
            data={"csrf": token, "error_type": "\x00", "window": "24h", "confirmed": "1"},
        )
        assert group.status_code == 400 and "error_type holds a NUL" in group.text
    assert await status_of(async_session, failed) == JobStatus.FAILED


@pytest.mark.parametrize("password", [None, PASSWORD])
async def test_an_id_of_thousands_of_digits_is_a_404_or_400_on_every_route(
    board: Callable[..., Board], password: str | None
) -> None:
    huge = "9" * 5000
    b = board(password=password)
    async with b.client() as c:
        if password:
            refused = await c.get(f"{b.prefix}/jobs/{huge}")
            assert refused.status_code == 303  # the login first, no 500
            assert (await _login(c, b.prefix)).status_code == 303
        page = await c.get(f"{b.prefix}/jobs/{huge}")
        assert page.status_code == 404 and "No job with an id of more than 40 digits" in page.text
        token = csrf_of((await c.get(f"{b.prefix}/jobs")).text)
        for op in ("retry", "cancel", "delete"):
            acted = await c.post(
                f"{b.prefix}/jobs/{huge}/{op}", data={"csrf": token, "confirmed": "1"}
            )
            assert acted.status_code == 404, acted.text
        for param in ("id", "before"):
            listed = await c.get(f"{b.prefix}/jobs", params={param: huge})
            assert listed.status_code == 400 and f"{param} must be a job id" in listed.text
        bulk = await c.post(
            f"{b.prefix}/jobs/bulk",
            data={"csrf": token, "op": "retry", "status": "failed", "before": huge},
        )
        assert bulk.status_code in (200, 400)  # the confirmation, or the 400 once confirmed
        bulk = await c.post(
            f"{b.prefix}/jobs/bulk",
            data={
                "csrf": token,
                "op": "retry",
                "status": "failed",
                "before": huge,
                "confirmed": "1",
            },
        )
        assert bulk.status_code == 400 and "before must be a job id" in bulk.text


# ---------------------------------------------------------------- redirects, hosts


@pytest.mark.parametrize(
    ("given", "lands", "alone"),
    [
        ("{p}/workers", "{p}/workers", None),
        ("{p}/jobs/../failures?window=7d", "{p}/failures?window=7d", None),
        # Mounted, these leave /acta for the host application: the overview instead.
        # Alone, the dashboard is the whole site: they resolve to a path of its own.
        ("{p}/../public", "{p}/", "/public"),
        ("{p}/%2e%2e/public", "{p}/", "/public"),
        ("{p}/%2E./public", "{p}/", "/public"),
        ("{p}/workers/../../public", "{p}/", "/public"),
        ("//evil.example/acta/", "{p}/", None),
        ("https://evil.example{p}/", "{p}/", None),
        ("{p}/\\evil.example", "{p}/", None),
        ("/\\evil.example", "{p}/", None),
        ("{p}/workers\r\nX: y", "{p}/", None),
    ],
)
async def test_the_login_s_next_stays_inside_the_dashboard(
    board: Callable[..., Board], given: str, lands: str, alone: str | None
) -> None:
    b = board(password=PASSWORD)
    async with b.client() as c:
        page = await c.get(f"{b.prefix}/login")
        done = await c.post(
            f"{b.prefix}/login",
            params={"next": given.format(p=b.prefix)},
            data={"csrf": csrf_of(page.text), "password": PASSWORD},
        )
    assert done.status_code == 303
    expected = alone if alone is not None and not b.prefix else lands.format(p=b.prefix)
    assert done.headers["location"] == expected


async def test_the_trailing_slash_redirect_names_no_host(board: Callable[..., Board]) -> None:
    b = board()
    async with b.client() as c:
        moved = await c.get(
            f"{b.prefix}/jobs/", params={"status": "failed"}, headers={"host": "evil.example"}
        )
        assert moved.status_code == 307
        assert moved.headers["location"] == f"{b.prefix}/jobs?status=failed"
        # The path as the client sent it (still encoded), never a host of its Host header.
        encoded = await c.get(f"{b.prefix}/workers%2F/", headers={"host": "evil.example"})
        assert encoded.headers["location"] == f"{b.prefix}/workers%2F"
        doubled = await c.get(f"{b.prefix}/jobs//", headers={"host": "evil.example"})
        assert doubled.headers["location"] == f"{b.prefix}/jobs"


async def test_a_host_header_outside_the_allowed_hosts_is_refused(
    board: Callable[..., Board],
) -> None:
    """DNS rebinding: ``evil.example`` resolving to 127.0.0.1 sends ``Host: evil.example``."""
    b = board(allowed_hosts=["127.0.0.1", "localhost", "::1", "*.corp.example"])
    async with b.client() as c:
        for host in ("evil.example", "evil.example:8080", "127.0.0.1.evil.example", ""):
            refused = await c.get(f"{b.prefix}/", headers={"host": host})
            assert refused.status_code == 400, host
            assert "is not a name this dashboard answers to" in refused.text
        for host in (
            "127.0.0.1:8080",
            "localhost",
            "LOCALHOST.:80",
            "[::1]:8080",
            "a.corp.example",
        ):
            assert (await c.get(f"{b.prefix}/", headers={"host": host})).status_code == 200, host


# ---------------------------------------------------------------- logs, namespaces


async def test_control_characters_in_names_cannot_forge_a_log_line(
    client: httpx.AsyncClient, async_session: AsyncSession, logged: list[str]
) -> None:
    forged = "nightly\n2026-12-05 09:00:00 | INFO | login from 10.0.0.1\x1b[2J"
    async_session.add(Schedule(namespace=NS, name=forged, cron="0 3 * * *", kind="report"))
    await async_session.commit()
    page = await client.get("/schedules")
    token = csrf_of(page.text)
    action = re.search(r'action="(/schedules/[^"]+/pause)"', page.text)
    assert action
    done = await client.post(html.unescape(action.group(1)), data={"csrf": token, "confirmed": "1"})
    assert done.status_code == 303 and "msg=paused" in done.headers["location"]
    line = next(line for line in logged if line.startswith("pause schedule"))
    assert "\n" not in line and "\x1b" not in line
    assert "nightly\\n2026-12-05 09:00:00 | INFO | login from 10.0.0.1\\x1b[2J" in line


async def test_a_dashboard_pinned_to_namespaces_never_shows_another(
    board: Callable[..., Board], add_job: AddJob, async_session: AsyncSession
) -> None:
    other = await add_job("a", JobStatus.FAILED, namespace="other-team")
    b = board(namespaces=[NS, "second"])
    async with b.client() as c:
        overview = await c.get(f"{b.prefix}/")
        assert overview.status_code == 200
        assert "other-team" not in overview.text and "ns=second" in overview.text
        for path in ("/", "/jobs", "/failures", "/jobs?status=failed"):
            sep = "&" if "?" in path else "?"
            page = await c.get(f"{b.prefix}{path}{sep}ns=other-team")
            assert page.status_code == 404, path
            assert "Namespace &#39;other-team&#39; is not shown by this dashboard" in page.text
        token = csrf_of((await c.get(f"{b.prefix}/jobs")).text)
        acted = await c.post(
            f"{b.prefix}/jobs/bulk?ns=other-team",
            data={"csrf": token, "op": "retry", "status": "failed", "confirmed": "1"},
        )
        assert acted.status_code == 404
        assert (await c.get(f"{b.prefix}/jobs?ns=second")).status_code == 200
    assert await status_of(async_session, other) == JobStatus.FAILED
    with pytest.raises(ConfigurationError, match="is not one of namespaces"):
        board(namespace="third", namespaces=[NS])


async def test_settings_from_dotenv_give_a_mounted_dashboard_its_password(
    make_app: Callable[..., Starlette],
    client_for: Callable[..., httpx.AsyncClient],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("PASSWORD", "SECRET", "NAMESPACES", "ALLOWED_HOSTS"):
        monkeypatch.delenv(f"ACTA_DASHBOARD_{name}", raising=False)
    (tmp_path / ".env").write_text("ACTA_DASHBOARD_PASSWORD=from the file\n")
    monkeypatch.chdir(tmp_path)
    app = make_app()
    async with client_for(app) as c:
        assert (await c.get("/")).status_code == 303
        assert (await _login(c, "", "from the file")).status_code == 303
        assert (await c.get("/")).status_code == 200


# ---------------------------------------------------------------- bulk retry


async def test_a_bulk_retry_goes_on_past_the_newest_when_all_are_held(
    client: httpx.AsyncClient,
    add_job: AddJob,
    async_session: AsyncSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With BATCH 3: the 3 newest failed jobs' unique keys are held, the 3 older ones are
    free. It used to retry 0 of the 3 newest on every click."""
    monkeypatch.setattr(dashboard_app, "BATCH", 3)
    monkeypatch.setattr(dashboard_app, "SCAN", 5)
    older = [await add_job("a", JobStatus.FAILED) for _ in range(3)]
    held = [await add_job("a", JobStatus.FAILED, unique_key=f"u{i}") for i in range(3)]
    for i in range(3):
        await add_job("a", unique_key=f"u{i}")

    async def retry(**extra: str) -> httpx.Response:
        token = csrf_of((await client.get("/jobs?status=failed")).text)
        data = {"csrf": token, "op": "retry", "status": "failed", "confirmed": "1", **extra}
        return await client.post("/jobs/bulk", data=data)

    first = await retry()
    assert first.status_code == 200, first.text
    # 3 held skipped, then 2 older retried: 5 examined (SCAN), so it offers to go on.
    assert "Retry: 2 of 5 failed jobs. Skipped 3" in first.text
    assert "Continue with older jobs" in first.text
    assert [await status_of(async_session, i) for i in older] == [
        JobStatus.FAILED,
        JobStatus.READY,
        JobStatus.READY,
    ]
    before = re.search(r'name="before" value="(\d+)"', first.text)
    assert before and int(before.group(1)) == older[1]
    second = await retry(before=before.group(1))
    assert "Retry: 1 of 1 failed jobs." in second.text and "Continue" not in second.text
    assert await status_of(async_session, older[0]) == JobStatus.READY
    assert [await status_of(async_session, i) for i in held] == [JobStatus.FAILED] * 3

    # A failure group likewise goes past its held ones (its 3 newest, all held).
    keyed = {"last_error": {"type": "KeyError", "message": "k"}}
    free = [await add_job("a", JobStatus.FAILED, **keyed) for _ in range(2)]
    for i in range(3):
        await add_job("a", JobStatus.FAILED, unique_key=f"k{i}", **keyed)
        await add_job("a", unique_key=f"k{i}")
    token = csrf_of((await client.get("/failures")).text)
    group = await client.post(
        "/failures/retry",
        data={"csrf": token, "error_type": "KeyError", "window": "24h", "confirmed": "1"},
    )
    assert "Retry: 2 jobs that failed with KeyError. Skipped 3" in group.text, group.text
    assert [await status_of(async_session, i) for i in free] == [JobStatus.READY] * 2
