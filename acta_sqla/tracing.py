"""OpenTelemetry traces: the trace context captured at enqueue, one span per attempt.

Enqueue (``handler.job(...)``, ``Job(...)``, ``handler.jobs([...])``) stores the W3C trace
context current at that moment in ``job.trace_context``, when there is one (a valid
current span: an SDK is configured and a span is active); otherwise nothing is stored and
nothing is done beyond one check. A worker whose process has an SDK tracer provider runs
each attempt in a span ``acta.job <kind>`` (kind CONSUMER) whose PARENT is that context, so
a request's trace shows the jobs it caused, and the handler's own spans nest under the
attempt's. Without an SDK the worker never builds a span (checked once at start).

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

_FAILED = {
    Outcome.ERROR,
    Outcome.TIMEOUT,
    Outcome.FAIL_NOW,
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


def current_context() -> str | None:
    """The current trace context as stored in ``job.trace_context`` (JSON of the W3C
    headers), or None when no span is active (always, without an SDK)."""
    if not api_in_use("trace"):
        return None
    from opentelemetry import trace
    from opentelemetry.propagate import inject

    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    inject(carrier)
    return json.dumps(carrier, separators=(",", ":")) if carrier else None


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
    attributes: dict[str, Any] = {
        "acta.job.id": job.id,
        "acta.job.kind": job.kind,
        "acta.job.attempt": job.attempts,
        "acta.namespace": namespace,
        "messaging.system": "acta",
        "messaging.operation": "process",
    }
    with tracer.start_as_current_span(
        f"acta.job {job.kind}",
        context=parent if parent is not None else otel_context.Context(),
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
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
