"""Frozen values passed between the store and the worker's stages."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

# ClaimedJob and Completion are NamedTuples rather than frozen dataclasses: one of each is
# made per job on the hot path, and a tuple is built in C (a frozen dataclass sets every
# field through object.__setattr__). They are just as immutable.


class ClaimedJob(NamedTuple):
    """A row the claim moved to ``executing``; ``execution_id`` is its fencing token.

    Field order is the claim statement's RETURNING order: ``ClaimedJob._make(record)``."""

    id: int
    execution_id: int
    kind: str
    args_json: str
    attempts: int
    """Attempts charged including this one (the claim counted it)."""
    max_attempts: int | None
    priority: int
    concurrency_key: str | None = None
    rate_key: str | None = None
    lane_key: str | None = None
    parent_id: int | None = None
    signals_json: str | None = None


class Outcome(StrEnum):
    """What one attempt came to; decides the job's next status."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """Raised an error: retried under the budget, else ``failed``."""
    TIMEOUT = "timeout"
    """Ran past its execution timeout: a failure under the budget."""
    RETRY = "retry"
    """Asked for a retry at a time (``raise Retry(after=...)``): charged, under the budget."""
    FAIL = "fail"
    """Asked to fail now (``raise Fail(...)``), or failed in a way retrying cannot mend."""
    CANCELLED = "cancelled"
    """Cancelled on request (``raise Cancel`` or an operator's cancel)."""
    INTERRUPTED = "interrupted"
    """Stopped by the worker's forced shutdown: back to ``ready`` uncharged."""
    HANDBACK = "handback"
    """Never started (no handler here, or claimed but unstarted at shutdown): uncharged."""
    LEASE_LOST = "lease_lost"
    """Cancelled at its attempt deadline: the lease is (about to be) another worker's."""
    LOCK_LOST = "lock_lost"
    """Cancelled because a named lock it held was not renewed: it may be another's now."""


class Completion(NamedTuple):  # fields in the order of complete_executions' JSON items
    """One finished attempt, as the finalizer writes it.

    ``status`` is the job's next status; ``delay`` the seconds (database clock) before a
    ``ready`` job is due again; ``charge`` is 0 for a charged attempt (the claim already
    counted it) and -1 to give the claim's count back.
    """

    job_id: int
    execution_id: int
    outcome: Outcome
    status: str
    attempt: int
    delay: float = 0.0
    charge: int = 0
    result_json: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    traceback: str | None = None
    ran_seconds: float | None = None
    """How long the handler ran (None if it never started); dates the Execution row."""
    record: bool = True
    """Write an Execution row (False for hand-backs, which were never an attempt)."""

    @property
    def size(self) -> int:
        """Result bytes: what the 4 MiB batch limit counts."""
        return len(self.result_json) if self.result_json is not None else 0


@dataclass(frozen=True, slots=True)
class HeartbeatReport:
    """What one heartbeat call answered."""

    renewed: frozenset[tuple[int, int]]
    """(job, execution) pairs whose lease moved on."""
    busy: frozenset[tuple[int, int]]
    """Pairs locked by another transaction: keep their deadline for the next beat."""
    cancel_requested: frozenset[int]
    """Held jobs an operator asked to cancel."""
    definitions_version: int
    recovery_due: bool
    """This worker took the namespace's recovery pass: run it now."""
    locks_renewed: frozenset[tuple[str, int, int]] = frozenset()
    """(name, job, execution) of the named locks whose lease moved on."""
