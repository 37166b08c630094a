"""The dashboard in a real browser: headless Chromium (Debian's ``chromium`` package)
driven by Playwright, against the dashboard served by uvicorn on the test database, with
jobs run by acta's own worker pipeline (``acta_sqla.testing.drain``).

Skipped, saying why, when Playwright or a Chromium binary is missing (``apt-get install
chromium``; ``.ci/run`` installs it; Playwright's own browser download is not used); with
``CI=true`` a missing one fails the run instead.
``ACTA_DASHBOARD_SCREENSHOTS=1`` also saves a screenshot of each page into docs/img/.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, insert, select
from sqlalchemy.orm import Session

from acta_sqla import Acta, Context, Job, JobStatus
from acta_sqla.dashboard import acta_dashboard
from acta_sqla.models import Definition, Namespace, Schedule
from acta_sqla.testing import drain
from tests.harness import REPO_ROOT
from tests.waiting import wait_for

from .test_serving import _free_port


def _missing(reason: str) -> None:
    """Skip these tests, saying why (the run's summary lists it: ``-ra``); under CI
    (``CI=true``, as `.ci/run` runs) fail instead: CI installs Chromium, so a missing one
    there is a broken install step, not a reason to test less."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


try:
    import playwright.sync_api as playwright_api
except ImportError:
    _missing("the browser tests need Playwright for Python: pip install -e '.[test]'")
CHROMIUM = os.environ.get("ACTA_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    _missing(
        f"the browser tests need Chromium, none at {CHROMIUM}: apt-get install chromium "
        "(or point ACTA_CHROMIUM at one)"
    )

NS = "browser"
SHOTS = REPO_ROOT / "docs" / "img" if os.environ.get("ACTA_DASHBOARD_SCREENSHOTS") else None
XSS = "<script>window.pwned = 1</script>"

acta = Acta(namespace=NS)
BROKEN = {"flaky": True}


@acta.job(max_attempts=1)
async def render_page(ctx: Context, html: str) -> str:
    if BROKEN["flaky"]:
        raise ValueError("the template store is down")
    return f"rendered {len(html)} characters"


@acta.job
async def send_report(ctx: Context, to: str) -> None:
    return None


@acta.job(lane="order-{order}", concurrency_key="acct-{order}")
async def ship(ctx: Context, order: int, item: str) -> None:
    return None


def _drain(url: str) -> None:
    # In a thread of its own: Playwright's sync API keeps an event loop in this one.
    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(asyncio.run, drain(acta, database_url=url)).result(timeout=60)
    assert not result.crashed


def _enqueue(url: str, *jobs: Job) -> list[int]:
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with Session(engine) as session:
            for job in jobs:
                acta.enqueue_sync(session, job)
            session.commit()
            return [j.id for j in jobs]
    finally:
        engine.dispose()


def _status(url: str, job_id: int) -> JobStatus | None:
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with Session(engine) as session:
            return session.execute(select(Job.status).where(Job.id == job_id)).scalar()
    finally:
        engine.dispose()


@pytest.fixture
def serve(db: str) -> Iterator[Callable[..., str]]:
    """``serve(**options)``: the dashboard on a free local port (uvicorn, in a thread);
    its base URL."""
    import uvicorn

    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(**options: Any) -> str:
        port = _free_port()
        app = acta_dashboard(db, namespace=NS, **options)
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        servers.append((server, thread))
        wait_for(lambda: server.started, timeout=30, what="the dashboard server to start")
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium for the module's tests on this xdist worker (starting one costs about
    1.5 s of CPU); each test gets a context of its own (:func:`page`)."""
    with playwright_api.sync_playwright() as p:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any, serve: Callable[..., str]) -> Iterator[Any]:
    """A page in a new browser context (its own cookies and storage: nothing carries over
    from the test before), closed before the test's dashboard servers stop."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    try:
        yield context.new_page()
    finally:
        context.close()


def _shot(page: Any, name: str) -> None:
    if SHOTS is not None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"dashboard-{name}.png"), full_page=True)


def test_look_filter_open_retry_and_see_it_run_cancel_and_csrf(
    db: str, serve: Callable[..., str], page: Any
) -> None:
    expect = playwright_api.expect
    BROKEN["flaky"] = True
    (failing,) = _enqueue(db, render_page.job(html=XSS))
    _drain(db)
    assert _status(db, failing) == JobStatus.FAILED
    base = serve()

    page.goto(base + "/")
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    expect(page.locator("main")).to_contain_text("render_page")  # failed in the last hour
    _shot(page, "overview")

    page.get_by_role("link", name="Jobs", exact=True).click()
    page.select_option("select[name=status]", "failed")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("render_page")
    _shot(page, "jobs")

    page.get_by_role("link", name=f"#{failing}").click()
    # The args hold a script tag: shown as text, never run.
    expect(page.locator("pre.args")).to_contain_text(XSS)
    assert page.evaluate("window.pwned") is None
    expect(page.locator("p.error")).to_contain_text("ValueError: the template store is down")
    _shot(page, "job")

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Retry").click()
    expect(page.locator(".message")).to_have_text("Job is ready again.")
    BROKEN["flaky"] = False
    _drain(db)
    page.reload()
    expect(page.locator("h1 .status")).to_have_text("succeeded")
    expect(page.locator("pre.result")).to_contain_text("rendered")

    # A retry whose token was tampered with is refused, and changes nothing.
    page.evaluate("document.querySelector('input[name=csrf]').value = 'forged'")
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.get_by_role("button", name="Retry").click()
    assert posted.value.status == 403
    expect(page.locator("p.error")).to_contain_text("CSRF check failed")
    assert _status(db, failing) == JobStatus.SUCCEEDED

    (waiting,) = _enqueue(db, send_report.job(to="ops@example.com"))
    page.goto(f"{base}/jobs/{waiting}")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.get_by_role("button", name="Cancel").click()
    assert _status(db, waiting) == JobStatus.READY  # dismissed: nothing sent
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator(".message")).to_have_text("Job cancelled.")
    assert _status(db, waiting) == JobStatus.CANCELLED

    if SHOTS is not None:
        for name in ("failures", "workers", "locks"):
            page.goto(f"{base}/{name}")
            _shot(page, name)


def test_from_a_job_to_its_lane_and_key_then_pause_its_kind(
    db: str, serve: Callable[..., str], page: Any
) -> None:
    expect = playwright_api.expect
    head, second, third = _enqueue(
        db, *(ship.job(order=7, item=item) for item in ("lamp", "desk", "chair"))
    )
    base = serve()
    page.goto(f"{base}/jobs/{third}")
    expect(page.locator("dl.fields")).to_contain_text("its turn in lane order-7")
    page.get_by_role("link", name="order-7").click()
    expect(page.get_by_role("heading", name="Lane order-7")).to_be_visible()
    expect(page.locator("p.waits-on")).to_contain_text("needs a free slot of concurrency key")
    ids = page.locator("table tbody tr td:nth-child(2)").all_inner_texts()
    assert ids == [f"#{head}", f"#{second}", f"#{third}"]
    _shot(page, "lane")
    page.get_by_role("link", name="Lanes", exact=True).click()
    expect(page.locator("main")).to_contain_text("order-7")
    _shot(page, "lanes")
    page.get_by_role("link", name="Keys", exact=True).click()
    page.get_by_role("link", name="acct-7").click()
    expect(page.locator("dl.fields")).to_contain_text("ship: 1 at once")
    _shot(page, "key")

    # Kinds are stored by a worker's start: drain once (it runs the lane's head).
    _drain(db)
    page.get_by_role("link", name="Kinds", exact=True).click()
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("tr", has_text="ship").get_by_role("button", name="Pause").click()
    expect(page.locator(".message")).to_have_text("Paused.")
    expect(page.locator("tr", has_text="ship").get_by_role("button", name="Resume")).to_be_visible()
    _shot(page, "kinds")
    page.get_by_role("link", name="Schedules", exact=True).click()
    expect(page.locator("main")).to_contain_text("No schedule in this namespace")


def test_the_password_prompt(serve: Callable[..., str], page: Any) -> None:
    expect = playwright_api.expect
    base = serve(password="correct horse")
    page.goto(base + "/workers")
    expect(page.get_by_label("Password")).to_be_visible()
    _shot(page, "login")
    page.get_by_label("Password").fill("wrong")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_have_text("Wrong password.")
    page.get_by_label("Password").fill("correct horse")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Workers")).to_be_visible()
    assert page.url == base + "/workers"


def test_logout_ends_the_session_for_the_back_button_and_for_copied_cookies(
    serve: Callable[..., str], page: Any
) -> None:
    """Log in, copy the cookies, log out: the back button shows the login page again (the
    pages are ``no-store``, so the browser asks the server), and the copied cookies put
    back into the browser are refused (issue 35: they were still let in)."""
    expect = playwright_api.expect
    base = serve(password="correct horse")
    page.goto(base + "/workers")
    page.get_by_label("Password").fill("correct horse")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Workers")).to_be_visible()
    copied = page.context.cookies()
    assert {c["name"] for c in copied} == {"acta_sid", "acta_auth"}
    page.get_by_role("link", name="Jobs", exact=True).click()
    expect(page.get_by_role("heading", name="Jobs")).to_be_visible()

    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_label("Password")).to_be_visible()
    assert "acta_auth" not in {c["name"] for c in page.context.cookies()}
    page.go_back()
    expect(page.get_by_label("Password")).to_be_visible()
    expect(page.get_by_role("heading", name="Jobs")).to_have_count(0)

    page.context.clear_cookies()
    page.context.add_cookies(copied)
    page.goto(base + "/workers")
    expect(page.get_by_label("Password")).to_be_visible()
    expect(page.get_by_role("heading", name="Workers")).to_have_count(0)
    assert page.url.startswith(base + "/login?next=")


def test_names_a_url_must_encode_reach_their_pages_and_their_buttons(
    db: str, serve: Callable[..., str], page: Any
) -> None:
    """A real browser through uvicorn: the links and forms of a lane, a key, a schedule
    and a kind whose names hold "/", "?", "#", "%" and spaces reach the named thing."""
    expect = playwright_api.expect
    odd = "reports/daily?x=1#frag 50%25"
    (job_id,) = _enqueue(db, send_report.job(to="x", lane=odd, concurrency_key=odd))
    engine = create_engine(db.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with Session(engine) as session:
            session.execute(insert(Namespace).values(name=NS))
            session.execute(
                insert(Definition).values(namespace=NS, kind=odd, declared={}, overrides={})
            )
            session.execute(
                insert(Schedule).values(namespace=NS, name=odd, cron="0 3 * * *", kind="x")
            )
            session.commit()
    finally:
        engine.dispose()
    base = serve()

    page.goto(f"{base}/jobs/{job_id}")
    page.get_by_role("link", name=odd).first.click()
    expect(page.get_by_role("heading", name=f"Lane {odd}")).to_be_visible()
    page.goto(f"{base}/jobs/{job_id}")
    page.get_by_role("link", name=odd).last.click()
    expect(page.get_by_role("heading", name=f"Concurrency key {odd}")).to_be_visible()

    page.goto(f"{base}/schedules")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Pause", exact=True).click()
    expect(page.locator(".message")).to_have_text("Paused.")
    page.goto(f"{base}/definitions")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Pause", exact=True).click()
    expect(page.locator(".message")).to_have_text("Paused.")

    engine = create_engine(db.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with Session(engine) as session:
            assert session.execute(select(Schedule.enabled)).scalar_one() is False
            assert session.execute(select(Definition.overrides)).scalar_one() == {"paused": True}
    finally:
        engine.dispose()


def test_charts_on_the_overview_and_a_kinds_limits_edited_from_its_page(
    db: str, serve: Callable[..., str], page: Any
) -> None:
    """Issue 32: the overview charts throughput, failures and queue wait (SVG, drawn with
    JavaScript off too); a kind's limits are edited from the Kinds page, a bad value
    refused with the CLI's message naming the field."""
    expect = playwright_api.expect
    BROKEN["flaky"] = True
    _enqueue(db, *(send_report.job(to=f"u{i}@example.com") for i in range(6)))
    _enqueue(db, *(render_page.job(html=f"<p>{i}</p>") for i in range(2)))
    _drain(db)
    base = serve()

    page.goto(base + "/")
    throughput = page.locator("svg.chart-throughput")
    expect(throughput).to_be_visible()
    expect(throughput).to_have_attribute("aria-label", re.compile(r": 6 jobs in the last hour$"))
    box = throughput.bounding_box()
    assert box is not None and box["width"] > 300 and box["height"] > 100
    bar = throughput.locator("rect.bar-ok").last
    assert bar.bounding_box()["height"] > 10  # a bar drawn, styled by the stylesheet
    expect(page.locator("svg.chart-failures rect.bar-bad")).to_have_count(1)
    expect(page.locator("svg.chart-wait")).to_be_visible()
    _shot(page, "overview")
    page.get_by_role("link", name="the last day, per hour").click()
    expect(page.locator("svg.chart-throughput")).to_have_attribute(
        "aria-label", re.compile(r"per hour over the last day: 6 jobs")
    )

    no_js = page.context.browser.new_context(java_script_enabled=False)
    try:
        plain = no_js.new_page()
        plain.goto(base + "/")
        expect(plain.locator("svg.chart-throughput rect.bar-ok")).not_to_have_count(0)
    finally:
        no_js.close()

    page.get_by_role("link", name="Kinds", exact=True).click()
    # render_page failed both its jobs: 100 % errors, beside its rate and run times.
    expect(page.locator("table.kinds tr", has_text="render_page")).to_contain_text("100.0 %")
    page.locator("table.kinds").get_by_role("link", name="send_report").click()
    expect(page.get_by_role("heading", name="Kind send_report")).to_be_visible()
    page.get_by_label("concurrency_limit").fill("0")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("alert")).to_have_text(
        "send_report: concurrency_limit='0' must be an int >= 1 "
        "(executions of one concurrency key at once)"
    )
    expect(page.get_by_label("concurrency_limit")).to_have_value("0")
    page.get_by_label("concurrency_limit").fill("3")
    page.get_by_label("rate").fill("10/s")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".message")).to_contain_text("Policy changed")
    expect(page.locator("table.policy")).to_contain_text("10/s")
    _shot(page, "kind")
    engine = create_engine(db.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with Session(engine) as session:
            overrides = session.execute(
                select(Definition.overrides).where(Definition.kind == "send_report")
            ).scalar_one()
    finally:
        engine.dispose()
    assert overrides == {"concurrency_limit": 3, "rate": "10/s"}
