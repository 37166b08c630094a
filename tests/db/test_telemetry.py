"""OpenTelemetry traces and metrics with the SDK's in-memory exporter and reader: the trace
context captured at enqueue, the attempt's span as its child, the per-job histograms, the
waits counter, and the queue-depth gauge fed by one heartbeat per interval."""

from __future__ import annotations

import json
import subprocess
import sys

import asyncpg
from opentelemetry import trace
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from acta_sqla import Acta, Context, Job, WaitForSignal
from acta_sqla.store import WorkerStore
from acta_sqla.testing import drain
from tests.db.conftest import new_store
from tests.telemetry import points, spans

app = Acta(namespace="traced")
tracer = trace.get_tracer("tests")


@app.job(max_attempts=1)
async def work(ctx: Context, n: int, fail: bool = False) -> int:
    with tracer.start_as_current_span("inside the handler"):
        if fail:
            raise ValueError(f"job {n} failed")
    return n


@app.job()
async def parks(ctx: Context) -> object:
    return None if ctx.resumed else WaitForSignal("go", timeout=3600)


def job_spans(kind: str) -> list[object]:
    return [s for s in spans.get_finished_spans() if s.name == f"acta.job {kind}"]


async def test_a_job_enqueued_in_a_span_runs_in_its_child_span(
    db: str, async_session: AsyncSession
) -> None:
    spans.clear()
    with tracer.start_as_current_span("POST /signup") as request:
        ok = work.job(n=1)
        bad = work.job(n=2, fail=True)
        async_session.add_all([ok, bad])
        await async_session.commit()
    untraced = work.job(n=3)  # outside any span: nothing captured
    async_session.add(untraced)
    await async_session.commit()
    stored = dict((await async_session.execute(select(Job.id, Job.trace_context))).all())
    assert stored[untraced.id] is None
    carrier = json.loads(stored[ok.id])
    trace_id = format(request.get_span_context().trace_id, "032x")
    assert carrier["traceparent"].split("-")[1] == trace_id

    await drain(app, database_url=db)
    by_job = {s.attributes["acta.job.id"]: s for s in job_spans("work")}  # type: ignore[attr-defined]
    good, failed, root = by_job[ok.id], by_job[bad.id], by_job[untraced.id]
    request_ctx = request.get_span_context()
    for span in (good, failed):
        assert span.context.trace_id == request_ctx.trace_id  # type: ignore[attr-defined]
        assert span.parent.span_id == request_ctx.span_id  # type: ignore[attr-defined]
        assert span.kind is trace.SpanKind.CONSUMER  # type: ignore[attr-defined]
    assert root.parent is None  # type: ignore[attr-defined]
    assert dict(good.attributes) == {  # type: ignore[attr-defined]
        "acta.job.id": ok.id,
        "acta.job.kind": "work",
        "acta.job.attempt": 1,
        "acta.namespace": "traced",
        "messaging.system": "acta",
        "messaging.operation": "process",
        "acta.job.outcome": "succeeded",
        "acta.job.status": "succeeded",
    }
    assert good.status.status_code is trace.StatusCode.UNSET  # type: ignore[attr-defined]
    assert failed.status.status_code is trace.StatusCode.ERROR  # type: ignore[attr-defined]
    assert failed.attributes["error.type"] == "ValueError"  # type: ignore[attr-defined]
    assert "job 2 failed" in failed.status.description  # type: ignore[attr-defined]
    # The handler's own span nests under the attempt's.
    inner = [s for s in spans.get_finished_spans() if s.name == "inside the handler"]
    assert {s.parent.span_id for s in inner} == {  # type: ignore[union-attr]
        s.context.span_id  # type: ignore[attr-defined]
        for s in (good, failed, root)
    }


async def test_enqueue_many_captures_the_context_for_every_job(
    db: str, async_session: AsyncSession
) -> None:
    with tracer.start_as_current_span("batch"):
        await app.enqueue_many(async_session, work.jobs([{"n": i} for i in range(3)]))
        await app.enqueue_many(async_session, [work.job(n=9)])
        await async_session.commit()
    contexts = (await async_session.execute(select(Job.trace_context))).scalars().all()
    assert len(contexts) == 4 and all(c and "traceparent" in c for c in contexts)


async def test_per_job_histograms_and_the_waits_counter(
    db: str, async_session: AsyncSession
) -> None:
    async_session.add_all([work.job(n=5), parks.job()])
    await async_session.commit()
    await drain(app, database_url=db)
    durations = [
        p
        for p in points("acta.job.duration")
        if p.attributes == {"namespace": "traced", "kind": "work", "outcome": "succeeded"}  # type: ignore[attr-defined]
    ]
    assert durations and sum(p.count for p in durations) >= 1  # type: ignore[attr-defined]
    waits = [p for p in points("acta.job.queue_wait") if p.attributes["kind"] == "work"]  # type: ignore[attr-defined]
    assert waits and min(p.min for p in waits) >= 0.0  # type: ignore[attr-defined]
    parked = [
        p.value  # type: ignore[attr-defined]
        for p in points("acta.waits")
        if p.attributes == {"reason": "signal", "namespace": "traced"}  # type: ignore[attr-defined]
    ]
    assert parked and parked[0] >= 1


async def test_the_depth_is_measured_once_per_beat_interval_per_namespace(
    db: str, conn: asyncpg.Connection, store: WorkerStore
) -> None:
    await conn.execute("INSERT INTO acta.job (kind) VALUES ('a'), ('a'), ('b')")
    first, second = await new_store(db), await new_store(db)
    first.measure_depth = second.measure_depth = True
    measured = (await first.heartbeat([])).depth
    assert sorted(measured or []) == [("a", "ready", 2), ("b", "ready", 1)]
    # The other worker's beat within the interval does not measure again.
    assert (await second.heartbeat([])).depth is None
    # A worker without a metrics SDK never takes the turn.
    await conn.execute("UPDATE acta.namespace SET depth_due_at = '-infinity'")
    store.measure_depth = False
    assert (await store.heartbeat([])).depth is None
    await first.close()
    await second.close()

    from acta_sqla import metrics

    metrics.record_depth("default", measured or [], 45.0)
    gauge = {
        (p.attributes["kind"], p.attributes["status"]): p.value  # type: ignore[attr-defined]
        for p in points("acta.queue.depth")
        if p.attributes["namespace"] == "default"  # type: ignore[attr-defined]
    }
    assert gauge == {("a", "ready"): 2, ("b", "ready"): 1}


def test_without_an_sdk_nothing_is_captured_and_no_span_is_built() -> None:
    code = (
        "from opentelemetry import trace\n"
        "from acta_sqla import Acta, tracing, metrics\n"
        "app = Acta()\n"
        "@app.job()\n"
        "async def h(ctx) -> None: ...\n"
        "with trace.get_tracer('t').start_as_current_span('s'):\n"
        "    job = h.job()\n"
        "print(job.trace_context, tracing.worker_tracer(), metrics.sdk_configured())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["None", "None", "False"]
