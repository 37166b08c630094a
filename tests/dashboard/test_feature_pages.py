"""The pages of lanes, concurrency keys, waits and children, schedules and kinds, through
the ASGI app (httpx), on a real database; their actions (pause, resume, run)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from acta_sqla import JobStatus
from acta_sqla.models import ConcurrencySlot, Definition, Job, Namespace, Schedule

from .conftest import NS, csrf_of

AddJob = Callable[..., Any]


async def _act(client: httpx.AsyncClient, page: str, action: str) -> httpx.Response:
    token = csrf_of((await client.get(page)).text)
    return await client.post(action, data={"csrf": token, "confirmed": "1"})


async def test_a_lane_page_lists_its_jobs_in_run_order_and_says_what_its_head_waits_on(
    client: httpx.AsyncClient, add_job: AddJob, async_session: AsyncSession
) -> None:
    head = await add_job("ship", JobStatus.EXECUTING, lane_key="order-7", worker_id=3)
    later = [await add_job("ship", JobStatus.WAITING, lane_key="order-7") for _ in range(2)]
    await add_job("ship", JobStatus.SUCCEEDED, lane_key="order-7")  # finished: not listed
    await add_job("ship", lane_key="order-8")

    lanes = (await client.get("/lanes")).text
    assert re.search(r'href="/lanes/order-7">order-7</a></td><td class="num">3</td>', lanes)
    assert f">#{head}</a> ship" in lanes

    page = await client.get("/lanes/order-7")
    assert page.status_code == 200
    assert "running on worker #3" in page.text
    assert [int(i) for i in re.findall(r'href="/jobs/(\d+)">#', page.text)][1:] == [
        head,
        *later,
    ]
    # From a job of the lane, its lane is one click away.
    assert 'href="/lanes/order-7"' in (await client.get(f"/jobs/{later[0]}")).text
    missing = await client.get("/lanes/nope")
    assert missing.status_code == 404 and "has no unfinished job" in missing.text


async def test_a_key_page_shows_its_slots_its_jobs_and_the_limit(
    client: httpx.AsyncClient, add_job: AddJob, async_session: AsyncSession
) -> None:
    holder = await add_job("sync", JobStatus.EXECUTING, concurrency_key="acct:1", execution_id=5)
    queued = await add_job("sync", concurrency_key="acct:1")
    async_session.add(Namespace(name=NS))
    await async_session.commit()
    async_session.add(
        Definition(namespace=NS, kind="sync", declared={"concurrency_limit": 2}, overrides={})
    )
    await async_session.commit()
    async_session.add(
        ConcurrencySlot(namespace=NS, key="acct:1", job_id=holder, execution_id=5, worker_id=9)
    )
    await async_session.commit()

    keys = (await client.get("/keys")).text
    assert re.search(
        r'href="/keys/acct:1">acct:1</a></td><td class="num">1</td><td class="num">1</td>', keys
    )
    page = (await client.get("/keys/acct:1")).text
    assert "sync: 2 at once" in page
    assert f'href="/jobs/{holder}">#{holder}</a></td><td>#9</td>' in page
    assert f'href="/jobs/{queued}"' in page
    assert 'href="/keys/acct:1"' in (await client.get(f"/jobs/{queued}")).text
    assert (await client.get("/keys/none-such")).status_code == 404


async def test_a_parent_shows_its_children_and_a_waiting_job_what_it_waits_for(
    client: httpx.AsyncClient, add_job: AddJob, async_session: AsyncSession
) -> None:
    parent = await add_job("fan", JobStatus.WAITING, pending_children=1)
    done = await add_job("leaf", JobStatus.SUCCEEDED)
    running = await add_job("leaf", JobStatus.EXECUTING)
    await async_session.execute(
        text("UPDATE acta.job SET parent_id = :p WHERE id IN (:a, :b)"),
        {"p": parent, "a": done, "b": running},
    )
    signalled = await add_job(
        "approve", JobStatus.WAITING, awaited_signal="approved", signals={"note": "<b>hi</b>"}
    )
    await async_session.commit()

    page = (await client.get(f"/jobs/{parent}")).text
    assert "1 unfinished child job(s)" in page
    children = page.split("<h2>Children</h2>")[1]
    assert [int(i) for i in re.findall(r'href="/jobs/(\d+)">#', children)] == [done, running]
    assert f'href="/jobs/{parent}">#{parent}</a>' in (await client.get(f"/jobs/{done}")).text
    waiting = (await client.get(f"/jobs/{signalled}")).text
    assert "signal <code>approved</code>" in waiting
    assert "&lt;b&gt;hi&lt;/b&gt;" in waiting and "<b>hi</b>" not in waiting


# The schedule's next tick (the first 03:00 UTC after now): fires sit on ticks, as a
# worker enqueues them.
NEXT_TICK = "date_trunc('day', now() - interval '3 hours', 'UTC') + interval '1 day 3 hours'"


async def _schedule(session: AsyncSession, add_job: AddJob) -> tuple[int, int]:
    session.add(
        Schedule(namespace=NS, name="nightly", cron="0 3 * * *", timezone="UTC", kind="report")
    )
    await session.commit()
    last = await add_job(
        "report",
        JobStatus.SUCCEEDED,
        schedule_name="nightly",
        scheduled_at=text(f"{NEXT_TICK} - interval '1 day'"),
    )
    pending = await add_job("report", schedule_name="nightly", scheduled_at=text(NEXT_TICK))
    return last, pending


async def test_schedules_page_pause_resume_and_run(
    client: httpx.AsyncClient, add_job: AddJob, async_session: AsyncSession
) -> None:
    last, pending = await _schedule(async_session, add_job)
    page = (await client.get("/schedules")).text
    assert "<code>0 3 * * *</code>" in page and f'href="/jobs/{last}">succeeded</a>' in page

    paused = await _act(client, "/schedules", "/schedules/nightly/pause")
    assert paused.status_code == 303 and "msg=paused" in paused.headers["location"]
    async_session.expire_all()
    assert (await async_session.get(Job, pending)).status is JobStatus.CANCELLED  # type: ignore[union-attr]
    assert "paused</span>" in (await client.get("/schedules")).text

    resumed = await _act(client, "/schedules", "/schedules/nightly/resume")
    assert "msg=resumed" in resumed.headers["location"]
    fires = (
        await async_session.execute(
            select(Job.status).where(Job.schedule_name == "nightly", Job.status == "ready")
        )
    ).all()
    assert len(fires) == 1  # the next fire: the one the pause cancelled, ready again
    async_session.expire_all()
    assert (await async_session.get(Job, pending)).status is JobStatus.READY  # type: ignore[union-attr]

    ran = await _act(client, "/schedules", "/schedules/nightly/run")
    assert "msg=fired" in ran.headers["location"]
    extra = (
        await async_session.execute(
            select(Job.id).where(Job.kind == "report", Job.schedule_name.is_(None))
        )
    ).all()
    assert len(extra) == 1
    missing = await _act(client, "/schedules", "/schedules/nope/pause")
    assert "msg=schedule-missing" in missing.headers["location"]


async def test_kinds_page_shows_overrides_and_pauses_a_kind(
    client: httpx.AsyncClient, async_session: AsyncSession
) -> None:
    async_session.add(Namespace(name=NS))
    await async_session.commit()
    async_session.add(
        Definition(
            namespace=NS,
            kind="mail",
            declared={"max_attempts": 20, "timeout": 300.0},
            overrides={"timeout": 30.0},
        )
    )
    await async_session.commit()
    page = (await client.get("/definitions")).text
    assert "<strong>30.0</strong>" in page and "<td>20</td>" in page
    done = await _act(client, "/definitions", "/definitions/mail/pause")
    assert "msg=paused" in done.headers["location"]
    async_session.expire_all()
    row = await async_session.get(Definition, (NS, "mail"))
    assert row is not None and row.overrides == {"timeout": 30.0, "paused": True}
    assert 'action="/definitions/mail/resume"' in (await client.get("/definitions")).text
    await _act(client, "/definitions", "/definitions/mail/resume")
    async_session.expire_all()
    row = await async_session.get(Definition, (NS, "mail"))
    assert row is not None and row.overrides == {"timeout": 30.0}


async def test_feature_actions_need_the_csrf_token(
    client: httpx.AsyncClient, add_job: AddJob, async_session: AsyncSession
) -> None:
    await _schedule(async_session, add_job)
    await client.get("/schedules")  # a session cookie, but no token sent
    refused = await client.post("/schedules/nightly/pause", data={"confirmed": "1"})
    assert refused.status_code == 403
