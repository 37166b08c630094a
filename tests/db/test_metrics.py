"""The worker's own instruments, read through the OpenTelemetry SDK's in-memory reader
(tests/telemetry.py), each moved by a real event in an in-process worker against real
PostgreSQL: the claim and completion round trips of a drain, keyed jobs bounced at
admission (a full concurrency slot, a used-up rate), a completion fenced out because
recovery took its row, and a handler that blocks the event loop (the stall, how long it
lasted, and the lifeline's renewals meanwhile).

The reader's sums are cumulative for the whole session, so each test reads what it
changed, in this module's own namespace."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest
from opentelemetry.sdk.metrics.export import HistogramDataPoint, NumberDataPoint
from sqlalchemy.ext.asyncio import AsyncSession

from acta_sqla import Acta, Context
from acta_sqla.settings import load_settings
from acta_sqla.testing import DrainResult, drain
from acta_sqla.worker.recovery import run_recovery
from tests.db.conftest import new_store
from tests.telemetry import points, unit
from tests.waiting import until

NAMESPACE = "metered"
app = Acta(namespace=NAMESPACE)

started = asyncio.Event()
"""Set by a gated handler once it runs."""
release = asyncio.Event()
"""What a gated handler waits for before it returns."""


@pytest.fixture(autouse=True)
def _gates() -> None:
    started.clear()
    release.clear()


# ------------------------------------------------------------------------------ readings


NAMES = {"namespace": "acta.namespace", "reason": "acta.admission.reason"}
"""The attributes' names (``acta.*``) from the keyword arguments of the readings below."""


def counted(name: str, **attributes: str) -> float:
    """The counter's cumulative value for exactly these attributes (0 before any add)."""
    attributes = {NAMES[k]: v for k, v in attributes.items()}
    return sum(
        p.value
        for p in points(name)
        if isinstance(p, NumberDataPoint) and dict(p.attributes or {}) == attributes
    )


def histogram(name: str, **attributes: str) -> tuple[int, float, float]:
    """The histogram's cumulative (count, sum, max) for exactly these attributes."""
    attributes = {NAMES[k]: v for k, v in attributes.items()}
    found = [
        p
        for p in points(name)
        if isinstance(p, HistogramDataPoint) and dict(p.attributes or {}) == attributes
    ]
    return (
        sum(p.count for p in found),
        sum(p.sum for p in found),
        max((p.max for p in found), default=0.0),
    )


# ------------------------------------------------------------------------------ the app


@app.job()
async def quick(ctx: Context, n: int = 0) -> int:
    return n


@app.job()
async def gated(ctx: Context) -> None:
    started.set()
    await release.wait()


@app.job(concurrency_key="{key}", concurrency_limit=1)
async def one_at_a_time(ctx: Context, key: str) -> None:
    started.set()
    await release.wait()


@app.job(rate="1/5s")
async def hourly(ctx: Context) -> None:
    return None


@app.job()
async def blocks_loop(ctx: Context, renewals_before: float) -> None:
    """Blocks the worker's event loop (``time.sleep`` in an async handler: the fault under
    test) until the lifeline thread has renewed the lease, so past the stall threshold."""
    deadline = time.monotonic() + 20
    while counted("acta.lifeline.renewals", namespace=NAMESPACE) <= renewals_before:
        if time.monotonic() > deadline:
            raise AssertionError("the lifeline renewed nothing while the loop was blocked")
        time.sleep(0.02)  # noqa: ASYNC251 -- the fault under test


@pytest.fixture
async def drained_in_background(db: str) -> AsyncIterator[list[asyncio.Task[DrainResult]]]:
    """Drains started by the test as tasks; any still running at the end is released and
    awaited, so that a failed test leaves no worker behind."""
    tasks: list[asyncio.Task[DrainResult]] = []
    yield tasks
    release.set()
    for task in tasks:
        await asyncio.wait_for(task, 30)


# ------------------------------------------------------------------------------ tests


async def test_a_drain_records_its_claim_and_completion_round_trips(
    db: str, async_session: AsyncSession
) -> None:
    claims = counted("acta.claims", namespace=NAMESPACE)
    claim_count, claim_sum, _ = histogram("acta.claim.duration", namespace=NAMESPACE)
    write_count, write_sum, _ = histogram("acta.completion.duration", namespace=NAMESPACE)
    await app.enqueue_many(async_session, [quick.job(n=n) for n in range(5)])
    await async_session.commit()

    result = await drain(app, database_url=db)

    assert not result.crashed and result.claimed == 5 and result.batches >= 1
    # One point per claim that took rows (an idle claim finds nothing and records nothing).
    count, total, longest = histogram("acta.claim.duration", namespace=NAMESPACE)
    assert 1 <= count - claim_count <= result.claimed
    assert counted("acta.claims", namespace=NAMESPACE) - claims == result.claimed
    assert total - claim_sum > 0 and longest < 30  # seconds of a local round trip
    # One point per batch written.
    count, total, longest = histogram("acta.completion.duration", namespace=NAMESPACE)
    assert count - write_count == result.batches
    assert total - write_sum > 0 and longest < 30
    assert unit("acta.claim.duration") == unit("acta.completion.duration") == "s"


async def test_keyed_jobs_refused_at_admission_count_as_bounces_by_reason(
    db: str,
    conn: asyncpg.Connection,
    async_session: AsyncSession,
    drained_in_background: list[asyncio.Task[DrainResult]],
) -> None:
    slot = counted("acta.admission.bounces", reason="slot", namespace=NAMESPACE)
    rate = counted("acta.admission.bounces", reason="rate", namespace=NAMESPACE)
    # Two jobs of one key with one slot, two of a kind allowed once in 5 s
    # (a burst waits for bounced jobs, so the window is short).
    await app.enqueue_many(
        async_session,
        [one_at_a_time.job(key="k"), one_at_a_time.job(key="k"), hourly.job(), hourly.job()],
    )
    await async_session.commit()

    drained_in_background.append(asyncio.create_task(drain(app, database_url=db)))
    # The first keyed job holds the slot until released: the other one bounces meanwhile.
    await until(
        lambda: counted("acta.admission.bounces", reason="slot", namespace=NAMESPACE) > slot,
        20,
        "a keyed job to bounce off the full slot",
    )
    await until(
        lambda: counted("acta.admission.bounces", reason="rate", namespace=NAMESPACE) > rate,
        20,
        "a job to bounce off the used-up rate",
    )

    # Each bounced job is ready again later, its attempt given back (uncharged): the keyed
    # one 2 s on, the rated one when the meter allows (5 s).
    async def both_bounced() -> bool:
        rows = await conn.fetch(
            "SELECT kind, attempts FROM acta.job WHERE status = 'ready' AND run_at > now()"
        )
        return sorted(tuple(r) for r in rows) == [("hourly", 0), ("one_at_a_time", 0)]

    await until(both_bounced, 20, "the bounces to be written")
    release.set()
    result = await asyncio.wait_for(drained_in_background[0], 30)

    assert not result.crashed
    assert counted("acta.admission.bounces", reason="slot", namespace=NAMESPACE) - slot == 1
    assert counted("acta.admission.bounces", reason="rate", namespace=NAMESPACE) - rate == 1
    assert unit("acta.admission.bounces") == "{job}"


async def test_a_completion_fenced_out_after_recovery_took_its_row_counts_as_lease_lost(
    db: str,
    conn: asyncpg.Connection,
    async_session: AsyncSession,
    drained_in_background: list[asyncio.Task[DrainResult]],
) -> None:
    lost = counted("acta.lease.lost", namespace=NAMESPACE)
    job = gated.job()
    async_session.add(job)
    await async_session.commit()
    drained_in_background.append(asyncio.create_task(drain(app, database_url=db)))
    await until(started.is_set, 20, "the handler to start")

    # While the handler runs, its lease runs out and another worker's recovery pass takes
    # the row back. Backdated, not waited for: the lease, and the beat that would have
    # marked the attempt started (a started attempt's loss is charged and the row is due
    # again at once, not held back as a suspect).
    await conn.execute(
        "UPDATE acta.job SET started_at = now(), lease_expires_at = now() - interval '1 second' "
        "WHERE id = $1",
        job.id,
    )
    other = await new_store(db, NAMESPACE)
    try:
        assert (await run_recovery(other)).recovered == 1
    finally:
        await other.close()
    assert counted("acta.lease.lost", namespace=NAMESPACE) == lost
    release.set()  # the stale attempt returns: its completion matches nothing
    result = await asyncio.wait_for(drained_in_background[0], 30)

    assert not result.crashed
    assert counted("acta.lease.lost", namespace=NAMESPACE) - lost == 1
    assert unit("acta.lease.lost") == "{completion}"
    # The row came back ready and the same drain ran it again, to success: the stale
    # attempt's write changed nothing.
    outcomes = await conn.fetch(
        "SELECT outcome FROM acta.attempt WHERE job_id = $1 ORDER BY id", job.id
    )
    assert [r["outcome"] for r in outcomes] == ["lost", "succeeded"]
    row = await conn.fetchrow("SELECT status, attempts FROM acta.job WHERE id = $1", job.id)
    assert tuple(row) == ("succeeded", 2)


async def test_a_handler_blocking_the_loop_counts_a_stall_and_the_lifelines_renewals(
    db: str, conn: asyncpg.Connection, async_session: AsyncSession
) -> None:
    # Heartbeat 1 s: the loop's ticker runs every 0.25 s and a loop silent for 0.5 s past
    # its tick is stalled (lease 4 s, attempt deadline 2.5 s).
    settings = load_settings(database_url=db, namespace=NAMESPACE, heartbeat_interval=1.0)
    stalls = counted("acta.loop.stalls", namespace=NAMESPACE)
    stall_count, stall_sum, _ = histogram("acta.loop.stall.duration", namespace=NAMESPACE)
    renewals = counted("acta.lifeline.renewals", namespace=NAMESPACE)
    job = blocks_loop.job(renewals_before=renewals)
    async_session.add(job)
    await async_session.commit()

    result = await drain(app, settings=settings)

    assert not result.crashed
    row = await conn.fetchrow("SELECT status, attempts FROM acta.job WHERE id = $1", job.id)
    assert tuple(row) == ("succeeded", 1)  # the lease was kept through the block
    # One stall, counted by the lifeline thread while the loop was blocked; its length
    # recorded once the loop came back (at least the threshold, well under the deadline).
    assert counted("acta.loop.stalls", namespace=NAMESPACE) - stalls == 1
    count, total, longest = histogram("acta.loop.stall.duration", namespace=NAMESPACE)
    assert count - stall_count == 1
    assert 0.5 <= total - stall_sum < 20 and longest < 20
    # The lifeline renewed the one held row (counted in rows) while the loop was blocked.
    assert counted("acta.lifeline.renewals", namespace=NAMESPACE) - renewals >= 1
    assert unit("acta.loop.stall.duration") == "s"
    assert unit("acta.loop.stalls") == "{stall}"
    assert unit("acta.lifeline.renewals") == "{lease}"
