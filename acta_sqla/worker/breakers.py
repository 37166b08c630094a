"""Circuit breakers' outcomes: what the finalizer wrote for kinds with a breaker, counted.

Admission (``worker/admission.py``) asks the breaker in its one ``admit`` call and notes
each job it admitted of a kind with a breaker. When the finalizer's batch lands, the
outcomes of those jobs (a success; a failure: the handler raised or timed out) go in ONE
``breaker_record`` call (queries/admission.py; the function: queries/schema.sql), batched
like admission's: every batch written while a call is in flight goes into the next. A kind
without a breaker pays one dict lookup per completion and no round trip. A ``Retry``, a
bounce, a hand-back, a cancel, a wait or a lost lease is not an outcome. A completion the
fence refused (the lease was lost) counts nothing.

The count is statistical: if the call fails (the database is away), its outcomes are
dropped with one warning; the breaker's decisions need no exact count. Each transition the
call made is logged once (``event=breaker``) by the worker that made it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from loguru import logger

from .. import metrics
from ..policy import Breaker
from ..values import Completion, Outcome

log = logger.bind(stage="breaker")

FAILURES = frozenset({Outcome.FAILED, Outcome.TIMEOUT})
"""Outcomes a breaker counts as failures (the handler raised, or ran past its timeout)."""


class BreakerStore(Protocol):
    async def breaker_record(
        self, outcomes: Sequence[Sequence[Any]]
    ) -> list[tuple[str, str, str, float | None]]: ...


class Admitted(NamedTuple):
    kind: str
    key: str
    breaker: Breaker


def log_transition(namespace: str, kind: str, key: str, state: str, wait: float | None) -> None:
    """The one log line of a transition (and the gauge)."""
    metrics.record_breaker_state(namespace, kind, key, state)
    what = kind if not key else f"{kind} [{key}]"
    if state == "open":
        log.bind(event="breaker", kind=kind, key=key, state=state).warning(
            "breaker {} opened: its jobs wait, uncharged, {:.3g}s before a probe", what, wait or 0
        )
    elif state == "half_open":
        log.bind(event="breaker", kind=kind, key=key, state=state).info(
            "breaker {} half-open: probing", what
        )
    else:
        log.bind(event="breaker", kind=kind, key=key, state=state).info("breaker {} closed", what)


class Breakers:
    """The admitted breaker jobs, and the outcome calls."""

    def __init__(self, store: BreakerStore, namespace: str) -> None:
        self.store = store
        self.namespace = namespace
        self.admitted: dict[tuple[int, int], Admitted] = {}
        self._pending: list[list[Any]] = []
        self._flushing: asyncio.Task[None] | None = None
        self.calls = 0

    def note(self, job_id: int, execution_id: int, admitted: Admitted) -> None:
        self.admitted[(job_id, execution_id)] = admitted

    def written(self, batch: Sequence[Completion], applied: set[int]) -> None:
        """The finalizer's batch landed: count its breaker jobs' outcomes."""
        if not self.admitted:
            return
        for c in batch:
            found = self.admitted.pop((c.job_id, c.execution_id), None)
            if found is None or c.job_id not in applied:
                continue
            if c.outcome is Outcome.SUCCEEDED:
                failed = False
            elif c.outcome in FAILURES:
                failed = True
            else:
                continue
            b = found.breaker
            self._pending.append(
                [
                    found.kind,
                    found.key,
                    c.job_id,
                    c.execution_id,
                    failed,
                    b.failure_rate,
                    b.min_calls,
                    b.window,
                    b.open_for,
                ]
            )
        if self._pending and (self._flushing is None or self._flushing.done()):
            self._flushing = asyncio.get_running_loop().create_task(
                self._flush(), name="acta-breakers"
            )

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            self.calls += 1
            try:
                transitions = await self.store.breaker_record(batch)
            except Exception as exc:
                log.bind(event="breaker_record_failed").warning(
                    "{} breaker outcome(s) not counted ({})", len(batch), exc
                )
                continue
            for kind, key, state, wait in transitions:
                log_transition(self.namespace, kind, key, state, wait)

    async def drain(self) -> None:
        """Wait for the outcome call in flight (a stopping worker's last outcomes)."""
        if self._flushing is not None:
            await asyncio.gather(self._flushing, return_exceptions=True)
