"""Admission: which claimed job may start now (concurrency slots, rate meters).

The executor asks before the handler (its ``admit`` hook): ``None`` admits the entry, a
completion bounces it. A job with no concurrency key and no rate pays nothing: no
request, no round trip. Keyed jobs are batched like the finalizer batches completions:
the requests of every executor that asks while one call is in flight go together into
the next ``admit`` call (queries/admission.py; the function: queries/schema.sql), ONE
round trip however many executors ask at once.

A call the database refuses for its data is asked again request by request, so only the
request it refuses alone fails (under its budget, ``acta.AdmissionRefused``); its
batch-mates are answered as usual.

A refused job bounces (``completions.bounce``): due again ``CONCURRENCY_BOUNCE_SECONDS``
later for a slot, at the meter's time for a rate, its attempt given back, no failure, one
debug line and a count in ``acta.admission.bounces``. The bounce is written by the
finalizer's one ``complete_executions`` of its batch, like every other completion.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

from loguru import logger

from .. import metrics
from ..errors import StatementRefused, StoreUnavailable
from ..policy import Policy
from ..settings import CONCURRENCY_BOUNCE_SECONDS
from ..values import ClaimedJob, Completion
from . import completions
from .breakers import Admitted, Breakers, log_transition
from .inflight import Entry

log = logger.bind(stage="admission")

ADMITTED, SLOT, RATE, LOST = "admitted", "slot", "rate", "lost"
BREAKER, PROBE, HALF_OPEN = "breaker", "probe", "half_open"
"""The verdicts ``admit`` answers (the last three for a kind with a breaker: refused by
it, admitted as a probe, admitted as the probe that made it half-open)."""
RUNS = frozenset({ADMITTED, PROBE, HALF_OPEN})


_REASONS = {
    SLOT: "no free concurrency slot",
    RATE: "rate limit",
    BREAKER: "circuit breaker open",
}


class Request(NamedTuple):
    """One keyed job's question, in the ``admit`` call's array order."""

    job_id: int
    execution_id: int
    limit: int | None
    """Slots of its concurrency key (None: the job has no key)."""
    rate_count: int | None
    """N of the kind's rate N/period (None: no rate)."""
    rate_period: float | None
    bounce: float
    """Seconds before a job refused a slot is due again."""
    breaker_key: str | None = None
    """The job's breaker (``''``: the kind's one breaker; None: the kind has none)."""
    probes: int | None = None


class AdmissionStore(Protocol):
    async def admit(self, requests: Sequence[Sequence[Any]]) -> list[tuple[int, str, float]]: ...


def request(job: ClaimedJob, policy: Policy, bounce: float) -> Request | None:
    """What admission must ask for ``job``, or None: a plain job asks nothing. A job's own
    concurrency key on a kind that declares none takes one slot per key (Policy's rule);
    a rate applies per the job's rate key, or per the kind when it has none; a breaker
    per the kind, or per the job's concurrency or rate key (docs/breakers.md)."""
    limit = policy.concurrency_slots if job.concurrency_key is not None else None
    rate = policy.rate
    breaker = policy.breaker
    if limit is None and rate is None and breaker is None:
        return None
    return Request(
        job.id,
        job.execution_id,
        limit,
        rate.count if rate else None,
        rate.period if rate else None,
        bounce,
        breaker.key_of(job.kind, job.concurrency_key, job.rate_key) if breaker else None,
        breaker.probes if breaker else None,
    )


class Admission:
    """The executors' admission hook: ``await admission(entry)``."""

    def __init__(
        self,
        store: AdmissionStore,
        policies: Callable[[str], Policy],
        namespace: str,
        bounce: float = CONCURRENCY_BOUNCE_SECONDS,
        breakers: Breakers | None = None,
    ) -> None:
        self.store = store
        self.breakers = breakers
        self.policies = policies
        self.namespace = namespace
        self.bounce = bounce
        self._pending: list[tuple[Request, asyncio.Future[tuple[str, float]]]] = []
        self._flushing: asyncio.Task[None] | None = None
        self.calls = 0
        """``admit`` round trips made (the benchmark reports requests per call)."""

    async def __call__(self, entry: Entry) -> Completion | None:
        job = entry.job
        policy = self.policies(job.kind)
        asked = request(job, policy, self.bounce)
        if asked is None:
            return None
        future: asyncio.Future[tuple[str, float]] = asyncio.get_running_loop().create_future()
        self._pending.append((asked, future))
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.create_task(self._flush(), name="acta-admission")
        try:
            verdict, wait = await future
        except _Unadmittable as refused:
            # The database refused this request's own data even asked alone (its batch-mates
            # were answered apart): a fault of the job's row, not of the database. It fails
            # under its budget, saying why, as a completion refused for its data does.
            why = refused.exc
            log.bind(event="admission_refused", job_id=job.id).error(
                "job {}: the database refused its admission ({}); failing the attempt",
                job.id,
                why,
            )
            error = completions.ErrorFields(
                "acta.AdmissionRefused",
                f"the database refused this job's admission: {str(why)[:500]}",
                "",
            )
            return completions.failed(job, self.policies(job.kind), error, None)
        except (StoreUnavailable, StatementRefused) as exc:
            # The database could not answer: this is no fault of the job, so it is not
            # charged. If the call did take a slot before its answer was lost, the
            # bounce's completion frees it (the terminal-effects trigger).
            log.bind(event="admission_failed", job_id=job.id).warning(
                "job {}: admission failed ({}); due again in {:g}s, uncharged",
                job.id,
                exc,
                self.bounce,
            )
            return completions.bounce(job, self.bounce)
        if asked.breaker_key is not None:
            self._breaker_seen(job, asked.breaker_key, policy, verdict, wait)
        if verdict in RUNS:
            return None
        if verdict == LOST:
            # Another execution owns the row (our lease ran out): nothing was taken, and
            # this completion is fenced out like any late write.
            return completions.handback(job, 0.0)
        log.bind(event="bounce", job_id=job.id, reason=verdict).debug(
            "job {} bounced ({}): due again in {:.3f}s",
            job.id,
            _REASONS.get(verdict, verdict),
            wait,
        )
        metrics.record_bounces(self.namespace, verdict, 1)
        return completions.bounce(job, max(0.0, wait))

    def _breaker_seen(
        self, job: ClaimedJob, key: str, policy: Policy, verdict: str, wait: float
    ) -> None:
        """A breaker's answer: the gauge; the transition's log line; an admitted job noted
        for its outcome."""
        assert policy.breaker is not None
        if verdict == BREAKER:
            metrics.record_breaker_state(self.namespace, job.kind, key, "open")
        elif verdict == HALF_OPEN:
            log_transition(self.namespace, job.kind, key, "half_open", None)
        elif verdict in RUNS:
            state = "closed" if verdict == ADMITTED else "half_open"
            metrics.record_breaker_state(self.namespace, job.kind, key, state)
        if verdict in RUNS and self.breakers is not None:
            self.breakers.note(job.id, job.execution_id, Admitted(job.kind, key, policy.breaker))

    async def _flush(self) -> None:
        # Let every executor that runs in this loop turn ask first: the claim hands its
        # rows to the executors together, so their admissions go in one call.
        await asyncio.sleep(0)
        while self._pending:
            batch, self._pending = self._pending, []
            await self._answer(batch)

    async def _answer(self, batch: list[tuple[Request, asyncio.Future[tuple[str, float]]]]) -> None:
        """One ``admit`` call for ``batch``, its verdicts set on the futures. A call the
        database refuses for its data (SQLSTATE class 22 or 54: a key too long for its
        index, written past acta's checks) is asked again one request at a time, as the
        finalizer writes a refused batch apart: the one request still refused alone fails,
        its batch-mates are answered. (The refused call took nothing: its transaction
        rolled back.) Before, every call carrying such a row failed and all its batch-mates
        bounced, uncharged, for ever."""
        self.calls += 1
        try:
            # A request without a breaker goes as before 0016 (six positions).
            answers = await self.store.admit(
                [r if r.breaker_key is not None else r[:6] for r, _ in batch]
            )
        except StatementRefused as exc:
            if not exc.data_unwritable:
                _fail(batch, exc)
            elif len(batch) > 1:
                for one in batch:
                    await self._answer([one])
            else:
                _fail(batch, _Unadmittable(exc))
            return
        except Exception as exc:
            _fail(batch, exc)
            return
        verdicts = {job_id: (verdict, wait) for job_id, verdict, wait in answers}
        for r, future in batch:
            if not future.done():
                future.set_result(verdicts.get(r.job_id, (LOST, 0.0)))


class _Unadmittable(Exception):
    """The database refused one request's data, asked alone (``exc`` says why)."""

    def __init__(self, exc: StatementRefused) -> None:
        super().__init__(str(exc))
        self.exc = exc


def _fail(batch: Sequence[tuple[Request, asyncio.Future[Any]]], exc: BaseException) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(exc)
