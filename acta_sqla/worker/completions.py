"""Every way an attempt ends, as the one ``Completion`` the finalizer (or recovery) writes.

This module makes every decision about a job's next state: its status, whether the attempt
is charged, when a retry is due, what error the job keeps, and whether an operator's cancel
wins. ``complete_executions`` (queries/complete.py) only applies what it is given, fenced
by (job, execution); recovery applies the completions built here through the same fenced
finish. So a new way to end an attempt is one builder here, plus (if it needs to write
something of its own) one feature part in queries/complete.py fed by ``features``.

Shapes: :func:`succeeded`, :func:`failed` (retried under the budget, ``failed`` once it
is spent), :func:`retry_at`, :func:`fail_now`, :func:`cancelled`, :func:`interrupted`,
:func:`wait_for_signal` and :func:`wait_for_children` (durable waits, uncharged),
:func:`handback`, :func:`bounce` (admission refused a slot or the rate), :func:`stopped`
(the alarm: timeout, lease or lock lost, a cancel, an interruption), :func:`refused` (the
database refused a completion's data) and :func:`lease_expired` (recovery). Rules:
:func:`budget`, :func:`cancel_wins`, :func:`loss_is_charged` and :func:`isolate_after_loss`.

:func:`conclude` turns what running a handler came to (:class:`Ran`, reported by the
executor, which decides nothing) into its completion.
"""

from __future__ import annotations

import json
import traceback as tb
from typing import Any, NamedTuple

from ..errors import Cancel, Fail, InvalidJob, Retry
from ..policy import Policy
from ..settings import MAX_RESULT_BYTES, MAX_TRACEBACK_CHARS
from ..status import JobStatus
from ..values import ClaimedJob, Completion, ExpiredDecision, ExpiredLease, Features, Outcome
from ..waits import WaitForChildren, WaitForSignal

READY, SUCCEEDED, FAILED, CANCELLED, WAITING = (
    JobStatus.READY,
    JobStatus.SUCCEEDED,
    JobStatus.FAILED,
    JobStatus.CANCELLED,
    JobStatus.WAITING,
)


class ErrorFields(NamedTuple):
    """What a completion records of an error: its type, message and traceback."""

    type: str
    message: str
    traceback: str


# ------------------------------------------------------------------------------ rules


def budget(max_attempts: int | None, default: int) -> int:
    """The failure budget: the job's own ``max_attempts`` if it set one, else ``default``
    (the kind's effective policy)."""
    return max_attempts if max_attempts is not None else default


def cancel_wins(status: JobStatus) -> bool:
    """An operator's cancel wins over a retry: a completion that would put the job back
    ``ready`` (or park it ``waiting``) ends it ``cancelled`` if a cancel was requested
    meanwhile. A terminal status stands (the attempt's own ending is the truer record)."""
    return status is READY or status is WAITING


def loss_is_charged(lost: ExpiredLease) -> bool:
    """Recovery charges a lost attempt when the loss is the job's own as far as the
    database can tell: the attempt was claimed alone (nothing else ran on its worker, so
    if the worker died, it died running this job), or the database knows it had started
    (a heartbeat said so: the worker crashed or stalled while running it, the classic
    lease loss). An attempt lost before it was known to start, among others, is never
    charged: a worker killed by one of its jobs within a beat of a claim loses the whole
    batch "unstarted", and nothing tells the culprit from its batch-mates. Such a job is
    isolated instead (:func:`isolate_after_loss`), and its next loss, alone, names it."""
    return lost.alone or lost.started


def isolate_after_loss(lost: ExpiredLease) -> bool:
    """Make the job a suspect, claimed alone from its next attempt on: it was lost among
    others before it was known to start (it may be the job that kills its worker at once),
    or lost among others a second time (it may kill its worker a while after it starts:
    charged each time, but from then on it runs alone, so it stops taking other jobs'
    attempts down with it). A job claimed alone stays a suspect."""
    return not lost.alone and (not lost.started or lost.lost_before)


def error_fields(exc: BaseException) -> ErrorFields:
    """An exception as the completion records it (type qualified by module, message capped
    at 4,000 characters, traceback at ``MAX_TRACEBACK_CHARS`` keeping its end)."""
    kind = type(exc).__qualname__
    module = type(exc).__module__
    if module not in ("builtins", "__main__"):
        kind = f"{module}.{kind}"
    message = _clean(str(exc))[:4000]
    trace = _clean("".join(tb.format_exception(exc)))
    if len(trace) > MAX_TRACEBACK_CHARS:
        trace = "…" + trace[-MAX_TRACEBACK_CHARS:]
    return ErrorFields(kind, message, trace)


def _clean(text: str) -> str:
    # PostgreSQL text cannot hold NUL bytes; an error message must never make its own
    # completion unwritable.
    return text.replace("\x00", "\\x00")


# ------------------------------------------------------------------------------ shapes


def _ended(
    job: ClaimedJob,
    outcome: Outcome,
    status: JobStatus,
    error: ErrorFields | None,
    ran: float | None,
    *,
    delay: float | None = 0.0,
    refund: bool = False,
    result_json: str | None = None,
    record: bool = True,
    awaited_signal: str | None = None,
    children: int | None = None,
    features: Features | None = None,
) -> Completion:
    """The one constructor of an executor's completions (every shape below): the cancel
    rule is applied here. (``refused`` rewrites a completion the database refused, and
    recovery's ``lease_expired`` ends a row no executor holds.)"""
    return Completion(
        job_id=job.id,
        execution_id=job.execution_id,
        outcome=outcome,
        status=status,
        attempt=job.attempts,
        delay=delay,
        refund=refund,
        result_json=result_json,
        error_type=error.type if error else None,
        error_message=error.message if error else None,
        traceback=error.traceback if error else None,
        ran_seconds=ran,
        record=record,
        cancel_wins=cancel_wins(status),
        awaited_signal=awaited_signal,
        children=children,
        features=features,
    )


def succeeded(job: ClaimedJob, result_json: str | None, ran: float) -> Completion:
    """The handler returned: the job ends ``succeeded`` with its JSON result."""
    return _ended(job, Outcome.SUCCEEDED, SUCCEEDED, None, ran, result_json=result_json)


def failed(
    job: ClaimedJob,
    policy: Policy,
    error: ErrorFields,
    ran: float | None,
    outcome: Outcome = Outcome.FAILED,
    retry_after: float | None = None,
) -> Completion:
    """A charged attempt that did not succeed: retried while the budget lasts (after
    ``retry_after``, else the policy's back-off), ``failed`` once it is spent, the error
    then saying so."""
    spent = budget(job.max_attempts, policy.max_attempts)
    if job.attempts >= spent:
        message = f"{error.message} (attempt {job.attempts} of {spent}: failure budget spent)"
        return _ended(job, outcome, FAILED, error._replace(message=message), ran)
    delay = retry_after if retry_after is not None else policy.retry_delay(job.attempts)
    return _ended(job, outcome, READY, error, ran, delay=delay)


def retry_at(
    job: ClaimedJob, policy: Policy, error: ErrorFields, ran: float | None, after: float
) -> Completion:
    """The handler asked for a retry after ``after`` seconds: charged like any attempt, so
    the budget bounds a job that keeps asking."""
    return failed(job, policy, error, ran, Outcome.RETRY, retry_after=after)


def fail_now(job: ClaimedJob, error: ErrorFields, ran: float | None) -> Completion:
    """The job ends ``failed`` now, whatever is left of its budget (``raise Fail``, or args
    that no longer fit the handler: a retry cannot mend them)."""
    return _ended(job, Outcome.FAIL, FAILED, error, ran)


def cancelled(job: ClaimedJob, error: ErrorFields, ran: float | None) -> Completion:
    """The job ends ``cancelled`` (``raise Cancel``, or an operator's cancel reached it)."""
    return _ended(job, Outcome.CANCELLED, CANCELLED, error, ran)


def interrupted(job: ClaimedJob, error: ErrorFields, ran: float | None) -> Completion:
    """Stopped by this worker's forced shutdown, not by the job: back ``ready`` now,
    uncharged."""
    return _ended(job, Outcome.INTERRUPTED, READY, error, ran, refund=True)


def wait_for_signal(job: ClaimedJob, name: str, timeout: float | None, ran: float) -> Completion:
    """The handler returned ``WaitForSignal``: the job parks ``waiting`` for ``name`` (until
    ``timeout`` seconds, None: no timeout), holding no executor, lease or worker; the
    attempt is not charged (it did what it was asked). If the job already received the
    signal, the statement makes it ``ready`` at once instead."""
    return _ended(
        job, Outcome.WAITING, WAITING, None, ran, delay=timeout, refund=True, awaited_signal=name
    )


def wait_for_children(job: ClaimedJob, children: list[dict[str, Any]], ran: float) -> Completion:
    """The handler returned ``WaitForChildren``: the same statement inserts ``children``
    (rows as ``waits.child_row`` builds them) and parks the job ``waiting`` until each has
    reached a terminal state; the attempt is not charged."""
    return _ended(
        job,
        Outcome.WAITING,
        WAITING,
        None,
        ran,
        delay=None,
        refund=True,
        children=len(children),
        features={"children": children},
    )


def handback(job: ClaimedJob, delay: float) -> Completion:
    """An unstarted row goes back ``ready`` after ``delay``, its attempt given back and no
    Execution row written (it was never an attempt)."""
    return _ended(job, Outcome.HANDBACK, READY, None, None, delay=delay, refund=True, record=False)


def bounce(job: ClaimedJob, delay: float) -> Completion:
    """Admission refused the job (no free slot of its concurrency key, or its rate meter
    says later): back ``ready`` after ``delay``, its attempt given back, no failure and no
    Execution row (I18: a bounce charges nothing). An operator's cancel wins, as for any
    return to ``ready``."""
    return _ended(job, Outcome.HANDBACK, READY, None, None, delay=delay, refund=True, record=False)


_STOP_MESSAGES = {
    Outcome.LEASE_LOST: "the attempt deadline passed without a confirmed lease renewal",
    Outcome.LOCK_LOST: "a named lock the attempt held was not renewed",
    Outcome.CANCELLED: "cancelled on request",
    Outcome.INTERRUPTED: "interrupted by the worker's shutdown; retried uncharged",
}


def stopped(job: ClaimedJob, policy: Policy, reason: Outcome, ran: float) -> Completion:
    """The attempt's alarm rang (or the heartbeat or the shutdown fired it) for ``reason``:
    say why, as its completion."""
    if reason is Outcome.TIMEOUT:
        message = f"execution timeout: the attempt ran past {policy.timeout:g}s"
    else:
        message = _STOP_MESSAGES.get(reason, reason.value)
    error = ErrorFields("acta." + reason.value, message, "")
    if reason in (Outcome.LEASE_LOST, Outcome.LOCK_LOST):
        # Written anyway: if the row is still ours the write applies (a failed attempt);
        # if another worker took it, the fence makes it a no-op.
        return failed(job, policy, error, ran)
    if reason is Outcome.CANCELLED:
        return cancelled(job, error, ran)
    if reason is Outcome.INTERRUPTED:
        return interrupted(job, error, ran)
    return failed(job, policy, error, ran, reason)  # a timeout: a failure under the budget


def refused(completion: Completion, why: str) -> Completion:
    """The database refused ``completion`` for its data even written alone: the job ends
    ``failed`` without its result, saying why, so one poison completion never blocks the
    rest (nor loops)."""
    return Completion(
        job_id=completion.job_id,
        execution_id=completion.execution_id,
        outcome=Outcome.FAIL,
        status=FAILED,
        attempt=completion.attempt,
        error_type="acta.CompletionRefused",
        error_message=f"the completion could not be stored: {why[:500]}",
        ran_seconds=completion.ran_seconds,
    )


def encode_result(result: Any) -> str | None:
    """The JSON stored for a handler's return value; raises ValueError with a clear message."""
    if result is None:
        return None
    try:
        encoded = json.dumps(result, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"the handler returned {type(result).__name__}, which is not JSON-serializable "
            f"({exc}); return dicts, lists, strings, numbers, booleans or None"
        ) from None
    if "\\u0000" in encoded:
        raise ValueError("the handler's result contains a NUL character, which JSONB cannot store")
    if len(encoded) > MAX_RESULT_BYTES:
        raise ValueError(
            f"the handler's result is {len(encoded):,} bytes as JSON; the limit is "
            f"{MAX_RESULT_BYTES:,}. Store large output elsewhere and return a reference"
        )
    return encoded


class ResultError(Exception):
    """A handler's return value could not be stored."""


class Ran(NamedTuple):
    """What one attempt's run came to, as the executor saw it (no decision in it)."""

    result: Any
    """What the handler returned (when it returned)."""
    error: BaseException | None
    """What it raised, or why it could not start (its args no longer load)."""
    seconds: float | None
    """How long it ran; None: the handler never started (its args no longer load)."""
    stopped: Outcome | None = None
    """Why it was asked to stop (its alarm rang: timeout or lease lost; or it was fired:
    a cancel, a lost lock, the shutdown); None when it ran to its own end."""
    stranded: str | None = None
    """A returned ``WaitForChildren`` would strand a lane (the executor asked the
    database for the lanes its ancestors hold): why."""


def conclude(job: ClaimedJob, policy: Policy, ran: Ran) -> Completion:
    """The completion of an attempt that ran (or could not start): every decision about
    what the handler's ending means. Pure."""
    seconds = ran.seconds
    if seconds is None:
        # Args that no longer fit the handler's signature will not fit on a retry.
        assert ran.error is not None
        return fail_now(job, error_fields(ran.error), None)
    if ran.stopped is not None:
        return stopped(job, policy, ran.stopped, seconds)
    error = ran.error
    if error is None:
        result = ran.result
        if isinstance(result, WaitForSignal):
            return wait_for_signal(job, result.name, result.timeout, seconds)
        if isinstance(result, WaitForChildren):
            if ran.stranded is None:
                return wait_for_children(job, result.rows, seconds)
            return failed(job, policy, error_fields(InvalidJob(ran.stranded)), seconds)
        try:
            return succeeded(job, encode_result(result), seconds)
        except ValueError as exc:
            return failed(job, policy, error_fields(ResultError(exc)), seconds)
    if isinstance(error, Retry):
        return retry_at(job, policy, error_fields(error), seconds, error.after)
    if isinstance(error, Fail):
        return fail_now(job, error_fields(error), seconds)
    if isinstance(error, Cancel):
        return cancelled(job, error_fields(error), seconds)
    return failed(job, policy, error_fields(error), seconds)


def lease_expired(lost: ExpiredLease, default_budget: int) -> ExpiredDecision:
    """Recovery's completion of a row whose lease ran out (its worker crashed or stalled):
    charged by :func:`loss_is_charged`, then ``failed`` if the budget is spent, else
    ``ready`` now; isolated by :func:`isolate_after_loss`. An operator's cancel ends it
    ``cancelled`` whatever else. An uncharged loss leaves the job's ``last_error`` alone (it
    was never the job's failure); its Execution row says what happened all the same. Each
    message says only what the database knows."""
    charged = loss_is_charged(lost)
    isolate = isolate_after_loss(lost)
    spent = budget(
        lost.max_attempts,
        _first(lost.override_max_attempts, lost.declared_max_attempts, default_budget),
    )
    status = FAILED if charged and lost.attempts >= spent else READY
    if lost.alone:
        message = (
            "the worker stopped renewing its lease (crashed or stalled) while running this "
            "job alone, as it runs every job lost with its worker before: charged, "
            f"attempt {lost.attempts} of {spent}"
        )
    elif charged:
        message = (
            "the worker running this attempt stopped renewing its lease (crashed or stalled)"
            f": charged, attempt {lost.attempts} of {spent}"
        )
        if isolate:
            message += "; lost with its worker before, it runs alone from now on"
    else:
        message = (
            "the worker holding this attempt stopped renewing its lease before the attempt "
            "was known to start, while it held other jobs: not charged; the job runs alone "
            "from now on, so that a job that kills its worker names itself"
        )
    if status is FAILED:
        message = f"{message}, failure budget spent"
    completion = Completion(
        job_id=lost.id,
        execution_id=lost.execution_id,
        outcome=Outcome.LOST,
        status=status,
        attempt=lost.attempts,
        refund=not charged,
        error_type="acta.LeaseExpired",
        error_message=message,
        cancel_wins=True,  # a cancel-requested row ends cancelled, charged or not
        keep_last_error=not charged,
        ran_by=lost.worker_id,
    )
    return ExpiredDecision(completion, isolate)


def _first(*values: int | None) -> int:
    for value in values:
        if value is not None:
            return value
    raise ValueError("no budget given")  # the default is never None
