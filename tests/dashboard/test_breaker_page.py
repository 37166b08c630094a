"""The Kinds page's circuit-breaker cell and its one action (close by hand): POST with the
CSRF token, confirmed, one audited log line (docs/breakers.md)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
from loguru import logger
from sqlalchemy.ext.asyncio import AsyncSession

from acta_sqla.models import BreakerState, Definition, Namespace

from .conftest import NS, csrf_of

BREAKER = "failure_rate=0.5,min_calls=20,window=60,open_for=30,probes=1"


async def _kinds(session: AsyncSession) -> None:
    session.add(Namespace(name=NS))
    await session.commit()
    session.add(Definition(namespace=NS, kind="pay", declared={"breaker": BREAKER}))
    session.add(Definition(namespace=NS, kind="mail", declared={"breaker": None}))
    await session.commit()


def _logged() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="INFO", format="{message}")
    logger.enable("acta_sqla")
    yield lines
    logger.remove(sink)


async def test_the_kinds_page_shows_an_open_breaker_and_closes_it_by_hand(
    client: httpx.AsyncClient, async_session: AsyncSession
) -> None:
    await _kinds(async_session)
    page = (await client.get("/definitions")).text
    assert "closed</td>" in page and "close-breaker" not in page  # never counted: closed
    async_session.add(
        BreakerState(
            namespace=NS,
            kind="pay",
            key="",
            state="open",
            open_until=datetime.now(UTC) + timedelta(seconds=30),
        )
    )
    await async_session.commit()
    page = (await client.get("/definitions")).text
    assert "pay: open until" in page
    assert 'action="/definitions/pay/close-breaker"' in page
    assert 'action="/definitions/mail/close-breaker"' not in page

    # No token: refused, nothing changed.
    refused = await client.post("/definitions/pay/close-breaker", data={"confirmed": "1"})
    assert refused.status_code == 403
    # Not confirmed: the confirmation step, nothing changed.
    token = csrf_of(page)
    asked = await client.post("/definitions/pay/close-breaker", data={"csrf": token})
    assert asked.status_code == 200 and "Close the breaker of kind" in asked.text
    async_session.expire_all()
    row = await async_session.get(BreakerState, (NS, "pay", ""))
    assert row is not None and row.state == "open"

    logs = _logged()
    lines = next(logs)
    try:
        done = await client.post(
            "/definitions/pay/close-breaker", data={"csrf": token, "confirmed": "1"}
        )
    finally:
        next(logs, None)
    assert done.status_code == 303 and "msg=breaker-closed" in done.headers["location"]
    async_session.expire_all()
    row = await async_session.get(BreakerState, (NS, "pay", ""))
    assert row is not None and row.state == "closed" and row.open_until is None
    assert any(line.startswith("breaker pay closed by hand by ") for line in lines), lines
    assert any(line.startswith("close-breaker kind pay in dash from ") for line in lines), lines

    again = await client.post(
        "/definitions/pay/close-breaker", data={"csrf": token, "confirmed": "1"}
    )
    assert "msg=breaker-not-open" in again.headers["location"]


async def test_a_read_only_dashboard_shows_the_state_without_the_action(
    make_app: object, client_for: object, async_session: AsyncSession
) -> None:
    await _kinds(async_session)
    async_session.add(
        BreakerState(namespace=NS, kind="pay", key="", state="half_open", probe_jobs=[1])
    )
    await async_session.commit()
    app = make_app(read_only=True)  # type: ignore[operator]
    async with client_for(app) as client:  # type: ignore[operator]
        page = (await client.get("/definitions")).text
    assert "pay: half-open" in page and "close-breaker" not in page
