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

Per-job work stays off the metric path: the in-flight gauge is read from the registry when
a collector asks, and outcome counts are added once per batch.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics

from .values import Completion

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
