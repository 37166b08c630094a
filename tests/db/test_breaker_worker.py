"""A breaker in an in-process worker against real PostgreSQL: the gauge
``acta.breaker.state`` (read through the SDK's in-memory reader, tests/telemetry.py), the
bounce counted with reason ``breaker``, and exactly one log line per transition."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

import asyncpg
import pytest
from loguru import logger
from opentelemetry.sdk.metrics.export import NumberDataPoint
from sqlalchemy.ext.asyncio import AsyncSession

from acta_sqla import Acta, Breaker, Context
from acta_sqla.testing import drain
from tests.telemetry import points
from tests.waiting import until

NAMESPACE = "brk"
app = Acta(namespace=NAMESPACE)
dependency = {"down": True}


@app.job(
    breaker=Breaker(failure_rate=0.5, min_calls=3, window=60, open_for=1, probes=1),
    max_attempts=30,
    backoff_base=0,
    backoff_max=0,  # retried at once: a burst drain stops at a retry's back-off
)
async def call(ctx: Context, n: int = 0) -> None:
    if dependency["down"]:
        raise ConnectionError("down")


def gauge() -> dict[str, float]:
    """The gauge's last value per key, for this module's kind."""
    return {
        str((p.attributes or {}).get("acta.breaker.key")): p.value
        for p in points("acta.breaker.state")
        if isinstance(p, NumberDataPoint) and (p.attributes or {}).get("acta.job.kind") == "call"
    }


def bounces() -> float:
    return sum(
        p.value
        for p in points("acta.admission.bounces")
        if isinstance(p, NumberDataPoint)
        and dict(p.attributes or {})
        == {"acta.admission.reason": "breaker", "acta.namespace": NAMESPACE}
    )


@pytest.fixture
def transitions() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(
        lambda m: lines.append(m.record["extra"]["state"]),
        level="DEBUG",
        filter=lambda r: r["extra"].get("event") == "breaker",
    )
    logger.enable("acta_sqla")
    yield lines
    logger.remove(sink)


async def test_the_gauge_bounces_and_one_log_line_per_transition(
    db: str, conn: asyncpg.Connection, async_session: AsyncSession, transitions: list[str]
) -> None:
    dependency["down"] = True
    before = bounces()
    await app.enqueue_many(async_session, [call.job(n=i) for i in range(6)])
    await async_session.commit()
    drained = asyncio.create_task(drain(app, database_url=db, executors=2))
    try:
        await until(
            lambda: gauge().get("") == 2, 30, "the worker to see its breaker open (gauge 2)"
        )
        await until(lambda: bounces() > before, 30, "a job to bounce off the open breaker")
        dependency["down"] = False
        result = await asyncio.wait_for(drained, 60)
    finally:
        dependency["down"] = False
    assert not result.crashed
    assert await conn.fetchval("SELECT count(*) FROM acta.job WHERE status = 'succeeded'") == 6
    assert gauge() == {"": 0}
    # One line per transition, in order; it may have probed and reopened in between.
    assert transitions[0] == "open" and transitions[-1] == "closed", transitions
    for a, b in itertools.pairwise(transitions):
        assert (a, b) in {("open", "half_open"), ("half_open", "open"), ("half_open", "closed")}
