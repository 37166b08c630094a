"""Executors: run handlers for claimed entries and turn every ending into a completion.

Whatever a handler does (returns, raises, hangs past its timeout, is cancelled, returns
garbage), the executor builds a completion and hands it to the finalizer, and only then
returns its permit: no row is ever stranded in ``executing`` by the worker's own code.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import traceback as tb
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from loguru import logger

from ..app import Handler
from ..context import Context
from ..errors import Cancel, Fail, Retry
from ..policy import Policy
from ..settings import MAX_RESULT_BYTES, MAX_TRACEBACK_CHARS
from ..values import ClaimedJob, Completion, Outcome
from .clock import Clock
from .inflight import Entry, EntryState, Permits, Registry
from .locks import Locker, LockStore

log = logger.bind(stage="executor")

Admission = Callable[[Entry], Awaitable[Completion | None]]
"""Admission before the handler (concurrency slot, rate meter): None admits the entry, a
completion bounces it."""


def _clean(text: str) -> str:
    # PostgreSQL text cannot hold NUL bytes; an error message must never make its own
    # completion unwritable.
    return text.replace("\x00", "\\x00")


def _error_fields(exc: BaseException) -> tuple[str, str, str]:
    kind = type(exc).__qualname__
    module = type(exc).__module__
    if module not in ("builtins", "__main__"):
        kind = f"{module}.{kind}"
    message = _clean(str(exc))[:4000]
    trace = _clean("".join(tb.format_exception(exc)))
    if len(trace) > MAX_TRACEBACK_CHARS:
        trace = "…" + trace[-MAX_TRACEBACK_CHARS:]
    return kind, message, trace


def handback(job: ClaimedJob, delay: float) -> Completion:
    """An unstarted row goes back ``ready`` after ``delay``, its attempt given back."""
    return Completion(
        job_id=job.id,
        execution_id=job.execution_id,
        outcome=Outcome.HANDBACK,
        status="ready",
        attempt=job.attempts,
        delay=delay,
        charge=-1,
        record=False,
    )


def succeeded(job: ClaimedJob, result_json: str | None, ran: float) -> Completion:
    return Completion(
        job_id=job.id,
        execution_id=job.execution_id,
        outcome=Outcome.SUCCEEDED,
        status="succeeded",
        attempt=job.attempts,
        result_json=result_json,
        ran_seconds=ran,
    )


def failed(
    job: ClaimedJob,
    policy: Policy,
    outcome: Outcome,
    error: tuple[str, str, str],
    ran: float | None,
    retry_after: float | None = None,
) -> Completion:
    """A charged attempt that did not succeed: retried while the budget lasts."""
    budget = job.max_attempts if job.max_attempts is not None else policy.max_attempts
    kind, message, trace = error
    common = dict(
        job_id=job.id,
        execution_id=job.execution_id,
        outcome=outcome,
        attempt=job.attempts,
        error_type=kind,
        error_message=message,
        traceback=trace,
        ran_seconds=ran,
    )
    if outcome is Outcome.CANCELLED:
        return Completion(status="cancelled", **common)  # type: ignore[arg-type]
    if outcome is Outcome.INTERRUPTED:
        # Stopped by this worker's forced shutdown, not by the job: retried, uncharged.
        return Completion(status="ready", charge=-1, **common)  # type: ignore[arg-type]
    if outcome is Outcome.FAIL or job.attempts >= budget:
        if outcome is not Outcome.FAIL and job.attempts >= budget:
            common["error_message"] = (
                f"{message} (attempt {job.attempts} of {budget}: failure budget spent)"
            )
        return Completion(status="failed", **common)  # type: ignore[arg-type]
    delay = retry_after if retry_after is not None else policy.retry_delay(job.attempts)
    return Completion(status="ready", delay=delay, **common)  # type: ignore[arg-type]


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


class Executor:
    """One of N executor loops; they share the claimed channel and the completed channel."""

    def __init__(
        self,
        handlers: Mapping[str, Handler[Any, Any]],
        policies: Callable[[str], Policy],
        registry: Registry,
        permits: Permits,
        claimed: asyncio.Queue[Entry | None],
        completed: asyncio.Queue[Any],
        namespace: str,
        safety_poll: float,
        pool: ThreadPoolExecutor,
        clock: Clock | None = None,
        admit: Admission | None = None,
        worker_id: Callable[[], int | None] = lambda: None,
        lock_store: LockStore | None = None,
    ) -> None:
        self.handlers = handlers
        self.policies = policies
        self.registry = registry
        self.permits = permits
        self.claimed = claimed
        self.completed = completed
        self.namespace = namespace
        self.safety_poll = safety_poll
        self.pool = pool
        self.clock = clock or Clock()
        self.admit = admit
        self.worker_id = worker_id
        self.lock_store = lock_store
        self._warned_kinds: set[str] = set()

    async def run(self) -> None:
        while True:
            entry = await self.claimed.get()
            self.claimed.task_done()
            if entry is None:
                return
            await self.run_once(entry)

    async def run_once(self, entry: Entry) -> None:
        if entry.fired(self.clock.now()):
            # Its deadline fired before it started (or it was handed back): the row is no
            # longer safely ours, so nothing is written and recovery or the hand-back owns it.
            self.registry.remove(entry.key)
            self.permits.release(1)
            return
        try:
            completion = await self._complete(entry)
        except Exception as exc:
            # A fault of acta's own (admission's database call, say), not the handler's:
            # the attempt still ends in a completion, under the budget.
            log.bind(event="executor_error", job_id=entry.job.id).exception(
                "job {}: the executor failed around its handler", entry.job.id
            )
            policy = self.policies(entry.job.kind)
            completion = failed(entry.job, policy, Outcome.FAILED, _error_fields(exc), None)
        entry.state = EntryState.FINALIZING
        try:
            self.completed.put_nowait(completion)
        except asyncio.QueueFull:
            await self.completed.put(completion)  # the finalizer is behind: wait for room
        # Only now: a permit stands for a claim not yet handed to the finalizer, so a full
        # Completed channel stops intake instead of growing memory.
        self.permits.release(1)

    async def _complete(self, entry: Entry) -> Completion:
        job = entry.job
        handler = self.handlers.get(job.kind)
        if handler is None:
            if job.kind not in self._warned_kinds:
                self._warned_kinds.add(job.kind)
                log.bind(event="no_handler", kind=job.kind).warning(
                    "no handler for kind {!r} in this worker; handing its jobs back "
                    "(due again in {:g}s)",
                    job.kind,
                    self.safety_poll,
                )
            return handback(job, self.safety_poll)
        if self.admit is not None:
            bounced = await self.admit(entry)
            if bounced is not None:
                return bounced
        return await self._run_handler(entry, handler)

    async def _run_handler(self, entry: Entry, handler: Handler[Any, Any]) -> Completion:
        job = entry.job
        policy = self.policies(job.kind)
        try:
            kwargs = handler.load_args(job.args_json)
        except Exception as exc:
            # Args that no longer fit the handler's signature will not fit on a retry.
            return failed(job, policy, Outcome.FAIL, _error_fields(exc), None)
        ctx = Context(
            job_id=job.id,
            kind=job.kind,
            args_json=job.args_json,
            attempt=job.attempts,
            execution_id=job.execution_id,
            namespace=self.namespace,
            worker_id=self.worker_id(),
            _locker=Locker(self.lock_store, entry, self.clock) if self.lock_store else None,
        )
        now = self.clock.now()
        entry.started = now
        entry.timeout_at = now + policy.timeout
        entry.state = EntryState.EXECUTING
        result: Any = None
        error: BaseException | None = None
        task = asyncio.current_task()
        assert task is not None
        cancelling = task.cancelling()
        # The registry's alarm cancels this task at min(deadline, timeout_at) and sets
        # entry.expired; a heartbeat that fires the entry does the same at once.
        self.registry.arm(entry, task)
        try:
            if handler.is_async:
                result = await handler.fn(ctx, **kwargs)
            else:
                call = functools.partial(handler.fn, ctx, **kwargs)
                result = await asyncio.get_running_loop().run_in_executor(self.pool, call)
        except asyncio.CancelledError as exc:
            if entry.expired:
                error = exc  # the alarm's (or a fire's) cancel: reported by _stopped
            elif task.cancelling() <= cancelling:
                # The handler raised it itself (or awaited something cancelled): a failure.
                error = exc
            else:
                self._interrupted(entry, policy, exc, now)
                raise
        except BaseException as exc:  # a handler must never take the worker down
            error = exc
        finally:
            self.registry.disarm(entry)
        if entry.expired and task.uncancel() > cancelling:
            # The executor task itself is also being cancelled (the loop is going down).
            exc = asyncio.CancelledError()
            self._interrupted(entry, policy, exc, now)
            raise exc
        ran = self.clock.now() - now
        if entry.expired:
            return self._stopped(entry, policy, ran)
        if error is None:
            try:
                return succeeded(job, encode_result(result), ran)
            except ValueError as exc:
                return failed(job, policy, Outcome.FAILED, _error_fields(ResultError(exc)), ran)
        if isinstance(error, Retry):
            return failed(
                job, policy, Outcome.RETRY, _error_fields(error), ran, retry_after=error.after
            )
        if isinstance(error, Fail):
            return failed(job, policy, Outcome.FAIL, _error_fields(error), ran)
        if isinstance(error, Cancel):
            return failed(job, policy, Outcome.CANCELLED, _error_fields(error), ran)
        return failed(job, policy, Outcome.FAILED, _error_fields(error), ran)

    def _interrupted(
        self, entry: Entry, policy: Policy, exc: BaseException, started: float
    ) -> None:
        """The executor task itself is being cancelled (the loop is going down): hand the
        completion over before the cancel goes through."""
        ran = self.clock.now() - started
        with contextlib.suppress(asyncio.QueueFull):  # else: recovered by lease
            self.completed.put_nowait(
                failed(entry.job, policy, Outcome.INTERRUPTED, _error_fields(exc), ran)
            )
        entry.state = EntryState.FINALIZING
        self.permits.release(1)

    def _stopped(self, entry: Entry, policy: Policy, ran: float) -> Completion:
        """The attempt's alarm rang (or it was fired): say why, as its completion."""
        job = entry.job
        reason = entry.stop_reason
        if reason is None:
            # The alarm rang at the earlier of the two; which one is decided by comparing
            # them, not by reading the clock again (uvloop rounds timers to milliseconds and
            # its clock may read a hair before the deadline that fired).
            reason = Outcome.TIMEOUT if entry.timeout_at <= entry.deadline else Outcome.LEASE_LOST
        messages = {
            Outcome.TIMEOUT: f"execution timeout: the attempt ran past {policy.timeout:g}s",
            Outcome.LEASE_LOST: "the attempt deadline passed without a confirmed lease renewal",
            Outcome.LOCK_LOST: "a named lock the attempt held was not renewed",
            Outcome.CANCELLED: "cancelled on request",
            Outcome.INTERRUPTED: "interrupted by the worker's shutdown; retried uncharged",
        }
        error = ("acta." + reason.value, messages.get(reason, reason.value), "")
        if reason in (Outcome.LEASE_LOST, Outcome.LOCK_LOST):
            # Written anyway: if the row is still ours the write applies (a failed attempt);
            # if another worker took it, the fence makes it a no-op.
            return failed(job, policy, Outcome.FAILED, error, ran)
        return failed(job, policy, reason, error, ran)
