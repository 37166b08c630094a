"""acta's metrics, through the OpenTelemetry API (no-ops without an SDK).

Two follow the messaging semantic conventions (``messaging.process.duration``,
``messaging.client.consumed.messages``, with the ``messaging.*`` attributes of
tracing.py's spans); the rest are acta's own, named ``acta.*``, and every attribute of
theirs is too (``acta.namespace``, ``acta.job.kind``, ...). docs/observability.md has the
table of every instrument, its unit and its attributes; ``INSTRUMENTS`` below is the same
list, and tests/db/test_metrics.py checks them against each other.

Per-job work stays off the metric path: the in-flight gauge is read from the registry when
a collector asks, and outcome counts are added once per batch. The two per-job histograms
are recorded only when the process has a metrics SDK (checked once per worker), so a
worker without one pays nothing for them. The queue depth is ONE query per heartbeat
interval per namespace (not per worker): the heartbeat of a worker with a metrics SDK that
finds the namespace's ``depth_due_at`` past takes the turn and answers the depth with its
beat; that worker's gauge reports it (ready, executing and waiting jobs by kind) until a
newer one comes. A gauge reading stays current for two beats: a collector gets the depth
from whichever worker measured last (sum nothing across workers: take the latest, or max,
per namespace, kind and status).

``acta.breaker.state`` is each circuit breaker's state as this worker last saw it (0
closed, 1 half-open, 2 open; docs/breakers.md): from its admission answers and the
transitions its own outcomes made. Take the max per namespace, kind and key.

Nothing of OpenTelemetry is imported until the process has imported its metrics API itself
(an SDK, an instrumentation or ``opentelemetry-instrument`` does, before any provider can be
set) or names a provider in ``OTEL_PYTHON_METER_PROVIDER``: until then every ``record_*``
is one check, and a worker starts without the API's import.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .tracing import _FAILED as FAILED
from .tracing import SYSTEM, api_in_use
from .values import ClaimedJob, Completion, Outcome

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter, Observation

    from .worker.inflight import Registry

PROCESS_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10]
"""The buckets the conventions advise for messaging durations."""

NS = "acta.namespace"
KIND = "acta.job.kind"
OUTCOME = "acta.job.outcome"
_MESSAGING = (
    "messaging.system",
    "messaging.operation.name",
    "messaging.destination.name",
    "messaging.consumer.group.name",
)

INSTRUMENTS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "messaging.process.duration": ("histogram", "s", (*_MESSAGING, "error.type")),
    "messaging.client.consumed.messages": ("counter", "{message}", _MESSAGING),
    "acta.queue.depth": ("observable gauge", "{job}", (NS, KIND, "acta.job.status")),
    "acta.jobs.inflight": ("observable gauge", "{job}", (NS, "acta.claim.state")),
    "acta.claims": ("counter", "{job}", (NS,)),
    "acta.claim.duration": ("histogram", "s", (NS,)),
    "acta.completions": ("counter", "{completion}", (NS, OUTCOME)),
    "acta.completions.batch": ("histogram", "{completion}", (NS,)),
    "acta.completion.duration": ("histogram", "s", (NS,)),
    "acta.job.duration": ("histogram", "s", (NS, KIND, OUTCOME)),
    "acta.job.queue_wait": ("histogram", "s", (NS, KIND, OUTCOME)),
    "acta.admission.bounces": ("counter", "{job}", (NS, "acta.admission.reason")),
    "acta.waits": ("counter", "{job}", (NS, "acta.wait.reason")),
    "acta.lease.lost": ("counter", "{completion}", (NS,)),
    "acta.loop.stalls": ("counter", "{stall}", (NS,)),
    "acta.loop.stall.duration": ("histogram", "s", (NS,)),
    "acta.lifeline.renewals": ("counter", "{lease}", (NS,)),
    "acta.breaker.state": ("observable gauge", "{state}", (NS, KIND, "acta.breaker.key")),
}
"""Every instrument: name -> (instrument, unit, attributes). ``error.type`` is set only
on a failed attempt's ``messaging.process.duration``."""

_registries: weakref.WeakKeyDictionary[Registry, str] = weakref.WeakKeyDictionary()

_depth: dict[str, tuple[float, list[tuple[str, str, int]]]] = {}
"""namespace -> (monotonic time measured, [(kind, status, count)]): this process's latest
measure of each namespace's depth."""
_depth_fresh: dict[str, float] = {}
DEPTH_FRESH_BEATS = 2

BREAKER_STATES = {"closed": 0, "half_open": 1, "open": 2}
_breakers: dict[tuple[str, str, str], int] = {}
"""(namespace, kind, key) -> the breaker's state as this process last saw it."""


def _observe_inflight(_options: Any) -> Iterable[Observation]:
    from opentelemetry.metrics import Observation

    for registry, namespace in list(_registries.items()):
        counts = registry.counts()
        for state in ("claimed", "executing", "finalizing"):
            yield Observation(
                counts.get(state, 0),  # type: ignore[call-overload]
                {"acta.claim.state": state, NS: namespace},
            )


def _observe_depth(_options: Any) -> Iterable[Observation]:
    from opentelemetry.metrics import Observation

    now = time.monotonic()
    for namespace, (at, rows) in list(_depth.items()):
        if now - at > _depth_fresh.get(namespace, 90.0):
            continue  # another worker measures it now
        for kind, status, count in rows:
            yield Observation(count, {NS: namespace, KIND: kind, "acta.job.status": status})


def _observe_breakers(_options: Any) -> Iterable[Observation]:
    from opentelemetry.metrics import Observation

    for (namespace, kind, key), state in list(_breakers.items()):
        yield Observation(state, {NS: namespace, KIND: kind, "acta.breaker.key": key})


class _Instruments:
    """acta's instruments, made from the API's meter (proxies that an SDK set later binds)."""

    def __init__(self, meter: Meter) -> None:
        meter.create_observable_gauge(
            "acta.jobs.inflight",
            unit="{job}",
            callbacks=[_observe_inflight],
            description="Claims held by workers, by registry state (claimed, executing, "
            "finalizing).",
        )
        self.completion_batch = meter.create_histogram(
            "acta.completions.batch",
            unit="{completion}",
            description="Completions written by one complete_executions call.",
        )
        self.claims = meter.create_counter("acta.claims", unit="{job}", description="Jobs claimed.")
        self.completions = meter.create_counter(
            "acta.completions", unit="{completion}", description="Completions, by outcome."
        )
        self.claim_duration = meter.create_histogram(
            "acta.claim.duration", unit="s", description="Round trip of one claim statement."
        )
        self.completion_duration = meter.create_histogram(
            "acta.completion.duration",
            unit="s",
            description="From a batch's first write try until it landed.",
        )
        self.lease_lost = meter.create_counter(
            "acta.lease.lost",
            unit="{completion}",
            description="Completions fenced out because the lease was lost.",
        )
        self.loop_stalls = meter.create_counter(
            "acta.loop.stalls",
            unit="{stall}",
            description="Times a worker's event loop was blocked past the stall threshold (a "
            "handler blocking it: time.sleep, CPU work or sync I/O inside an async def).",
        )
        self.loop_stall_duration = meter.create_histogram(
            "acta.loop.stall.duration",
            unit="s",
            description="How long a stalled event loop was blocked (recorded when it came back).",
        )
        self.lifeline_renewals = meter.create_counter(
            "acta.lifeline.renewals",
            unit="{lease}",
            description="Leases renewed from the lifeline thread while the event loop was blocked.",
        )
        self.admission_bounces = meter.create_counter(
            "acta.admission.bounces",
            unit="{job}",
            description="Keyed jobs refused at admission and due again later, by reason (slot: "
            "no free concurrency slot; rate: the rate meter said later). Uncharged.",
        )
        self.waits = meter.create_counter(
            "acta.waits",
            unit="{job}",
            description="Jobs parked waiting by their handler (WaitForSignal: reason signal; "
            "WaitForChildren: reason children). Uncharged.",
        )
        self.job_duration = meter.create_histogram(
            "acta.job.duration", unit="s", description="How long one attempt's handler ran."
        )
        self.queue_wait = meter.create_histogram(
            "acta.job.queue_wait",
            unit="s",
            description="From a job's due time (enqueue, retry or schedule) to the claim of the "
            "attempt.",
        )
        meter.create_observable_gauge(
            "acta.queue.depth",
            unit="{job}",
            callbacks=[_observe_depth],
            description="Jobs ready, executing and waiting, by kind (one measure per heartbeat "
            "interval per namespace, taken by one worker).",
        )
        # The messaging semantic conventions' consumer metrics (per attempt, like the spans).
        self.process_duration = meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="Duration of processing operation.",
            explicit_bucket_boundaries_advisory=PROCESS_BUCKETS,
        )
        self.consumed = meter.create_counter(
            "messaging.client.consumed.messages",
            unit="{message}",
            description="Number of messages that were delivered to the application.",
        )
        meter.create_observable_gauge(
            "acta.breaker.state",
            unit="{state}",
            callbacks=[_observe_breakers],
            description="Each circuit breaker's state as this worker last saw it: 0 closed, "
            "1 half-open, 2 open.",
        )


_made: _Instruments | None = None
_making = threading.Lock()  # the lifeline thread records too


def _instruments() -> _Instruments | None:
    """The instruments, made at the first record once the metrics API is in use; None
    before (nothing can read them: no SDK can exist yet)."""
    global _made
    if _made is None and api_in_use("metrics"):
        with _making:
            if _made is None:
                from opentelemetry import metrics

                _made = _Instruments(metrics.get_meter("acta_sqla"))
    return _made


def sdk_configured() -> bool:
    """True when the process has a real meter provider (an SDK), not the API's default.
    A worker asks once at start; with one, the instruments are made now."""
    if not api_in_use("metrics"):
        return False
    from opentelemetry import metrics

    provider = metrics.get_meter_provider()
    configured = type(provider).__name__ != "_ProxyMeterProvider" and not isinstance(
        provider, metrics.NoOpMeterProvider
    )
    if configured:
        _instruments()
    return configured


def record_depth(namespace: str, rows: list[tuple[str, str, int]], beat: float) -> None:
    """The namespace's depth as this worker's heartbeat measured it."""
    _instruments()
    _depth[namespace] = (time.monotonic(), rows)
    _depth_fresh[namespace] = DEPTH_FRESH_BEATS * beat


def record_job(namespace: str, job: ClaimedJob, completion: Completion) -> None:
    """One attempt's duration and queue wait (only called with a metrics SDK)."""
    if not completion.record or (i := _instruments()) is None:
        return  # a hand-back or a bounce: not an attempt
    attrs = {NS: namespace, KIND: job.kind, OUTCOME: completion.outcome.value}
    if completion.ran_seconds is not None:
        i.job_duration.record(completion.ran_seconds, attrs)
    if job.waited is not None:
        i.queue_wait.record(max(0.0, job.waited), attrs)
    messaging = {
        "messaging.system": SYSTEM,
        "messaging.operation.name": "process",
        "messaging.destination.name": job.kind,
        "messaging.consumer.group.name": namespace,
    }
    i.consumed.add(1, messaging)
    if completion.ran_seconds is not None:
        if completion.outcome in FAILED and completion.error_type:
            messaging["error.type"] = completion.error_type
        i.process_duration.record(completion.ran_seconds, messaging)


def watch_registry(registry: Registry, namespace: str) -> None:
    _registries[registry] = namespace


def record_claim(namespace: str, rows: int, seconds: float) -> None:
    if (i := _instruments()) is None:
        return
    attrs = {NS: namespace}
    i.claims.add(rows, attrs)
    i.claim_duration.record(seconds, attrs)


def record_batch(
    namespace: str, batch: Sequence[Completion], applied: set[int], seconds: float
) -> None:
    if (i := _instruments()) is None:
        return
    attrs = {NS: namespace}
    i.completion_batch.record(len(batch), attrs)
    i.completion_duration.record(seconds, attrs)
    for outcome, n in Counter(c.outcome for c in batch).items():
        i.completions.add(n, {OUTCOME: outcome.value, NS: namespace})
        if outcome is Outcome.WAITING:
            for c in batch:
                if c.outcome is Outcome.WAITING:
                    reason = "children" if c.children is not None else "signal"
                    i.waits.add(1, {"acta.wait.reason": reason, NS: namespace})
    lost = len(batch) - len(applied)
    if lost > 0:
        i.lease_lost.add(lost, attrs)


def record_stall(namespace: str) -> None:
    if (i := _instruments()) is not None:
        i.loop_stalls.add(1, {NS: namespace})


def record_stall_duration(namespace: str, seconds: float) -> None:
    if (i := _instruments()) is not None:
        i.loop_stall_duration.record(seconds, {NS: namespace})


def record_lifeline_renewal(namespace: str, rows: int) -> None:
    if (i := _instruments()) is not None:
        i.lifeline_renewals.add(rows, {NS: namespace})


def record_bounces(namespace: str, reason: str, n: int) -> None:
    if (i := _instruments()) is not None:
        i.admission_bounces.add(n, {"acta.admission.reason": reason, NS: namespace})


def record_breaker_state(namespace: str, kind: str, key: str, state: str) -> None:
    """A breaker's state as this worker saw it (a dict write: the gauge reads it)."""
    _breakers[(namespace, kind, key)] = BREAKER_STATES[state]
