"""OpenTelemetry traces on the messaging semantic conventions: a producer span at enqueue,
one consumer span per attempt.

Enqueue (``handler.job(...)``, ``Job(...)``) opens and closes a PRODUCER span
``create <kind>`` when a span is current (an SDK is configured and a span is active), and
stores ITS W3C trace context in ``job.trace_context`` (the message's creation context);
``acta.enqueue_many`` of a ``handler.jobs([...])`` batch makes one ``send <kind>`` span for
the batch instead. With no current span nothing is stored and nothing is done beyond one
check. A worker whose process has an SDK tracer provider runs each attempt in a CONSUMER
span ``process <kind>`` whose PARENT is that creation context (and which links to it, as
the conventions ask), so a request's trace shows the jobs it caused, and the handler's own
spans nest under the attempt's. Without an SDK the worker never builds a span (checked
once at start).

The destination (``messaging.destination.name``, and the span names) is the job's kind:
it is what routes a job to its handler, and is known wherever a job is built (a bare
``Job(...)`` gets its namespace only when enqueued). The namespace, the other half of the
address, is ``acta.namespace`` and ``messaging.consumer.group.name`` (the workers of a
namespace are one group of competing consumers). docs/observability.md has the table.

Only ``opentelemetry-api`` is needed at run time, and it is imported only once the process
has imported it itself (or names a provider in ``OTEL_PYTHON_TRACER_PROVIDER``): without
that, no span can be current and no SDK can be configured, so the answer is known without
the ~50 ms import that every enqueueing process and every worker start would pay.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .values import ClaimedJob, Completion, Outcome

if TYPE_CHECKING:
    from opentelemetry import trace

TRACER_NAME = "acta_sqla"
SYSTEM = "acta"
"""``messaging.system``: not one of the convention's well-known values, which name brokers;
the conventions allow a system's own name."""

_FAILED = {
    Outcome.FAILED,
    Outcome.TIMEOUT,
    Outcome.FAIL,
    Outcome.LEASE_LOST,
    Outcome.LOCK_LOST,
    Outcome.LOST,
}


def api_in_use(signal: str = "trace") -> bool:
    """Whether this process may have an OpenTelemetry ``signal`` ("trace" or "metrics")
    SDK or a current span: it has imported the API's module for it (an SDK, an
    instrumentation or ``opentelemetry-instrument`` imports it before any span or provider
    can exist), or its environment names a provider for the API to load. False means
    certainly none, and nothing of OpenTelemetry has been imported to find out."""
    env = "OTEL_PYTHON_TRACER_PROVIDER" if signal == "trace" else "OTEL_PYTHON_METER_PROVIDER"
    return f"opentelemetry.{signal}" in sys.modules or bool(os.environ.get(env))


def current_context(
    kind: str | None = None, namespace: str | None = None, batch: int | None = None
) -> str | None:
    """The trace context to store in ``job.trace_context`` (JSON of the W3C headers), or
    None when no span is active (always, without an SDK).

    With a ``kind``, the context is that of a PRODUCER span made for the enqueue, a child of
    the current span: ``create <kind>`` for one job, ``send <kind>`` for a ``batch`` of
    that many (one span, one context for all of them)."""
    if not api_in_use("trace"):
        return None
    from opentelemetry import trace
    from opentelemetry.propagate import inject

    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    if kind is None:
        inject(carrier)
    else:
        operation = "create" if batch is None else "send"
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": operation,
            "messaging.operation.name": operation,
            "messaging.destination.name": kind,
            "acta.job.kind": kind,
        }
        if namespace is not None:
            attributes["acta.namespace"] = namespace
        if batch is not None:
            attributes["messaging.batch.message_count"] = batch
        tracer = trace.get_tracer(TRACER_NAME)
        with tracer.start_as_current_span(
            f"{operation} {kind}", kind=trace.SpanKind.PRODUCER, attributes=attributes
        ):
            inject(carrier)
    return json.dumps(carrier, separators=(",", ":")) if carrier else None


def trace_id(stored: str | None) -> str | None:
    """The trace id (32 hex digits) of a stored trace context, read from its
    ``traceparent`` without OpenTelemetry; None if there is none or it does not parse."""
    if not stored:
        return None
    try:
        parent = json.loads(stored).get("traceparent", "")
    except (ValueError, AttributeError):
        return None
    parts = parent.split("-") if isinstance(parent, str) else []
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None


def sdk_configured() -> bool:
    """True when the process has a real tracer provider (an SDK), not the API's default."""
    if not api_in_use("trace"):
        return False
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def worker_tracer() -> trace.Tracer | None:
    """The tracer a worker uses, or None (no SDK: no span work at all)."""
    if not sdk_configured():
        return None
    from opentelemetry import trace

    return trace.get_tracer(TRACER_NAME)


@contextmanager
def job_span(tracer: trace.Tracer, job: ClaimedJob, namespace: str) -> Iterator[trace.Span]:
    """The attempt's span, current for the block; its parent is the enqueue's context."""
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.propagate import extract

    parent = extract(json.loads(job.trace_context)) if job.trace_context else None
    links = []
    if parent is not None:
        created = trace.get_current_span(parent).get_span_context()
        if created.is_valid:
            links.append(trace.Link(created))
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": job.kind,
        "messaging.message.id": str(job.id),
        "messaging.consumer.group.name": namespace,
        "acta.job.id": job.id,
        "acta.job.kind": job.kind,
        "acta.job.attempt": job.attempts,
        "acta.namespace": namespace,
    }
    with tracer.start_as_current_span(
        f"process {job.kind}",
        context=parent if parent is not None else otel_context.Context(),
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def end_job_span(span: trace.Span, completion: Completion) -> None:
    """Say how the attempt ended: ``acta.job.outcome`` and, for a failure, an error status
    with the error's type and message."""
    from opentelemetry import trace

    span.set_attribute("acta.job.outcome", completion.outcome.value)
    span.set_attribute("acta.job.status", completion.status.value)
    if completion.outcome in _FAILED and completion.error_type:
        span.set_attribute("error.type", completion.error_type)
        span.set_status(
            trace.Status(
                trace.StatusCode.ERROR,
                f"{completion.error_type}: {completion.error_message or ''}"[:1000],
            )
        )
