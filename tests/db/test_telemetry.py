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
from tests.telemetry import points, spans, unit

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


def job_spans(kind: str, operation: str = "process") -> list[object]:
    return [s for s in spans.get_finished_spans() if s.name == f"{operation} {kind}"]


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
    # Each enqueue made a PRODUCER span, child of the request: the stored context is its.
    created = {format(s.context.span_id, "016x"): s for s in job_spans("work", "create")}  # type: ignore[attr-defined]
    assert len(created) == 2
    create = created[carrier["traceparent"].split("-")[2]]
    assert create.kind is trace.SpanKind.PRODUCER  # type: ignore[attr-defined]
    assert create.parent.span_id == request.get_span_context().span_id  # type: ignore[attr-defined]
    assert dict(create.attributes) == {  # type: ignore[attr-defined]
        "messaging.system": "acta",
        "messaging.operation.type": "create",
        "messaging.operation.name": "create",
        "messaging.destination.name": "work",
        "acta.job.kind": "work",
        "acta.namespace": "traced",
    }

    await drain(app, database_url=db)
    by_job = {s.attributes["acta.job.id"]: s for s in job_spans("work")}  # type: ignore[attr-defined]
    good, failed, root = by_job[ok.id], by_job[bad.id], by_job[untraced.id]
    request_ctx = request.get_span_context()
    for span in (good, failed):
        assert span.context.trace_id == request_ctx.trace_id  # type: ignore[attr-defined]
        # The parent is the enqueue's PRODUCER span (the creation context), linked too.
        assert span.parent.span_id in {c.context.span_id for c in created.values()}  # type: ignore[attr-defined]
        assert [link.context.span_id for link in span.links] == [span.parent.span_id]  # type: ignore[attr-defined]
        assert span.kind is trace.SpanKind.CONSUMER  # type: ignore[attr-defined]
    assert good.parent.span_id == create.context.span_id  # type: ignore[attr-defined]
    assert root.parent is None and not root.links  # type: ignore[attr-defined]
    assert dict(good.attributes) == {  # type: ignore[attr-defined]
        "messaging.system": "acta",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "work",
        "messaging.message.id": str(ok.id),
        "messaging.consumer.group.name": "traced",
        "acta.job.id": ok.id,
        "acta.job.kind": "work",
        "acta.job.attempt": 1,
        "acta.namespace": "traced",
        "acta.job.outcome": "succeeded",
        "acta.job.status": "succeeded",
    }
    assert "messaging.operation" not in failed.attributes  # type: ignore[attr-defined]
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
    spans.clear()
    with tracer.start_as_current_span("batch"):
        await app.enqueue_many(async_session, work.jobs([{"n": i} for i in range(3)]))
        await app.enqueue_many(async_session, [work.job(n=9)])
        await async_session.commit()
    contexts = (await async_session.execute(select(Job.trace_context))).scalars().all()
    assert len(contexts) == 4 and all(c and "traceparent" in c for c in contexts)
    # One "send" span for the batch of three (its context for each), one "create" for the Job.
    [send] = job_spans("work", "send")
    assert send.kind is trace.SpanKind.PRODUCER  # type: ignore[attr-defined]
    assert send.attributes["messaging.batch.message_count"] == 3  # type: ignore[attr-defined]
    assert send.attributes["messaging.operation.type"] == "send"  # type: ignore[attr-defined]
    send_id = format(send.context.span_id, "016x")  # type: ignore[attr-defined]
    assert sum(json.loads(c)["traceparent"].split("-")[2] == send_id for c in contexts) == 3
    assert len(job_spans("work", "create")) == 1


async def test_per_job_histograms_and_the_waits_counter(
    db: str, async_session: AsyncSession
) -> None:
    async_session.add_all([work.job(n=5), parks.job()])
    await async_session.commit()
    await drain(app, database_url=db)
    durations = [
        p
        for p in points("acta.job.duration")
        if p.attributes  # type: ignore[attr-defined]
        == {"acta.namespace": "traced", "acta.job.kind": "work", "acta.job.outcome": "succeeded"}
    ]
    assert durations and sum(p.count for p in durations) >= 1  # type: ignore[attr-defined]
    waits = [p for p in points("acta.job.queue_wait") if p.attributes["acta.job.kind"] == "work"]  # type: ignore[attr-defined]
    assert waits and min(p.min for p in waits) >= 0.0  # type: ignore[attr-defined]
    parked = [
        p.value  # type: ignore[attr-defined]
        for p in points("acta.waits")
        if p.attributes == {"acta.wait.reason": "signal", "acta.namespace": "traced"}  # type: ignore[attr-defined]
    ]
    assert parked and parked[0] >= 1
    # The messaging conventions' consumer metrics, per attempt.
    messaging = {
        "messaging.system": "acta",
        "messaging.operation.name": "process",
        "messaging.destination.name": "work",
        "messaging.consumer.group.name": "traced",
    }
    processed = [p for p in points("messaging.process.duration") if p.attributes == messaging]  # type: ignore[attr-defined]
    assert processed and sum(p.count for p in processed) >= 1  # type: ignore[attr-defined]
    consumed = [
        p.value  # type: ignore[attr-defined]
        for p in points("messaging.client.consumed.messages")
        if p.attributes == messaging  # type: ignore[attr-defined]
    ]
    assert consumed and consumed[0] >= 1
    assert unit("messaging.process.duration") == "s"
    assert unit("messaging.client.consumed.messages") == "{message}"
    assert unit("acta.job.duration") == "s"


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
        (p.attributes["acta.job.kind"], p.attributes["acta.job.status"]): p.value  # type: ignore[attr-defined]
        for p in points("acta.queue.depth")
        if p.attributes["acta.namespace"] == "default"  # type: ignore[attr-defined]
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


def test_the_documented_table_is_the_instruments() -> None:
    """docs/observability.md's metrics table names every instrument of the code, with its
    unit and attributes; those the tests have recorded report that unit to the SDK."""
    from acta_sqla.metrics import INSTRUMENTS
    from tests.harness import REPO_ROOT

    doc = (REPO_ROOT / "docs" / "observability.md").read_text()
    table = doc[doc.index("| name | instrument | unit | attributes | what |") :]
    documented = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("| `"):
            break
        name, instrument, unit_, attributes, _what = (c.strip() for c in line.strip("|").split("|"))
        documented[name.strip("`")] = (
            instrument,
            unit_,
            {a.strip() for a in attributes.split(",")},
        )
    assert documented == {
        name: (kind, unit_, set(attributes))
        for name, (kind, unit_, attributes) in INSTRUMENTS.items()
    }
    for name, (_kind, unit_, _attrs) in INSTRUMENTS.items():
        assert unit(name) in (None, unit_), name  # None: not recorded in this session
