"""Frozen values passed between the store and the worker's stages."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, NamedTuple

from .status import JobStatus

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
    resumed: str | None = None
    """Why the job last left a durable wait (``ctx.resumed``), None if it never waited."""
    schedule_name: str | None = None
    """The schedule this job is a fire of (None: not a fire)."""
    scheduled_at: datetime | None = None
    """A fire's tick (``ctx.scheduled_at``)."""
    trace_context: str | None = None
    """The W3C trace context captured at enqueue (JSON), if any."""
    waited: float | None = None
    """Seconds from the job's due time to its claim (the queue wait)."""
    alone: bool = False
    """Claimed alone: a suspect (an earlier attempt was lost with its worker while the
    database did not know it had started). The claimer runs it with nothing else in flight
    and claims nothing more until it is done, so a loss of this attempt is its own."""


class Claim(NamedTuple):
    """What one claim statement answered."""

    jobs: list[ClaimedJob]
    suspect_due: bool
    """A suspect is due: a claimer with work in flight took nothing (it must drain and
    claim alone); a claimer with nothing in flight took the suspect alone."""


class Outcome(StrEnum):
    """What one attempt came to, as stored in ``acta.execution.outcome``: each name is its
    stored value (the values never change)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """A charged attempt that did not succeed (it raised, its result could not be stored, it
    lost its lease or a lock): retried under the failure budget, else the job ends ``failed``."""
    TIMEOUT = "timeout"
    """Ran past its execution timeout: a failure under the budget."""
    RETRY = "retry"
    """Asked for a retry at a time (``raise Retry(after=...)``): charged, under the budget."""
    FAIL = "fail"
    """Asked to fail now (``raise Fail(...)``), or failed in a way retrying cannot mend: the
    job ends ``failed`` whatever is left of its budget."""
    CANCELLED = "cancelled"
    """Cancelled on request (``raise Cancel`` or an operator's cancel)."""
    WAITING = "waiting"
    """Returned ``WaitForSignal`` or ``WaitForChildren``: parked ``waiting``, uncharged."""
    INTERRUPTED = "interrupted"
    """Stopped by the worker's forced shutdown: back to ``ready`` uncharged."""
    HANDBACK = "handback"
    """Never started (no handler here, or claimed but unstarted at shutdown): uncharged."""
    LEASE_LOST = "lease_lost"
    """Cancelled at its attempt deadline: the lease is (about to be) another worker's."""
    LOCK_LOST = "lock_lost"
    """Cancelled because a named lock it held was not renewed: it may be another's now."""
    LOST = "lost"
    """Recovery found the attempt's lease expired (its worker crashed or stalled)."""


Features = dict[str, Any]
"""A completion's sparse feature input (``{"feature": value}``), keyed by feature name; it
travels beside the fixed core fields, in a second parameter keyed by job id."""


class Completion(NamedTuple):
    """One finished attempt, as ``complete_executions`` applies it: every decision is made
    in Python (``worker/completions.py`` builds every shape); the statement only applies it.

    The fields up to ``children`` are the statement's core input, in this order (one
    JSON array per completion; ``queries/complete.py`` names the positions); ``features``
    travels apart, so a new feature never shifts them.
    """

    job_id: int
    execution_id: int
    outcome: Outcome
    status: JobStatus
    """The job's next status."""
    attempt: int
    delay: float | None = 0.0
    """Seconds (database clock) before a ``ready`` job is due again; for a ``waiting`` one,
    until its wait times out (None: no timeout)."""
    refund: bool = False
    """Give the claim's count of this attempt back (hand-backs, interruptions, an unstarted
    loss): the attempt is not charged to the failure budget."""
    result_json: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    traceback: str | None = None
    ran_seconds: float | None = None
    """How long the handler ran (None if it never started); dates the Execution row."""
    record: bool = True
    """Write an Execution row (False for hand-backs, which were never an attempt)."""
    cancel_wins: bool = False
    """If an operator asked to cancel the job, end it ``cancelled`` instead of ``status``
    (the row's ``cancel_requested`` is only known to the database: Python decides the rule,
    the statement applies it)."""
    keep_last_error: bool = False
    """Write the error to the Execution row only, leaving the job's ``last_error`` as it
    was (an uncharged loss: it was never the job's failure)."""
    ran_by: int | None = None
    """The worker that ran the attempt, when it is not the writer (recovery); None: the
    writing worker."""
    awaited_signal: str | None = None
    """A signal wait (status ``waiting``): the signal's name. If the job already received
    it, the statement makes the job ``ready`` at once instead (no lost-signal race)."""
    children: int | None = None
    """A children wait (status ``waiting``): how many children ``features["children"]``
    spawns; the job waits until that many have reached a terminal state."""
    features: Features | None = None
    """Sparse input of the statement's feature parts (not part of the core array)."""

    @property
    def size(self) -> int:
        """Result bytes: what the 4 MiB batch limit counts."""
        return len(self.result_json) if self.result_json is not None else 0


CORE_FIELDS = len(Completion._fields) - 1
"""How many of Completion's fields are the statement's core input (all but ``features``)."""


class ExpiredLease(NamedTuple):
    """A row recovery found ``executing`` past its lease, with what Python needs to decide
    its completion. Field order is the ``select_expired`` statement's column order."""

    id: int
    execution_id: int
    attempts: int
    """Attempts charged including the lost one (the claim counted it)."""
    max_attempts: int | None
    """The job's own budget, if it set one."""
    override_max_attempts: int | None
    """The kind's stored override (``acta definitions set``), if any."""
    declared_max_attempts: int | None
    """The budget the kind's code declared, if stored."""
    started: bool
    """The database knows the attempt started (a heartbeat said so)."""
    alone: bool
    """The attempt was claimed alone (the job was a suspect): nothing else ran on its
    worker, so its loss is its own."""
    lost_before: bool
    """An earlier attempt of this job was lost with its worker."""
    worker_id: int | None
    """The worker that held the lease."""


class ExpiredDecision(NamedTuple):
    """Recovery's decision for one expired lease (``completions.lease_expired``)."""

    completion: Completion
    isolate: bool
    """Make the job a suspect: claimed alone from its next attempt on."""


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
    depth: list[tuple[Any, ...]] | None = None
    """(kind, status, count) of the namespace's active jobs, when this beat measured them."""
