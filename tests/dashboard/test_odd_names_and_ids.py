"""Names that are not URL-safe (schedules, kinds, lanes, keys holding '/', '?', '#', '%'
or markup) and job ids that cannot exist: every page still answers, every link and form
reaches the thing it names, and a bad id is a clear 400 or a 404, never a 500."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from acta_sqla import JobStatus
from acta_sqla.models import Definition, Namespace, Schedule

from .conftest import NS, csrf_of, status_of

AddJob = Callable[..., Any]

ODD = [
    "reports/daily",
    "<script>x</script>",
    "acct:7?x=1#frag",
    "cust:50%25",
    "%2F",
    "/lead/and/trail/",
    "../up",
    "sp ace+plus&amp",
    "ünï😀",
    ".",
    "..",
    "~.",
    "~",
]
"""Names a URL path must encode: separators, query and fragment marks, a percent sign
(also one that already looks encoded), dot segments, markup, spaces and non-ASCII; names
that are exactly "." or ".." (a browser removes such a segment: they are written "~." and
"~..", so "~." is written "~~.")."""

_FORM = re.compile(r'<form method="post" action="([^"]+)" class="inline" data-confirm="([^"]+)">')


def _forms(page: str) -> dict[str, str]:
    """The page's action forms: their confirmation question -> their action URL."""
    return {html.unescape(q): html.unescape(a) for a, q in _FORM.findall(page)}


async def _confirm_without_javascript(
    client: httpx.AsyncClient, action: str, token: str
) -> httpx.Response:
    """Post the form as a browser without JavaScript does (not confirmed), then press the
    button of the confirmation page that comes back."""
    asked = await client.post(action, data={"csrf": token, "confirmed": ""})
    assert asked.status_code == 200, asked.text
    target = re.search(r'<form method="post" action="([^"]+)"', asked.text)
    assert target
    return await client.post(html.unescape(target.group(1)), data={"csrf": token, "confirmed": "1"})


async def test_schedules_whose_names_need_encoding_are_listed_and_each_button_acts_on_its_own(
    client: httpx.AsyncClient, async_session: AsyncSession
) -> None:
    for name in ODD:
        async_session.add(
            Schedule(namespace=NS, name=name, cron="0 3 * * *", timezone="UTC", kind="report")
        )
    await async_session.commit()

    page = await client.get("/schedules")
    assert page.status_code == 200, page.text
    assert "&lt;script&gt;x&lt;/script&gt;" in page.text and "<script>x</script>" not in page.text
    forms = _forms(page.text)
    token = csrf_of(page.text)
    for name in ODD:
        done = await client.post(
            forms[f"Pause schedule {name}?"], data={"csrf": token, "confirmed": "1"}
        )
        assert done.status_code == 303 and "msg=paused" in done.headers["location"], name
    async_session.expire_all()
    rows = (await async_session.execute(select(Schedule.name, Schedule.enabled))).all()
    assert {n: e for n, e in rows} == dict.fromkeys(ODD, False)

    # Without JavaScript: the confirmation page's form reaches the same schedule.
    forms = _forms((await client.get("/schedules")).text)
    for name in ODD[:4]:
        done = await _confirm_without_javascript(client, forms[f"Resume schedule {name}?"], token)
        assert done.status_code == 303 and "msg=resumed" in done.headers["location"], name
    ran = await client.post(
        forms["Fire schedule reports/daily once now?"], data={"csrf": token, "confirmed": "1"}
    )
    assert "msg=fired" in ran.headers["location"]
    async_session.expire_all()
    rows = (await async_session.execute(select(Schedule.name, Schedule.enabled))).all()
    assert {n: e for n, e in rows} == {n: n in ODD[:4] for n in ODD}


async def test_kinds_whose_names_need_encoding_are_listed_and_each_button_acts_on_its_own(
    client: httpx.AsyncClient, async_session: AsyncSession
) -> None:
    async_session.add(Namespace(name=NS))
    await async_session.commit()
    for kind in ODD:
        async_session.add(Definition(namespace=NS, kind=kind, declared={}, overrides={}))
    await async_session.commit()

    page = await client.get("/definitions")
    assert page.status_code == 200, page.text
    forms = _forms(page.text)
    token = csrf_of(page.text)
    for kind in ODD:
        question = f"Pause kind {kind}? Its jobs stay queued until resumed."
        done = await client.post(forms[question], data={"csrf": token, "confirmed": "1"})
        assert done.status_code == 303 and "msg=paused" in done.headers["location"], kind
    async_session.expire_all()
    rows = (await async_session.execute(select(Definition.kind, Definition.overrides))).all()
    assert {k: o for k, o in rows} == {kind: {"paused": True} for kind in ODD}

    # Without JavaScript: the confirmation page's form reaches the same kind.
    forms = _forms((await client.get("/definitions")).text)
    for kind in ODD:
        done = await _confirm_without_javascript(client, forms[f"Resume kind {kind}?"], token)
        assert done.status_code == 303 and "msg=resumed" in done.headers["location"], kind
    async_session.expire_all()
    rows = (await async_session.execute(select(Definition.kind, Definition.overrides))).all()
    assert {k: o for k, o in rows} == {kind: {} for kind in ODD}


async def test_lane_and_key_links_reach_their_page_whatever_the_name(
    client: httpx.AsyncClient, add_job: AddJob
) -> None:
    ids = {name: await add_job("sync", lane_key=name, concurrency_key=name) for name in ODD}

    for listing, prefix in (("/lanes", "/lanes/"), ("/keys", "/keys/")):
        page = (await client.get(listing)).text
        links = [html.unescape(h) for h in re.findall(rf'href="({prefix}[^"]*)"', page)]
        assert len(links) == len(ODD), links
        reached = set()
        for link in links:
            target = await client.get(link)
            assert target.status_code == 200, (link, target.text)
            heading = re.search(r"<h1>[^<]*<code>(.*?)</code></h1>", target.text)
            assert heading, target.text
            reached.add(html.unescape(heading.group(1)))
        assert reached == set(ODD), listing

    # From a job, its lane and its key are one click away.
    for name, job_id in ids.items():
        page = (await client.get(f"/jobs/{job_id}")).text
        for prefix in ("/lanes/", "/keys/"):
            link = re.search(rf'href="({prefix}[^"]*)"', page)
            assert link, page
            target = await client.get(html.unescape(link.group(1)))
            assert target.status_code == 200, (name, link.group(1))
            assert f"#{job_id}</a>" in target.text


async def test_a_job_id_that_cannot_exist_is_a_clear_400_or_a_404(
    client: httpx.AsyncClient, add_job: AddJob, async_session: AsyncSession
) -> None:
    biggest = 2**63 - 1
    for typed in ("-3", "0", str(biggest + 1), "99999999999999999999"):
        page = await client.get("/jobs", params={"id": typed})
        assert page.status_code == 400, (typed, page.text)
        assert f"id must be a job id from 1 to {biggest}, got {typed!r}" in html.unescape(page.text)
    for typed in ("0", "-1", "99999999999999999999"):
        page = await client.get("/jobs", params={"before": typed})
        assert page.status_code == 400, (typed, page.text)
        assert f"before must be a job id from 1 to {biggest}" in html.unescape(page.text)
    words = await client.get("/jobs", params={"id": "seven"})
    assert words.status_code == 400 and "id must be a whole number" in html.unescape(words.text)

    # The biggest id an id can be is asked for, and is simply not there.
    found = await client.get("/jobs", params={"id": str(biggest)})
    assert found.status_code == 303 and found.headers["location"] == f"/jobs/{biggest}"
    for path_id in (str(biggest), "99999999999999999999", "0"):
        page = await client.get(f"/jobs/{path_id}")
        assert page.status_code == 404, (path_id, page.text)
        assert f"No job with id {path_id}." in page.text

    job_id = await add_job("send", JobStatus.FAILED)
    token = csrf_of((await client.get(f"/jobs/{job_id}")).text)
    for op in ("retry", "cancel", "delete"):
        acted = await client.post(
            f"/jobs/99999999999999999999/{op}", data={"csrf": token, "confirmed": "1"}
        )
        assert acted.status_code == 404 and "No job with id 99999999999999999999." in acted.text
    assert await status_of(async_session, job_id) == JobStatus.FAILED
