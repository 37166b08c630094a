"""One table of acta's metrics, through the OpenTelemetry API (no-ops without an SDK).

| name                          | instrument            | unit | attributes        |
|-------------------------------|-----------------------|------|-------------------|
| acta.jobs.inflight            | observable gauge      | 1    | state, namespace  |
| acta.completions.batch        | histogram             | 1    | namespace         |
| acta.claims                   | counter (rows)        | 1    | namespace         |
| acta.completions              | counter               | 1    | outcome, namespace|
| acta.claim.duration           | histogram             | s    | namespace         |
| acta.completion.duration      | histogram             | s    | namespace         |
| acta.lease.lost               | counter               | 1    | namespace         |
| acta.loop.stalls              | counter               | 1    | namespace         |
| acta.loop.stall.duration      | histogram             | s    | namespace         |
| acta.lifeline.renewals        | counter (rows)        | 1    | namespace         |
| acta.admission.bounces        | counter               | 1    | reason, namespace |
| acta.waits                    | counter               | 1    | reason, namespace |
| acta.queue.depth              | observable gauge      | 1    | namespace, kind, status |
| acta.job.duration             | histogram             | s    | namespace, kind, outcome |
| acta.job.queue_wait           | histogram             | s    | namespace, kind, outcome |
| acta.breaker.state            | observable gauge      | 1    | namespace, kind, key |

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

from .tracing import api_in_use
from .values import ClaimedJob, Completion, Outcome

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter, Observation

    from .worker.inflight import Registry

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
                {"state": state, "namespace": namespace},
            )


def _observe_depth(_options: Any) -> Iterable[Observation]:
    from opentelemetry.metrics import Observation

    now = time.monotonic()
    for namespace, (at, rows) in list(_depth.items()):
        if now - at > _depth_fresh.get(namespace, 90.0):
            continue  # another worker measures it now
        for kind, status, count in rows:
            yield Observation(count, {"namespace": namespace, "kind": kind, "status": status})


def _observe_breakers(_options: Any) -> Iterable[Observation]:
    from opentelemetry.metrics import Observation

    for (namespace, kind, key), state in list(_breakers.items()):
        yield Observation(state, {"namespace": namespace, "kind": kind, "key": key})


class _Instruments:
    """acta's instruments, made from the API's meter (proxies that an SDK set later binds)."""

    def __init__(self, meter: Meter) -> None:
        meter.create_observable_gauge(
            "acta.jobs.inflight",
            callbacks=[_observe_inflight],
            description="Claims held by workers, by registry state (claimed, executing, "
            "finalizing).",
        )
        self.completion_batch = meter.create_histogram(
            "acta.completions.batch",
            description="Completions written by one complete_executions call.",
        )
        self.claims = meter.create_counter("acta.claims", description="Rows claimed.")
        self.completions = meter.create_counter(
            "acta.completions", description="Completions, by outcome."
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
            "acta.lease.lost", description="Completions fenced out because the lease was lost."
        )
        self.loop_stalls = meter.create_counter(
            "acta.loop.stalls",
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
            description="Leases renewed from the lifeline thread while the event loop was blocked.",
        )
        self.admission_bounces = meter.create_counter(
            "acta.admission.bounces",
            description="Keyed jobs refused at admission and due again later, by reason (slot: "
            "no free concurrency slot; rate: the rate meter said later). Uncharged.",
        )
        self.waits = meter.create_counter(
            "acta.waits",
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
            callbacks=[_observe_depth],
            description="Jobs ready, executing and waiting, by kind (one measure per heartbeat "
            "interval per namespace, taken by one worker).",
        )
        meter.create_observable_gauge(
            "acta.breaker.state",
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
    attrs = {"namespace": namespace, "kind": job.kind, "outcome": completion.outcome.value}
    if completion.ran_seconds is not None:
        i.job_duration.record(completion.ran_seconds, attrs)
    if job.waited is not None:
        i.queue_wait.record(max(0.0, job.waited), attrs)


def watch_registry(registry: Registry, namespace: str) -> None:
    _registries[registry] = namespace


def record_claim(namespace: str, rows: int, seconds: float) -> None:
    if (i := _instruments()) is None:
        return
    attrs = {"namespace": namespace}
    i.claims.add(rows, attrs)
    i.claim_duration.record(seconds, attrs)


def record_batch(
    namespace: str, batch: Sequence[Completion], applied: set[int], seconds: float
) -> None:
    if (i := _instruments()) is None:
        return
    attrs = {"namespace": namespace}
    i.completion_batch.record(len(batch), attrs)
    i.completion_duration.record(seconds, attrs)
    for outcome, n in Counter(c.outcome for c in batch).items():
        i.completions.add(n, {"outcome": outcome.value, "namespace": namespace})
        if outcome is Outcome.WAITING:
            for c in batch:
                if c.outcome is Outcome.WAITING:
                    reason = "children" if c.children is not None else "signal"
                    i.waits.add(1, {"reason": reason, "namespace": namespace})
    lost = len(batch) - len(applied)
    if lost > 0:
        i.lease_lost.add(lost, attrs)


def record_stall(namespace: str) -> None:
    if (i := _instruments()) is not None:
        i.loop_stalls.add(1, {"namespace": namespace})


def record_stall_duration(namespace: str, seconds: float) -> None:
    if (i := _instruments()) is not None:
        i.loop_stall_duration.record(seconds, {"namespace": namespace})


def record_lifeline_renewal(namespace: str, rows: int) -> None:
    if (i := _instruments()) is not None:
        i.lifeline_renewals.add(rows, {"namespace": namespace})


def record_bounces(namespace: str, reason: str, n: int) -> None:
    if (i := _instruments()) is not None:
        i.admission_bounces.add(n, {"reason": reason, "namespace": namespace})


def record_breaker_state(namespace: str, kind: str, key: str, state: str) -> None:
    """A breaker's state as this worker saw it (a dict write: the gauge reads it)."""
    _breakers[(namespace, kind, key)] = BREAKER_STATES[state]
