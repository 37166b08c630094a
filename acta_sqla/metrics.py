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
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics

from .values import ClaimedJob, Completion, Outcome

if TYPE_CHECKING:
    from .worker.inflight import Registry

_meter = metrics.get_meter("acta_sqla")
_registries: weakref.WeakKeyDictionary[Registry, str] = weakref.WeakKeyDictionary()


def _observe_inflight(_options: Any) -> Iterable[metrics.Observation]:
    for registry, namespace in list(_registries.items()):
        counts = registry.counts()
        for state in ("claimed", "executing", "finalizing"):
            yield metrics.Observation(
                counts.get(state, 0),  # type: ignore[call-overload]
                {"state": state, "namespace": namespace},
            )


INFLIGHT = _meter.create_observable_gauge(
    "acta.jobs.inflight",
    callbacks=[_observe_inflight],
    description="Claims held by workers, by registry state (claimed, executing, finalizing).",
)
COMPLETION_BATCH = _meter.create_histogram(
    "acta.completions.batch", description="Completions written by one complete_executions call."
)
CLAIMS = _meter.create_counter("acta.claims", description="Rows claimed.")
COMPLETIONS = _meter.create_counter("acta.completions", description="Completions, by outcome.")
CLAIM_DURATION = _meter.create_histogram(
    "acta.claim.duration", unit="s", description="Round trip of one claim statement."
)
COMPLETION_DURATION = _meter.create_histogram(
    "acta.completion.duration",
    unit="s",
    description="From a batch's first write try until it landed.",
)
LEASE_LOST = _meter.create_counter(
    "acta.lease.lost", description="Completions fenced out because the lease was lost."
)

LOOP_STALLS = _meter.create_counter(
    "acta.loop.stalls",
    description="Times a worker's event loop was blocked past the stall threshold (a handler "
    "blocking it: time.sleep, CPU work or sync I/O inside an async def).",
)
LOOP_STALL_DURATION = _meter.create_histogram(
    "acta.loop.stall.duration",
    unit="s",
    description="How long a stalled event loop was blocked (recorded when it came back).",
)
LIFELINE_RENEWALS = _meter.create_counter(
    "acta.lifeline.renewals",
    description="Leases renewed from the lifeline thread while the event loop was blocked.",
)

ADMISSION_BOUNCES = _meter.create_counter(
    "acta.admission.bounces",
    description="Keyed jobs refused at admission and due again later, by reason (slot: no "
    "free concurrency slot; rate: the rate meter said later). Uncharged.",
)


WAITS = _meter.create_counter(
    "acta.waits",
    description="Jobs parked waiting by their handler (WaitForSignal: reason signal; "
    "WaitForChildren: reason children). Uncharged.",
)
JOB_DURATION = _meter.create_histogram(
    "acta.job.duration", unit="s", description="How long one attempt's handler ran."
)
QUEUE_WAIT = _meter.create_histogram(
    "acta.job.queue_wait",
    unit="s",
    description="From a job's due time (enqueue, retry or schedule) to the claim of the attempt.",
)

_depth: dict[str, tuple[float, list[tuple[str, str, int]]]] = {}
"""namespace -> (monotonic time measured, [(kind, status, count)]): this process's latest
measure of each namespace's depth."""
DEPTH_FRESH_BEATS = 2


def _observe_depth(_options: Any) -> Iterable[metrics.Observation]:
    import time

    now = time.monotonic()
    for namespace, (at, rows) in list(_depth.items()):
        if now - at > _depth_fresh.get(namespace, 90.0):
            continue  # another worker measures it now
        for kind, status, count in rows:
            yield metrics.Observation(
                count, {"namespace": namespace, "kind": kind, "status": status}
            )


_depth_fresh: dict[str, float] = {}

QUEUE_DEPTH = _meter.create_observable_gauge(
    "acta.queue.depth",
    callbacks=[_observe_depth],
    description="Jobs ready, executing and waiting, by kind (one measure per heartbeat "
    "interval per namespace, taken by one worker).",
)


def sdk_configured() -> bool:
    """True when the process has a real meter provider (an SDK), not the API's default."""
    from opentelemetry.metrics import NoOpMeterProvider

    provider = metrics.get_meter_provider()
    return type(provider).__name__ != "_ProxyMeterProvider" and not isinstance(
        provider, NoOpMeterProvider
    )


def record_depth(namespace: str, rows: list[tuple[str, str, int]], beat: float) -> None:
    """The namespace's depth as this worker's heartbeat measured it."""
    import time

    _depth[namespace] = (time.monotonic(), rows)
    _depth_fresh[namespace] = DEPTH_FRESH_BEATS * beat


def record_job(namespace: str, job: ClaimedJob, completion: Completion) -> None:
    """One attempt's duration and queue wait (only called with a metrics SDK)."""
    if not completion.record:
        return  # a hand-back or a bounce: not an attempt
    attrs = {"namespace": namespace, "kind": job.kind, "outcome": completion.outcome.value}
    if completion.ran_seconds is not None:
        JOB_DURATION.record(completion.ran_seconds, attrs)
    if job.waited is not None:
        QUEUE_WAIT.record(max(0.0, job.waited), attrs)


def watch_registry(registry: Registry, namespace: str) -> None:
    _registries[registry] = namespace


def record_claim(namespace: str, rows: int, seconds: float) -> None:
    attrs = {"namespace": namespace}
    CLAIMS.add(rows, attrs)
    CLAIM_DURATION.record(seconds, attrs)


def record_batch(
    namespace: str, batch: Sequence[Completion], applied: set[int], seconds: float
) -> None:
    attrs = {"namespace": namespace}
    COMPLETION_BATCH.record(len(batch), attrs)
    COMPLETION_DURATION.record(seconds, attrs)
    for outcome, n in Counter(c.outcome for c in batch).items():
        COMPLETIONS.add(n, {"outcome": outcome.value, "namespace": namespace})
        if outcome is Outcome.WAITING:
            for c in batch:
                if c.outcome is Outcome.WAITING:
                    reason = "children" if c.children is not None else "signal"
                    WAITS.add(1, {"reason": reason, "namespace": namespace})
    lost = len(batch) - len(applied)
    if lost > 0:
        LEASE_LOST.add(lost, attrs)


def record_stall(namespace: str) -> None:
    LOOP_STALLS.add(1, {"namespace": namespace})


def record_stall_duration(namespace: str, seconds: float) -> None:
    LOOP_STALL_DURATION.record(seconds, {"namespace": namespace})


def record_lifeline_renewal(namespace: str, rows: int) -> None:
    LIFELINE_RENEWALS.add(rows, {"namespace": namespace})


def record_bounces(namespace: str, reason: str, n: int) -> None:
    ADMISSION_BOUNCES.add(n, {"reason": reason, "namespace": namespace})
