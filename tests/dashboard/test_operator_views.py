"""The operator's views of issue 32: exact counts on small tables, charts over time, a
kind's live rate and latency, editing a kind's limits, Scheduled and Retrying, failures
by kind and error type, who cancelled a job and why, the budget's size, the favicon."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from markupsafe import escape as html_escape
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from acta_sqla import Job, JobStatus
from acta_sqla.models import Definition, Execution, Namespace

from .conftest import NS, csrf_of, status_of

AddJob = Callable[..., Any]


async def _kind(session: AsyncSession, kind: str, declared: dict[str, Any], **over: Any) -> None:
    """A kind stored as a worker stores it (its namespace first)."""
    if await session.get(Namespace, NS) is None:
        session.add(Namespace(name=NS))
        await session.commit()
    session.add(Definition(namespace=NS, kind=kind, declared=declared, overrides=over))
    await session.commit()


async def _post(client: httpx.AsyncClient, page: str, action: str, **data: str) -> httpx.Response:
    token = csrf_of((await client.get(page)).text)
    return await client.post(action, data={"csrf": token, **data})


async def test_counts_on_a_small_never_analysed_table_are_exact_and_unmarked(
    client: httpx.AsyncClient, add_job: AddJob
) -> None:
    """48 failed jobs in a table the planner has no statistics for: it estimated 1 and the
    overview said "failed ≈ 1", the jobs page "About 1 jobs match"."""
    for _ in range(48):
        await add_job("charge", JobStatus.FAILED)
    await add_job("charge", JobStatus.SUCCEEDED)

    overview = (await client.get("/")).text
    card = re.search(
        r"status-failed\">failed</span></span>\s*<span class=\"count\">([^<]+)<", overview
    )
    assert card and card.group(1) == "48", overview
    assert '<span class="count">≈' not in overview

    jobs = (await client.get("/jobs", params={"status": "failed"})).text
    assert "48 jobs match." in jobs
    assert "About" not in jobs and "≈" not in jobs
    tab = re.search(r'status=succeeded"[^>]*>succeeded <span class="count">([^<]+)<', jobs)
    assert tab and tab.group(1) == "1"

    confirm = await _post(
        client, "/jobs?status=failed", "/jobs/bulk", op="retry", status="failed", kind=""
    )
    assert "(48; at most 1,000 per click)" in confirm.text


async def test_counts_above_ten_thousand_are_the_planners_estimate_marked_as_one(
    client: httpx.AsyncClient, async_session: AsyncSession
) -> None:
    await async_session.execute(
        text(
            "INSERT INTO acta.job (namespace, kind, status, finished_at) "
            "SELECT :ns, 'bulk', 'succeeded', now() FROM generate_series(1, 10050)"
        ),
        {"ns": NS},
    )
    await async_session.commit()
    await async_session.execute(text("ANALYZE acta.job"))
    await async_session.commit()

    overview = (await client.get("/")).text
    card = re.search(
        r"status-succeeded\">succeeded</span></span>\s*<span class=\"count\">([^<]+)<", overview
    )
    assert card and card.group(1).startswith("≈ "), overview
    jobs = (await client.get("/jobs", params={"status": "succeeded"})).text
    assert "About " in jobs and "the planner's estimate" in jobs


async def test_every_page_names_a_favicon_that_is_served(client: httpx.AsyncClient) -> None:
    page = (await client.get("/jobs")).text
    icon = re.search(r'<link rel="icon" type="image/svg\+xml" href="([^"]+)">', page)
    assert icon and icon.group(1) == "/static/favicon.svg"
    for path in (icon.group(1), "/favicon.ico"):
        answer = await client.get(path)
        assert answer.status_code == 200, path
        assert answer.headers["content-type"].startswith("image/svg+xml")
        assert answer.content.startswith(b"<svg")


async def test_attempts_name_the_budgets_size(
    client: httpx.AsyncClient, add_job: AddJob, async_session: AsyncSession
) -> None:
    """ "attempts 2 of the kind's budget" said nothing of its size: 2 of 5, from the kind's
    effective max_attempts (an override wins), the job's own when it set one."""
    await _kind(async_session, "charge", {"max_attempts": 20}, max_attempts=5)
    kinds = await add_job("charge", attempts=2)
    own = await add_job("charge", attempts=1, max_attempts=3)
    unknown = await add_job("never_stored", attempts=1)

    assert re.search(r"<dt>attempts</dt><dd>2 of 5 ", (await client.get(f"/jobs/{kinds}")).text)
    assert "<dt>attempts</dt><dd>1 of 3</dd>" in (await client.get(f"/jobs/{own}")).text
    assert "<dd>1 of 20 " in (await client.get(f"/jobs/{unknown}")).text
    listing = (await client.get("/jobs")).text
    assert '<td class="num">2/5</td>' in listing and '<td class="num">1/3</td>' in listing


async def test_scheduled_and_retrying_are_separate_views(
    client: httpx.AsyncClient, add_job: AddJob
) -> None:
    later = timedelta(hours=1)
    now = datetime.now(UTC)
    planned = await add_job("report", run_at=now + later)
    sooner = await add_job("report", run_at=now + timedelta(minutes=5))
    backing_off = await add_job(
        "charge",
        run_at=now + timedelta(minutes=2),
        attempts=2,
        last_error={"type": "CardDeclined", "message": "card declined"},
    )
    due_now = await add_job("charge", attempts=1)  # a retry already due: plain ready
    await add_job("report", JobStatus.WAITING, run_at=now + later)  # a wait, not scheduled

    page = (await client.get("/scheduled")).text
    assert _ids(page) == [sooner, planned]
    assert "not retries" in page
    retry_page = (await client.get("/retrying")).text
    assert _ids(retry_page) == [backing_off]
    assert "CardDeclined</strong>: card declined" in retry_page
    assert due_now not in _ids(page) + _ids(retry_page)
    overview = (await client.get("/")).text
    assert ">2 scheduled for later</a>" in overview and ">1 retrying</a>" in overview


async def test_scheduled_pages_by_run_at_and_refuses_a_bad_keyset(
    client: httpx.AsyncClient, add_job: AddJob
) -> None:
    now = datetime.now(UTC)
    ids = [await add_job("report", run_at=now + timedelta(minutes=60 - i)) for i in range(55)]
    first = (await client.get("/scheduled")).text
    assert _ids(first) == ids[::-1][:50]
    more = re.search(r'href="([^"]+)" rel="next"', first)
    assert more
    second = (await client.get(more.group(1).replace("&amp;", "&"))).text
    assert _ids(second) == ids[::-1][50:]
    for bad in ({"after_at": "yesterday", "after_id": "3"}, {"after_id": "3"}):
        answer = await client.get("/scheduled", params=bad)
        assert answer.status_code == 400 and "after_" in answer.text


def _ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r">#(\d+)</a></td>", html)]


async def test_failures_are_grouped_by_kind_and_error_type_each_with_a_sample(
    client: httpx.AsyncClient, add_job: AddJob, async_session: AsyncSession
) -> None:
    """One "Fail" group mixed "card declined" (charge) with "child 2 broke" (report)."""
    declined = [
        await add_job(
            "charge", JobStatus.FAILED, last_error={"type": "Fail", "message": "card declined"}
        )
        for _ in range(3)
    ]
    broke = await add_job(
        "report", JobStatus.FAILED, last_error={"type": "Fail", "message": "child 2 broke"}
    )
    html = (await client.get("/failures")).text
    rows = re.findall(
        r'kind=(\w+)&amp;status=failed">\w+</a></td>\s*<td><strong>(\w+)</strong></td>\s*'
        r'<td class="num">(\d+)</td>',
        html,
    )
    assert rows == [("charge", "Fail", "3"), ("report", "Fail", "1")]
    assert f"#{max(declined)}</a> card declined" in html
    assert f"#{broke}</a> child 2 broke" in html

    done = await _post(
        client,
        "/failures",
        "/failures/retry",
        error_type="Fail",
        kind="report",
        window="24h",
        confirmed="1",
    )
    assert "Retry: 1 jobs that failed with Fail of kind &#39;report&#39;." in done.text
    assert await status_of(async_session, broke) == JobStatus.READY
    for job_id in declined:  # the other kind's group is left alone
        assert await status_of(async_session, job_id) == JobStatus.FAILED


async def test_the_dashboards_cancel_records_who_and_why_and_the_job_page_shows_it(
    client: httpx.AsyncClient, add_job: AddJob, async_session: AsyncSession
) -> None:
    job_id = await add_job("charge", attempts=1, last_error={"type": "Timeout", "message": "t"})
    page = (await client.get(f"/jobs/{job_id}")).text
    assert 'name="reason"' in page
    done = await _post(
        client, f"/jobs/{job_id}", f"/jobs/{job_id}/cancel", confirmed="1", reason=" customer left "
    )
    assert done.status_code == 303
    async_session.expire_all()
    row = await async_session.get(Job, job_id)
    assert row is not None and row.status == JobStatus.CANCELLED
    assert row.last_error is not None
    assert row.last_error["type"] == "Timeout"  # the earlier attempt's error stays
    assert row.last_error["cancel"]["by"] == "dashboard"
    assert row.last_error["cancel"]["reason"] == "customer left"
    shown = (await client.get(f"/jobs/{job_id}")).text
    assert re.search(
        r'<dd class="cancelled-by">dashboard, <time [^>]+>[^<]+</time>: customer left</dd>', shown
    )


async def test_a_cancel_without_a_reason_says_so(
    client: httpx.AsyncClient, add_job: AddJob
) -> None:
    job_id = await add_job("charge")
    await _post(client, f"/jobs/{job_id}", f"/jobs/{job_id}/cancel", confirmed="1")
    shown = (await client.get(f"/jobs/{job_id}")).text
    assert ": no reason given</dd>" in shown
    assert "<h2>Last error</h2>" not in shown  # a cancel record alone is not an error


async def test_a_hostile_cancel_reason_is_refused_naming_the_field(
    client: httpx.AsyncClient, add_job: AddJob, async_session: AsyncSession
) -> None:
    job_id = await add_job("charge")
    for reason, says in (
        ("x" * 1001, "reason is 1,001 characters long; at most 1,000"),
        ("a\x00b", "reason holds a NUL character"),
    ):
        refused = await _post(
            client, f"/jobs/{job_id}", f"/jobs/{job_id}/cancel", confirmed="1", reason=reason
        )
        assert refused.status_code == 400 and says in refused.text, refused.text
    assert await status_of(async_session, job_id) == JobStatus.READY


async def test_the_api_records_its_callers_by_and_a_logged_in_user_is_named(
    add_job: AddJob, async_session: AsyncSession, make_app: Callable[..., Any], client_for: Any
) -> None:
    from starlette.authentication import AuthCredentials, AuthenticationBackend, SimpleUser
    from starlette.middleware.authentication import AuthenticationMiddleware

    from acta_sqla import Acta

    job_id = await add_job("charge")
    acta = Acta(namespace=NS, allow_unknown_kinds=True)
    assert await acta.cancel(async_session, job_id, reason="duplicate", by="billing-api") == (
        "cancelled"
    )
    await async_session.commit()
    async_session.expire_all()
    row = await async_session.get(Job, job_id)
    assert row is not None and row.last_error is not None
    assert row.last_error["cancel"]["by"] == "billing-api"
    for bad in ({"reason": "r" * 1001}, {"by": "b" * 201}, {"reason": 7}):
        try:
            await acta.cancel(async_session, job_id, **bad)  # type: ignore[arg-type]
        except ValueError as exc:
            assert ("reason" if "reason" in bad else "by") in str(exc)
        else:
            raise AssertionError(f"{bad} was accepted")

    class Alice(AuthenticationBackend):
        async def authenticate(self, conn: Any) -> Any:
            return AuthCredentials(["authenticated"]), SimpleUser("alice")

    other = await add_job("charge")
    app = AuthenticationMiddleware(make_app(), backend=Alice())
    async with client_for(app) as c:
        await _post(c, f"/jobs/{other}", f"/jobs/{other}/cancel", confirmed="1", reason="r")
    async_session.expire_all()
    row = await async_session.get(Job, other)
    assert row is not None and row.last_error is not None
    assert row.last_error["cancel"]["by"] == "alice (dashboard)"


async def _finished(
    add_job: AddJob,
    session: AsyncSession,
    kind: str,
    status: JobStatus,
    minutes_ago: float,
    wait: float = 2.0,
) -> int:
    """A job that finished ``minutes_ago``, claimed ``wait`` seconds after it was due, its
    last attempt (its history row) run for 1.5 s."""
    end = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    claimed = end - timedelta(seconds=1.5)
    _finished.count += 1  # type: ignore[attr-defined]
    execution_id = 50_000 + _finished.count  # type: ignore[attr-defined]
    job_id = int(
        await add_job(
            kind,
            status,
            finished_at=end,
            claimed_at=claimed,
            run_at=claimed - timedelta(seconds=wait),
            attempts=1,
            execution_id=execution_id,
        )
    )
    session.add(
        Execution(
            job_id=job_id,
            id=execution_id,
            attempt=1,
            outcome=status.value,
            claimed_at=claimed,
            started_at=claimed,
            finished_at=end,
        )
    )
    await session.commit()
    return job_id


_finished.count = 0  # type: ignore[attr-defined]


async def test_the_overview_charts_throughput_failures_and_queue_wait_as_svg(
    client: httpx.AsyncClient, add_job: AddJob, async_session: AsyncSession
) -> None:
    for _ in range(4):
        await _finished(add_job, async_session, "charge", JobStatus.SUCCEEDED, 3, wait=4.0)
    await _finished(add_job, async_session, "charge", JobStatus.FAILED, 3)
    await _finished(add_job, async_session, "report", JobStatus.SUCCEEDED, 30)
    await _finished(add_job, async_session, "report", JobStatus.SUCCEEDED, 200)  # outside the hour

    html = (await client.get("/")).text
    assert "<h2>Over time</h2>" in html
    svgs = re.findall(r'<svg class="chart chart-(\w+)".*?</svg>', html, re.S)
    assert svgs == ["throughput", "failures", "wait"]
    throughput = re.search(r'<svg class="chart chart-throughput".*?</svg>', html, re.S)
    assert throughput
    svg = throughput.group(0)
    assert 'aria-label="Throughput per minute over the last hour: 5 jobs in the last hour"' in svg
    bars = re.findall(r'<rect class="bar bar-ok"[^>]*><title>([^<]+)</title>', svg)
    assert sorted(b.split("UTC: ")[1] for b in bars) == ["1 job", "4 jobs"]
    failures = re.search(r'<svg class="chart chart-failures".*?</svg>', html, re.S)
    assert failures and len(re.findall("bar-bad", failures.group(0))) == 1
    wait = re.search(r'<svg class="chart chart-wait".*?</svg>', html, re.S)
    assert wait and "UTC: 3.60 s" in wait.group(0)  # (4 x 4 s + 2 s) / 5

    # A signal wait without a timeout cancelled: its due time is infinity, no wait to chart.
    infinite = await add_job("report", JobStatus.CANCELLED, claimed_at=datetime.now(UTC))
    await async_session.execute(
        text("UPDATE acta.job SET run_at = 'infinity' WHERE id = :id"), {"id": infinite}
    )
    await async_session.commit()
    assert (await client.get("/")).status_code == 200
    assert (await client.get("/definitions")).status_code == 200

    day = (await client.get("/", params={"chart": "24h"})).text
    assert "Throughput per hour over the last day: 7 jobs in the last day" in day
    assert (await client.get("/", params={"chart": "1y"})).status_code == 400


@pytest.fixture
def logged() -> Iterator[list[str]]:
    """The dashboard's log lines (loguru, stage "dashboard")."""
    from loguru import logger

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


async def _overrides(session: AsyncSession, kind: str) -> dict[str, Any]:
    session.expire_all()
    row = await session.get(Definition, (NS, kind))
    assert row is not None
    return dict(row.overrides)


async def test_a_kinds_limits_are_edited_on_its_page_confirmed_and_logged(
    client: httpx.AsyncClient, async_session: AsyncSession, logged: list[str]
) -> None:
    await _kind(async_session, "charge", {"timeout": 300.0, "concurrency_limit": None})
    page = (await client.get("/definitions/charge")).text
    assert 'name="concurrency_limit" value=""' in page and 'name="timeout" value="300"' in page
    edit = dict(concurrency_limit="3", rate="10/s", timeout="300", paused="false")

    asked = await _post(client, "/definitions/charge", "/definitions/charge/set", **edit)
    assert asked.status_code == 200, asked.text
    assert "Set concurrency_limit=3, rate=10/s of kind &#39;charge&#39;?" in asked.text
    assert await _overrides(async_session, "charge") == {}  # nothing before the confirmation

    done = await _post(
        client, "/definitions/charge", "/definitions/charge/set", confirmed="1", **edit
    )
    assert done.status_code == 303 and done.headers["location"].endswith("msg=policy-set")
    # Only what changed became an override (timeout and paused were the kind's already).
    assert await _overrides(async_session, "charge") == {"concurrency_limit": 3, "rate": "10/s"}
    assert any(
        line.startswith("set kind charge in dash from ")
        and line.endswith(
            ": concurrency_limit=3, rate=10/s (overrides now "
            '{"concurrency_limit": 3, "rate": "10/s"})'
        )
        for line in logged
    ), logged
    shown = (await client.get("/definitions/charge?msg=policy-set")).text
    assert "within one heartbeat" in shown and "<strong>10/s</strong>" in shown

    # An emptied box is "none" (no limit), as `acta definitions set KIND rate=none`.
    await _post(
        client,
        "/definitions/charge",
        "/definitions/charge/set",
        confirmed="1",
        **{**edit, "rate": "", "paused": "true"},
    )
    assert await _overrides(async_session, "charge") == {
        "concurrency_limit": 3,
        "rate": None,
        "paused": True,
    }
    await _post(client, "/definitions/charge", "/definitions/charge/reset", confirmed="1")
    assert await _overrides(async_session, "charge") == {}

    forged = await client.post(
        "/definitions/charge/set", data={"csrf": "forged", "confirmed": "1", **edit}
    )
    assert forged.status_code == 403
    assert await _overrides(async_session, "charge") == {}


async def test_hostile_limits_are_refused_with_the_clis_own_message_naming_the_field(
    client: httpx.AsyncClient, async_session: AsyncSession
) -> None:
    from acta_sqla import Acta
    from acta_sqla.errors import ConfigurationError

    await _kind(async_session, "charge", {"timeout": 300.0})
    acta = Acta(namespace=NS, allow_unknown_kinds=True)
    for field, value in (
        ("concurrency_limit", "0"),
        ("concurrency_limit", "-4"),
        ("concurrency_limit", "9" * 40),
        ("rate", "0/s"),
        ("rate", "lots"),
        ("rate", "1/s" * 13),
        ("timeout", "-1"),
        ("timeout", "nan"),
        ("timeout", "1e400"),
        ("timeout", "ten"),
        ("paused", "maybe"),
        ("timeout", "1" * 5000),  # long: a number past any float
        ("rate", "x" * 60_000),  # long, under the body's bound: the message cuts it
    ):
        try:
            await acta.set_policy(async_session, "charge", **{field: value})
        except ConfigurationError as exc:
            cli_says = str(exc)
        else:
            raise AssertionError(f"{field}={value!r} was accepted")
        await async_session.rollback()
        refused = await _post(
            client,
            "/definitions/charge",
            "/definitions/charge/set",
            confirmed="1",
            **{field: value},
        )
        assert refused.status_code == 400, (field, value)
        assert cli_says.startswith(f"charge: {field}=") or field in cli_says
        assert html_escape(cli_says) in refused.text, (cli_says, refused.text[-3000:])
        # The form shows what was typed, to correct it.
        assert f'name="{field}"' in refused.text
    assert await _overrides(async_session, "charge") == {}

    nul = await _post(
        client, "/definitions/charge", "/definitions/charge/set", confirmed="1", timeout="3\x00"
    )
    assert nul.status_code == 400 and "timeout holds a NUL character" in nul.text
    huge = await _post(
        client, "/definitions/charge", "/definitions/charge/set", confirmed="1", rate="9" * 70_000
    )
    assert huge.status_code == 413
    missing = await _post(
        client, "/definitions/charge", "/definitions/nope/set", confirmed="1", timeout="3"
    )
    assert missing.status_code == 303 and "msg=kind-missing" in missing.headers["location"]
    assert await _overrides(async_session, "charge") == {}


async def test_the_kinds_page_shows_each_kinds_live_rate_errors_and_latency(
    client: httpx.AsyncClient, add_job: AddJob, async_session: AsyncSession
) -> None:
    await _kind(async_session, "charge", {})
    await _kind(async_session, "idle", {})
    for _ in range(4):
        await _finished(add_job, async_session, "charge", JobStatus.SUCCEEDED, 1)
    await _finished(add_job, async_session, "charge", JobStatus.FAILED, 2)
    await _finished(
        add_job, async_session, "charge", JobStatus.SUCCEEDED, 20
    )  # before the 5 minutes

    html = (await client.get("/definitions")).text
    row = re.search(r'<tr><td><a href="/definitions/charge">charge</a></td>(.*?)</tr>', html, re.S)
    assert row, html
    cells = re.findall(r'<td class="num[^"]*">([^<]*)</td>', row.group(1))
    assert cells[:4] == ["1.0", "20.0 %", "1.50 s", "1.50 s"]
    idle = re.search(r'<tr><td><a href="/definitions/idle">idle</a></td>(.*?)</tr>', html, re.S)
    assert idle and re.findall(r'<td class="num[^"]*">([^<]*)</td>', idle.group(1))[:2] == [
        "0",
        "&ndash;",
    ]

    page = (await client.get("/definitions/charge")).text
    assert "1.0 jobs/min (4 succeeded, 1 failed, 0 cancelled)" in page
    assert 'aria-label="charge: Throughput per minute over the last hour: 5 jobs' in page
    day = (await client.get("/definitions/charge", params={"chart": "24h"})).text
    assert 'aria-label="charge: Throughput per hour over the last day: 5 jobs' in day
    assert (await client.get("/definitions/nope")).status_code == 404


async def test_a_small_set_of_a_big_namespace_is_estimated_not_searched_for(
    client: httpx.AsyncClient,
    add_job: AddJob,
    async_session: AsyncSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No index holds every job's status: counting 3 failed among a namespace's many
    succeeded could read them all, so past ``COUNT_SCAN_BOUND`` jobs it is estimated."""
    from acta_sqla import inspect

    monkeypatch.setattr(inspect, "COUNT_SCAN_BOUND", 100)
    await async_session.execute(
        text(
            "INSERT INTO acta.job (namespace, kind, status, finished_at) "
            "SELECT :ns, 'bulk', 'succeeded', now() FROM generate_series(1, 300)"
        ),
        {"ns": NS},
    )
    await async_session.commit()
    for _ in range(3):
        await add_job("charge", JobStatus.FAILED)
    await async_session.execute(text("ANALYZE acta.job"))
    await async_session.commit()
    jobs = (await client.get("/jobs", params={"status": "failed"})).text
    assert "About " in jobs and "jobs match (the planner's estimate" in jobs
    overview = (await client.get("/")).text
    card = re.search(
        r"status-failed\">failed</span></span>\s*<span class=\"count\">([^<]+)<", overview
    )
    assert card and card.group(1).startswith("≈ ")


async def test_read_only_shows_no_limit_form_and_refuses_its_post(
    make_app: Callable[..., Any], client_for: Any, async_session: AsyncSession
) -> None:
    await _kind(async_session, "charge", {})
    app = make_app(read_only=True)
    async with client_for(app) as c:
        page = (await c.get("/definitions/charge")).text
        assert "Edit limits" not in page and 'name="concurrency_limit"' not in page
        assert "data-live" not in page
        token = app.state.acta.keys.csrf_token(c.cookies["acta_sid"])
        refused = await c.post(
            "/definitions/charge/set", data={"csrf": token, "confirmed": "1", "timeout": "5"}
        )
        assert refused.status_code == 403 and "read-only" in refused.text
    assert await _overrides(async_session, "charge") == {}
