"""Pages and actions through the ASGI app (httpx), on a real database."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.applications import Starlette
from starlette.routing import Mount

from acta_sqla import JobStatus
from acta_sqla.dashboard.app import FAILED_LOGIN_DELAY
from acta_sqla.models import Execution, Lock, Worker

from .conftest import NS, csrf_of, status_of

AddJob = Callable[..., Any]


async def _post(client: httpx.AsyncClient, page: str, action: str, **data: str) -> httpx.Response:
    token = csrf_of((await client.get(page)).text)
    return await client.post(action, data={"csrf": token, **data})


async def test_overview_counts_the_backlog_by_kind_and_the_last_hour(
    client: httpx.AsyncClient, add_job: AddJob
) -> None:
    for _ in range(3):
        await add_job("send_mail")
    await add_job("resize", JobStatus.EXECUTING)
    await add_job("resize", JobStatus.FAILED)
    await add_job("send_mail", JobStatus.SUCCEEDED)
    await add_job("send_mail", namespace="other")  # another namespace is not counted

    page = await client.get("/")
    assert page.status_code == 200
    html = page.text
    backlog = html.split("<h2>Backlog by kind</h2>")[1].split("<h2>")[0]
    cells = r"</a></td>\s*" + r'<td class="num">{}</td><td class="num{}">{}</td>'
    assert re.search("send_mail" + cells.format(3, "", 0), backlog)
    assert re.search("resize" + cells.format(0, "", 1), backlog)
    last_hour = html.split("<h2>Last hour</h2>")[1].split("<h2>")[0]
    assert re.search("resize" + cells.format(0, " bad", 1), last_hour)
    assert page.headers["content-security-policy"].startswith("default-src 'none'")


async def test_jobs_filter_by_status_and_kind_and_page_by_keyset(
    client: httpx.AsyncClient, add_job: AddJob
) -> None:
    ids = [await add_job("a") for _ in range(55)]
    failed = await add_job("b", JobStatus.FAILED)

    first = (await client.get("/jobs", params={"kind": "a"})).text
    shown = [int(i) for i in re.findall(r">#(\d+)</a></td>", first)]
    assert shown == sorted(ids, reverse=True)[:50]
    next_url = re.search(r'href="([^"]+)" rel="next"', first)
    assert next_url, "a full page links to the next one"
    second = (await client.get(next_url.group(1).replace("&amp;", "&"))).text
    assert [int(i) for i in re.findall(r">#(\d+)</a></td>", second)] == sorted(ids)[:5][::-1]
    assert 'rel="next"' not in second

    only_failed = (await client.get("/jobs", params={"status": "failed"})).text
    assert re.findall(r">#(\d+)</a></td>", only_failed) == [str(failed)]

    opened = await client.get("/jobs", params={"id": str(failed)})
    assert opened.status_code == 303 and opened.headers["location"] == f"/jobs/{failed}"


async def test_args_search_matches_text_literally(
    client: httpx.AsyncClient, add_job: AddJob
) -> None:
    hit = await add_job("a", args={"email": "ann_100%@example.com"})
    await add_job("a", args={"email": "bob@example.com"})
    await add_job("a", args={"email": "annX100Z@example.com"})  # _ and % are not wildcards

    page = (await client.get("/jobs", params={"q": "ann_100%"})).text
    assert re.findall(r">#(\d+)</a></td>", page) == [str(hit)]


async def test_bad_filter_is_a_clear_error(client: httpx.AsyncClient) -> None:
    page = await client.get("/jobs", params={"status": "done"})
    assert page.status_code == 400
    allowed = "ready, executing, waiting, succeeded, failed, cancelled"
    assert f"status must be one of {allowed}; got &#39;done&#39;" in page.text


async def test_job_detail_shows_args_escaped_error_traceback_and_attempts(
    client: httpx.AsyncClient, add_job: AddJob, add_execution: Callable[..., Any]
) -> None:
    job_id = await add_job(
        "render",
        JobStatus.FAILED,
        args={"html": "<script>alert('x')</script>"},
        last_error={"type": "KeyError", "message": "'user' <b>"},
    )
    await add_execution(job_id, 1, outcome="retried", error_type="KeyError", error_message="one")
    await add_execution(
        job_id, 2, outcome="failed", error_type="KeyError", traceback="Traceback: line 7"
    )

    html = (await client.get(f"/jobs/{job_id}")).text
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html
    assert "&#39;user&#39; &lt;b&gt;" in html
    assert "Traceback: line 7" in html
    assert html.count("<td>KeyError: ") == 2  # both attempts, with their outcomes
    assert ">retried<" in html and ">failed<" in html

    missing = await client.get("/jobs/999999")
    assert missing.status_code == 404 and "No job with id 999999" in missing.text


async def test_retry_asks_for_confirmation_then_makes_the_job_ready(
    client: httpx.AsyncClient, add_job: AddJob, async_session: AsyncSession
) -> None:
    job_id = await add_job("a", JobStatus.FAILED)
    page = f"/jobs/{job_id}"

    asked = await _post(client, page, f"/jobs/{job_id}/retry")
    assert asked.status_code == 200 and f"Retry job #{job_id}?" in asked.text
    assert await status_of(async_session, job_id) == JobStatus.FAILED

    done = await _post(client, page, f"/jobs/{job_id}/retry", confirmed="1")
    assert done.status_code == 303 and done.headers["location"] == f"{page}?msg=retried"
    assert await status_of(async_session, job_id) == JobStatus.READY
    assert "Job is ready again." in (await client.get(done.headers["location"])).text


async def test_a_retry_refused_because_another_job_holds_the_unique_key_says_so(
    client: httpx.AsyncClient, add_job: AddJob, async_session: AsyncSession
) -> None:
    held = [await add_job("a", JobStatus.FAILED, unique_key=f"u{i}") for i in range(2)]
    holders = [await add_job("a", unique_key=f"u{i}") for i in range(2)]
    free = [
        await add_job("a", JobStatus.FAILED, unique_key="u-free"),
        await add_job("a", JobStatus.FAILED),  # no unique key at all
    ]

    # One job: a 409 page that names the holder; nothing changed.
    one = await _post(client, f"/jobs/{held[0]}", f"/jobs/{held[0]}/retry", confirmed="1")
    assert one.status_code == 409, one.text
    assert (
        f"job {held[0]} cannot be retried: job {holders[0]} holds its unique_key=&#39;u0&#39;"
        in one.text
    )
    assert await status_of(async_session, held[0]) == JobStatus.FAILED

    # A selection: the others are retried, the held ones counted as skipped, and why.
    bulk = await _post(
        client, "/jobs?status=failed", "/jobs/bulk", op="retry", status="failed", confirmed="1"
    )
    assert bulk.status_code == 200, bulk.text
    assert "Retry: 2 of 4 failed jobs." in bulk.text
    assert (
        f"Skipped 2: another job holds their unique key (#{held[1]} held by #{holders[1]}, "
        f"#{held[0]} held by #{holders[0]}); cancel the holder or let it finish, then retry."
        in bulk.text
    )
    assert [await status_of(async_session, i) for i in free] == [JobStatus.READY] * 2
    assert [await status_of(async_session, i) for i in held] == [JobStatus.FAILED] * 2

    # A failure group: the same.
    again = await add_job("a", JobStatus.FAILED)
    group = await _post(
        client, "/failures", "/failures/retry", error_type="ValueError", window="24h", confirmed="1"
    )
    assert group.status_code == 200, group.text
    assert "Retry: 1 jobs that failed with ValueError." in group.text
    assert "Skipped 2: another job holds their unique key" in group.text
    assert await status_of(async_session, again) == JobStatus.READY
    assert [await status_of(async_session, i) for i in held] == [JobStatus.FAILED] * 2


async def test_cancel_a_ready_job_and_refuse_a_finished_one(
    client: httpx.AsyncClient, add_job: AddJob, async_session: AsyncSession
) -> None:
    ready = await add_job("a")
    done = await add_job("a", JobStatus.SUCCEEDED)

    r = await _post(client, f"/jobs/{ready}", f"/jobs/{ready}/cancel", confirmed="1")
    assert r.headers["location"].endswith("msg=cancelled")
    assert await status_of(async_session, ready) == JobStatus.CANCELLED

    r = await _post(client, f"/jobs/{done}", f"/jobs/{done}/cancel", confirmed="1")
    assert r.headers["location"].endswith("msg=finished")
    assert await status_of(async_session, done) == JobStatus.SUCCEEDED


async def test_csrf_refusals(
    client: httpx.AsyncClient,
    client_for: Callable[..., httpx.AsyncClient],
    make_app: Callable[..., Starlette],
    add_job: AddJob,
    async_session: AsyncSession,
) -> None:
    job_id = await add_job("a")
    url = f"/jobs/{job_id}/cancel"
    token = csrf_of((await client.get(f"/jobs/{job_id}")).text)

    altered = token[:-1] + ("1" if token[-1] == "0" else "0")  # never the token itself
    wrong = await client.post(url, data={"csrf": altered, "confirmed": "1"})
    assert wrong.status_code == 403 and "CSRF check failed" in wrong.text
    missing = await client.post(url, data={"confirmed": "1"})
    assert missing.status_code == 403
    other_site = await client.post(
        url,
        data={"csrf": token, "confirmed": "1"},
        headers={"origin": "http://evil.example"},
    )
    assert other_site.status_code == 403
    # A forged form from another site: the browser sends no session cookie with it
    # (SameSite=Strict), or a token made for another session.
    async with client_for(make_app()) as stranger:
        forged = await stranger.post(url, data={"csrf": token, "confirmed": "1"})
    assert forged.status_code == 403
    assert await status_of(async_session, job_id) == JobStatus.READY

    ok = await client.post(
        url, data={"csrf": token, "confirmed": "1"}, headers={"origin": "http://testserver"}
    )
    assert ok.status_code == 303
    assert await status_of(async_session, job_id) == JobStatus.CANCELLED


async def test_read_only_shows_no_action_and_refuses_one(
    make_app: Callable[..., Starlette],
    client_for: Callable[..., httpx.AsyncClient],
    add_job: AddJob,
    async_session: AsyncSession,
) -> None:
    job_id = await add_job("a", JobStatus.FAILED)
    app = make_app(read_only=True)
    async with client_for(app) as c:
        page = await c.get(f"/jobs/{job_id}")
        assert "read-only" in page.text
        assert f"/jobs/{job_id}/retry" not in page.text
        # A valid token (the page has no form to take it from): still refused.
        token = app.state.acta.keys.csrf_token(c.cookies["acta_sid"])
        refused = await c.post(f"/jobs/{job_id}/retry", data={"csrf": token, "confirmed": "1"})
    assert refused.status_code == 403 and "read-only" in refused.text
    assert await status_of(async_session, job_id) == JobStatus.FAILED


async def test_password_is_asked_for_every_page_and_action(
    make_app: Callable[..., Starlette],
    client_for: Callable[..., httpx.AsyncClient],
    add_job: AddJob,
    async_session: AsyncSession,
) -> None:
    job_id = await add_job("a")
    app = make_app(password="s3cret")
    async with client_for(app) as c:
        first = await c.get(f"/jobs/{job_id}")
        assert first.status_code == 303
        assert first.headers["location"] == f"/login?next=%2Fjobs%2F{job_id}"
        login = await c.get(first.headers["location"])
        token = csrf_of(login.text)
        # The login page's token does not let an action through without the password.
        post = await c.post(f"/jobs/{job_id}/cancel", data={"csrf": token, "confirmed": "1"})
        assert post.status_code == 401
        wrong = await c.post(first.headers["location"], data={"csrf": token, "password": "no"})
        assert wrong.status_code == 401 and "Wrong password." in wrong.text
        right = await c.post(first.headers["location"], data={"csrf": token, "password": "s3cret"})
        assert right.status_code == 303 and right.headers["location"] == f"/jobs/{job_id}"
        assert (await c.get(f"/jobs/{job_id}")).status_code == 200
    assert await status_of(async_session, job_id) == JobStatus.READY

    async with client_for(app) as script:
        bearer = await script.get("/", headers={"authorization": "Bearer s3cret"})
        assert bearer.status_code == 200
        wrong_bearer = await script.get("/", headers={"authorization": "Bearer nope"})
        assert wrong_bearer.status_code == 303
        # A forged auth cookie is worth nothing without the app's secret.
        script.cookies.set("acta_sid", "x")
        script.cookies.set("acta_auth", "0" * 64)
        assert (await script.get("/")).status_code == 303


async def test_a_wrong_password_waits_before_its_answer_from_the_form_and_a_header(
    make_app: Callable[..., Starlette], client_for: Callable[..., httpx.AsyncClient]
) -> None:
    """The login form's wrong password waited FAILED_LOGIN_DELAY; a wrong ``Authorization:
    Bearer`` answered at once (about 46 guesses a second from one client)."""
    app = make_app(password="s3cret")
    async with client_for(app) as script:
        for method, path in (("GET", "/"), ("GET", "/jobs"), ("POST", "/jobs/1/retry")):
            began = time.monotonic()
            answer = await script.request(method, path, headers={"authorization": "Bearer nope"})
            assert time.monotonic() - began >= FAILED_LOGIN_DELAY
            assert answer.status_code in (303, 401)
        right = await script.get("/", headers={"authorization": "Bearer s3cret"})
        assert right.status_code == 200
    async with client_for(app) as browser:
        login = await browser.get("/login")
        began = time.monotonic()
        wrong = await browser.post("/login", data={"csrf": csrf_of(login.text), "password": "no"})
        assert time.monotonic() - began >= FAILED_LOGIN_DELAY
        assert wrong.status_code == 401


async def test_failures_grouped_by_error_type_with_group_retry_and_discard(
    client: httpx.AsyncClient,
    add_job: AddJob,
    add_execution: Callable[..., Any],
    async_session: AsyncSession,
) -> None:
    value_errors = [await add_job("a", JobStatus.FAILED) for _ in range(3)]
    key_errors = [
        await add_job("b", JobStatus.FAILED, last_error={"type": "KeyError", "message": "k"})
        for _ in range(2)
    ]
    await add_execution(key_errors[0], 1, outcome="failed", error_type="KeyError")
    old = await add_job("a", JobStatus.FAILED)
    await async_session.execute(
        text("UPDATE acta.job SET finished_at = now() - interval '2 days' WHERE id = :id"),
        {"id": old},
    )
    await async_session.commit()

    html = (await client.get("/failures")).text
    rows = re.findall(r"<strong>(\w+)</strong></td>\s*<td class=\"num\">(\d+)</td>", html)
    assert rows == [("ValueError", "3"), ("KeyError", "2")]  # the 2-day-old one is outside 24h
    assert f"#{max(value_errors)}</a> bad value" in html
    week = (await client.get("/failures", params={"window": "7d"})).text
    assert re.findall(r"<strong>(\w+)</strong></td>\s*<td class=\"num\">(\d+)</td>", week)[0] == (
        "ValueError",
        "4",
    )

    r = await _post(
        client, "/failures", "/failures/retry", error_type="ValueError", window="24h", confirmed="1"
    )
    assert r.status_code == 200 and "Retry: 3 jobs that failed with ValueError." in r.text
    for job_id in value_errors:
        assert await status_of(async_session, job_id) == JobStatus.READY
    assert await status_of(async_session, old) == JobStatus.FAILED

    r = await _post(
        client, "/failures", "/failures/discard", error_type="KeyError", window="24h", confirmed="1"
    )
    assert "Discard: 2 jobs" in r.text
    for job_id in key_errors:
        assert await status_of(async_session, job_id) is None
    history = await async_session.execute(
        select(func.count()).select_from(Execution).where(Execution.job_id.in_(key_errors))
    )
    assert history.scalar() == 0


async def test_delete_finished_jobs_single_and_filtered_never_an_active_one(
    client: httpx.AsyncClient, add_job: AddJob, async_session: AsyncSession
) -> None:
    finished = [await add_job("a", JobStatus.SUCCEEDED) for _ in range(3)]
    active = await add_job("a")

    r = await _post(client, f"/jobs/{finished[0]}", f"/jobs/{finished[0]}/delete", confirmed="1")
    assert r.headers["location"] == "/jobs?msg=deleted"
    assert await status_of(async_session, finished[0]) is None

    r = await _post(client, f"/jobs/{active}", f"/jobs/{active}/delete", confirmed="1")
    assert r.headers["location"].endswith("msg=not-deleted")

    r = await _post(
        client, "/jobs?status=succeeded", "/jobs/bulk", op="delete", status="succeeded", kind="a"
    )
    assert "Delete the succeeded jobs of kind" in r.text  # asked first
    r = await _post(
        client,
        "/jobs?status=succeeded",
        "/jobs/bulk",
        op="delete",
        status="succeeded",
        kind="a",
        confirmed="1",
    )
    assert "Delete: 2 of 2 succeeded jobs" in r.text
    assert [await status_of(async_session, i) for i in finished[1:]] == [None, None]
    assert await status_of(async_session, active) == JobStatus.READY

    refused = await _post(client, "/jobs", "/jobs/bulk", op="delete", status="ready")
    assert refused.status_code == 400 and "delete applies to finished jobs" in refused.text


async def test_cancel_a_filtered_selection(
    client: httpx.AsyncClient, add_job: AddJob, async_session: AsyncSession
) -> None:
    mails = [await add_job("mail") for _ in range(3)]
    other = await add_job("resize")
    r = await _post(
        client, "/jobs?kind=mail", "/jobs/bulk", op="cancel", kind="mail", confirmed="1"
    )
    assert "Cancel: 3 of 3 active jobs of kind &#39;mail&#39;." in r.text
    assert {await status_of(async_session, i) for i in mails} == {JobStatus.CANCELLED}
    assert await status_of(async_session, other) == JobStatus.READY


async def test_workers_and_locks_pages(
    client: httpx.AsyncClient, add_job: AddJob, async_session: AsyncSession
) -> None:
    worker = Worker(namespace=NS, hostname="box-1", pid=4242, executors=8)
    async_session.add(worker)
    await async_session.commit()
    for _ in range(2):
        await add_job("a", JobStatus.EXECUTING, worker_id=worker.id)
    job_id = await add_job("a", JobStatus.EXECUTING, worker_id=worker.id)
    async_session.add(
        Lock(
            namespace=NS,
            name="the-<printer>",
            job_id=job_id,
            execution_id=7,
            worker_id=worker.id,
            lease_expires_at=func.now(),
        )
    )
    await async_session.commit()

    html = (await client.get("/workers")).text
    assert re.search(
        rf"#{worker.id}</td><td><span class=\"status status-running\">running</span></td>"
        r"<td>box-1:4242</td>\s*<td class=\"num\">3</td><td class=\"num\">8</td>",
        html,
    )
    locks = (await client.get("/locks")).text
    assert "the-&lt;printer&gt;" in locks and f"#{job_id}</a>" in locks


async def test_mounted_under_a_path_in_another_application(
    make_app: Callable[..., Starlette],
    client_for: Callable[..., httpx.AsyncClient],
    add_job: AddJob,
    async_session: AsyncSession,
) -> None:
    job_id = await add_job("a", JobStatus.FAILED)
    host = Starlette(routes=[Mount("/acta", make_app())])
    async with client_for(host) as c:
        page = await c.get(f"/acta/jobs/{job_id}")
        assert page.status_code == 200
        assert 'href="/acta/static/dashboard.css"' in page.text
        assert f'action="/acta/jobs/{job_id}/retry"' in page.text
        assert "Path=/acta" in page.headers["set-cookie"]
        css = await c.get("/acta/static/dashboard.css")
        assert css.status_code == 200 and "--accent" in css.text
        r = await c.post(
            f"/acta/jobs/{job_id}/retry", data={"csrf": csrf_of(page.text), "confirmed": "1"}
        )
        assert r.headers["location"] == f"/acta/jobs/{job_id}?msg=retried"
    assert await status_of(async_session, job_id) == JobStatus.READY


@pytest.mark.parametrize("path", ["/", "/jobs", "/failures", "/workers", "/locks"])
async def test_a_database_that_is_down_is_a_page_not_a_traceback(
    make_app: Callable[..., Starlette], client_for: Callable[..., httpx.AsyncClient], path: str
) -> None:
    app = make_app()
    from acta_sqla.dashboard.app import acta_dashboard

    down = acta_dashboard("postgresql://nobody@127.0.0.1:1/none", namespace=NS)
    try:
        async with client_for(down) as c:
            page = await c.get(path)
        assert page.status_code == 503 and "Database error:" in page.text
    finally:
        await down.state.acta.engine.dispose()
        await app.state.acta.engine.dispose()
