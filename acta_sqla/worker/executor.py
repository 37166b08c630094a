"""Executors: run handlers for claimed entries and turn every ending into a completion.

Whatever a handler does (returns, raises, hangs past its timeout, is cancelled, returns
garbage), the executor builds a completion and hands it to the finalizer, and only then
returns its permit: no row is ever stranded in ``executing`` by the worker's own code.

Sync (``def``) handlers run in the worker's thread pool, and a thread cannot be killed.
When a sync attempt is asked to stop (its timeout, its attempt deadline, an operator's
cancel, the shutdown) while its thread still runs, the executor raises ``ctx.should_stop``
and then waits for the thread: the completion is not written, the row stays in the
registry (so the heartbeat keeps renewing it) and the permit stays taken until the thread
returns; then the attempt is recorded by why it was stopped (a timeout: a failure under
the budget), with its true run time. Writing the timeout at once let the retry start,
even in the same worker, while the first thread still ran: two runs of one job at once
(I4). Bounded: the row is renewed for at most the kind's timeout plus one lease after the
stop (:func:`overrun_cap`); past that, the registry lets go of it and its lease runs out,
so a thread that never returns holds its job for a bounded time (another run may then
start while it runs on, after the earlier lease ran out: I4 as written), while its permit
stays taken (one executor fewer) until it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loguru import logger

from .. import _faults as faults
from .. import metrics, tracing
from ..app import Handler
from ..context import Context
from ..errors import Cancel, Fail, InvalidJob, Retry
from ..policy import Policy
from ..settings import MAX_RESULT_BYTES, ActaSettings, Timings
from ..values import ClaimedJob, Completion, Outcome
from ..waits import (
    WaitForChildren,
    WaitForSignal,
    children_from_json,
    has_lanes,
    held_lane,
)
from . import completions
from .clock import Clock
from .completions import error_fields
from .inflight import Entry, EntryState, Permits, Registry
from .locks import Locker, LockStore

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

log = logger.bind(stage="executor")

Admission = Callable[[Entry], Awaitable[Completion | None]]
"""Admission before the handler (concurrency slot, rate meter): None admits the entry, a
completion bounces it."""


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


DEFAULT_LEASE_SECONDS = Timings.from_heartbeat(
    ActaSettings.model_fields["heartbeat_interval"].default
).lease


def overrun_cap(policy: Policy, lease: float) -> float:
    """How long after a sync attempt was asked to stop its row is still renewed while its
    thread runs on: as long again as the kind's timeout (a handler that is merely slow
    finishes cleanly, and nothing else runs the job meanwhile), plus one lease (so that even
    a tiny timeout leaves a slow return time to land before the row is let go)."""
    return policy.timeout + lease


@dataclass(slots=True)
class SyncCall:
    """A sync handler's call in the thread pool, and its attempt's stop flag."""

    thread: Future[Any]
    stop: threading.Event

    def running(self) -> bool:
        """True while the handler's thread has not returned (a call still queued in the pool
        and cancelled is done)."""
        return not self.thread.done()


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
        lease: float = DEFAULT_LEASE_SECONDS,
        children_of: Callable[[int], Awaitable[str | None]] | None = None,
        lanes_held_above: Callable[[int], Awaitable[list[tuple[str, str]]]] | None = None,
        chain: Callable[[ClaimedJob, Completion], Completion] | None = None,
        tracer: Tracer | None = None,
        job_metrics: bool = False,
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
        self.lease = lease
        """The worker's lease (from its heartbeat interval): part of the overrun cap."""
        self.children_of = children_of
        self.lanes_held_above = lanes_held_above
        """The lanes a job's waiting ancestors hold (None: no database): asked only when a
        job that is itself a child spawns children with lanes."""
        self.chain = chain
        self.tracer = tracer
        """The attempt spans' tracer; None without an OpenTelemetry SDK (no span work). The
        worker asks once at start (``tracing.worker_tracer``) for all its executors."""
        self.job_metrics = job_metrics
        """Record per-job histograms (duration, queue wait): only with a metrics SDK."""
        """Adds a schedule's next fire to a fire's completion (None: no schedules here)."""
        """Reads ``ctx.children`` for a run that follows a wait (None: no database)."""
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
            self._skip(entry)
            return
        try:
            completion = await self._complete(entry)
            if completion is None:
                self._skip(entry)
                return
        except Exception as exc:
            # A fault of acta's own (admission's database call, say), not the handler's:
            # the attempt still ends in a completion, under the budget.
            log.bind(event="executor_error", job_id=entry.job.id).exception(
                "job {}: the executor failed around its handler", entry.job.id
            )
            policy = self.policies(entry.job.kind)
            completion = completions.failed(entry.job, policy, error_fields(exc), None)
        if self.job_metrics:
            metrics.record_job(self.namespace, entry.job, completion)
        if entry.job.schedule_name is not None and self.chain is not None:
            completion = self.chain(entry.job, completion)
        entry.state = EntryState.FINALIZING
        try:
            self.completed.put_nowait(completion)
        except asyncio.QueueFull:
            await self.completed.put(completion)  # the finalizer is behind: wait for room
        # Only now: a permit stands for a claim not yet handed to the finalizer, so a full
        # Completed channel stops intake instead of growing memory.
        self.permits.release(1)

    def _skip(self, entry: Entry) -> None:
        """An attempt asked to stop (or past its deadline: lease lost, cancel, hand-back)
        before its handler started: the row is no longer safely ours, so nothing is written
        and recovery or the hand-back owns it."""
        self.registry.remove(entry.key)
        self.permits.release(1)

    async def _complete(self, entry: Entry) -> Completion | None:
        """The attempt's completion; None if it was asked to stop while admission decided
        (the handler never starts: :meth:`_skip`)."""
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
            return completions.handback(job, self.safety_poll)
        if self.admit is not None:
            bounced = await self.admit(entry)
            if bounced is not None:
                return bounced
            if entry.stop_reason is not None:
                # Asked to stop while admission answered (a cancel, a lost lease): the
                # heartbeat renews it no more and no alarm would be armed for it, so its
                # handler must not start. A slot it took is freed when the row leaves
                # 'executing' (recovery). (A deadline that passed meanwhile needs no check:
                # the alarm armed at the start rings at once.)
                return None
        return await self._run_handler(entry, handler)

    async def _run_handler(self, entry: Entry, handler: Handler[Any, Any]) -> Completion:
        if self.tracer is None:
            return await self._run_attempt(entry, handler)
        with tracing.job_span(self.tracer, entry.job, self.namespace) as span:
            completion = await self._run_attempt(entry, handler)
            tracing.end_job_span(span, completion)
            return completion

    async def _run_attempt(self, entry: Entry, handler: Handler[Any, Any]) -> Completion:
        job = entry.job
        policy = self.policies(job.kind)
        try:
            kwargs = handler.load_args(job.args_json)
        except Exception as exc:
            # Args that no longer fit the handler's signature will not fit on a retry.
            return completions.fail_now(job, error_fields(exc), None)
        children: tuple[Any, ...] = ()
        if job.resumed is not None and self.children_of is not None:
            # Only a run that follows a wait reads its children (one indexed read).
            children = children_from_json(await self.children_of(job.id))
        # A sync handler's stop flag (``ctx.should_stop``): its thread cannot be cancelled.
        stop = None if handler.is_async else threading.Event()
        ctx = Context(
            job_id=job.id,
            kind=job.kind,
            args_json=job.args_json,
            attempt=job.attempts,
            execution_id=job.execution_id,
            namespace=self.namespace,
            worker_id=self.worker_id(),
            resumed=job.resumed,
            scheduled_at=job.scheduled_at,
            children=children,
            signals_json=job.signals_json,
            trace_id=tracing.trace_id(job.trace_context),
            _locker=Locker(self.lock_store, entry, self.clock) if self.lock_store else None,
            _stop=stop,
        )
        now = self.clock.now()
        entry.started = now
        entry.timeout_at = now + policy.timeout
        entry.state = EntryState.EXECUTING
        result: Any = None
        error: BaseException | None = None
        call: SyncCall | None = None
        task = asyncio.current_task()
        assert task is not None
        cancelling = task.cancelling()
        # The registry's alarm cancels this task at min(deadline, timeout_at) and sets
        # entry.expired; a heartbeat that fires the entry does the same at once.
        self.registry.arm(entry, task)
        if faults.active is not None:  # tests only (acta_sqla.testing.faults)
            await faults.active.reached("in_handler")
        try:
            if handler.is_async:
                result = await handler.fn(ctx, **kwargs)
            else:
                assert stop is not None
                call_fn = functools.partial(handler.fn, ctx, **kwargs)
                if self.tracer is not None:  # the attempt's span, current in the thread too
                    call_fn = functools.partial(contextvars.copy_context().run, call_fn)
                thread = self.pool.submit(call_fn)
                call = SyncCall(thread, stop)
                result = await self._wait_thread(entry, call, policy)
        except asyncio.CancelledError as exc:
            if entry.expired:
                error = exc  # the alarm's (or a fire's) cancel: reported by _stopped
            elif task.cancelling() <= cancelling:
                # The handler raised it itself (or awaited something cancelled): a failure.
                error = exc
            else:
                self._interrupted(entry, exc, now, call)
                raise
        except BaseException as exc:  # a handler must never take the worker down
            error = exc
        finally:
            self.registry.disarm(entry)
        if entry.expired and task.uncancel() > cancelling:
            # The executor task itself is also being cancelled (the loop is going down).
            exc = asyncio.CancelledError()
            self._interrupted(entry, exc, now, call)
            raise exc
        ran = self.clock.now() - now
        if entry.expired:
            return self._stopped(entry, policy, ran)
        if error is None:
            if isinstance(result, WaitForSignal):
                return completions.wait_for_signal(job, result.name, result.timeout, ran)
            if isinstance(result, WaitForChildren):
                own = [(self.namespace, job.lane_key)] if job.lane_key is not None else []
                stranded = held_lane(own, result.rows, "its parent")
                if (
                    stranded is None
                    and job.parent_id is not None  # a child spawning children with lanes
                    and self.lanes_held_above is not None
                    and has_lanes(result.rows)
                ):
                    above = await self.lanes_held_above(job.parent_id)
                    stranded = held_lane(above, result.rows, "an ancestor of its parent")
                if stranded is None:
                    return completions.wait_for_children(job, result.rows, ran)
                return completions.failed(job, policy, error_fields(InvalidJob(stranded)), ran)
            try:
                return completions.succeeded(job, encode_result(result), ran)
            except ValueError as exc:
                return completions.failed(job, policy, error_fields(ResultError(exc)), ran)
        if isinstance(error, Retry):
            return completions.retry_at(job, policy, error_fields(error), ran, error.after)
        if isinstance(error, Fail):
            return completions.fail_now(job, error_fields(error), ran)
        if isinstance(error, Cancel):
            return completions.cancelled(job, error_fields(error), ran)
        return completions.failed(job, policy, error_fields(error), ran)

    async def _wait_thread(self, entry: Entry, call: SyncCall, policy: Policy) -> Any:
        """The sync handler's result, once its thread returns.

        Asked to stop (the alarm rang or the attempt was fired: this task is cancelled with
        ``entry.expired`` set) while the thread runs, the attempt is held until the thread
        returns (see the module's docstring); then the stop's ``CancelledError`` is raised
        again, so the attempt ends as :meth:`_stopped` says. Cancelled while waiting (the
        loop is going down), the cancel goes through at once."""
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wrap_future(call.thread, loop=loop)
        except asyncio.CancelledError:
            call.thread.cancel()  # a call still queued in the pool never starts
            if not entry.expired or not call.running():
                raise
            await self._overrun(entry, call, policy)
            raise

    async def _overrun(self, entry: Entry, call: SyncCall, policy: Policy) -> None:
        """Hold a sync attempt that was asked to stop until its thread returns."""
        call.stop.set()
        # Why it stopped is decided now: renewals during the overrun move the deadline on,
        # and a later cancel or shutdown must not rewrite a timeout (a cancel request still
        # wins over the retry when the completion is written).
        entry.stop_reason = self._reason(entry)
        asked = self.clock.now()
        cap = overrun_cap(policy, self.lease)
        entry.overrun_until = asked + cap
        job = entry.job
        log.bind(event="sync_overrun", job_id=job.id, kind=job.kind).warning(
            "job {} ({}): the sync handler was asked to stop ({}) but is still running, and "
            "a thread cannot be killed: the job stays held (no retry starts, its lease is "
            "renewed for up to {:g}s more) and keeps one of this worker's executors until "
            "the handler returns. Long sync handlers should poll ctx.should_stop",
            job.id,
            job.kind,
            _why(entry.stop_reason, policy),
            cap,
        )
        timer = self.clock.call_at(entry.overrun_until, lambda: self._let_go(entry, cap))
        try:
            await asyncio.wait((asyncio.wrap_future(call.thread, loop=asyncio.get_running_loop()),))
        finally:
            timer.cancel()
        log.bind(event="sync_overrun_ended", job_id=job.id, kind=job.kind).info(
            "job {} ({}): the sync handler returned {:.1f}s after it was asked to stop",
            job.id,
            job.kind,
            self.clock.now() - asked,
        )

    def _let_go(self, entry: Entry, cap: float) -> None:
        """The overrun cap passed with the thread still running: the registry lets go of the
        row (the heartbeat no longer renews it), so its lease runs out and recovery takes it
        back. The permit stays taken until the thread returns."""
        if entry.state is not EntryState.EXECUTING:
            return
        self.registry.remove(entry.key)
        log.bind(event="sync_overrun_let_go", job_id=entry.job.id, kind=entry.job.kind).warning(
            "job {} ({}): the sync handler is still running {:g}s after it was asked to stop: "
            "its lease is no longer renewed, so recovery takes the job back when the lease "
            "runs out and it may run again while this thread runs on; the thread keeps one "
            "of this worker's executors until it returns",
            entry.job.id,
            entry.job.kind,
            cap,
        )

    def _interrupted(
        self, entry: Entry, exc: BaseException, started: float, call: SyncCall | None = None
    ) -> None:
        """The executor task itself is being cancelled (the loop is going down): hand the
        completion over before the cancel goes through.

        Not while a sync handler's thread still runs: an uncharged completion, due at once,
        would let the job run again while the thread runs on. Its row is left to its lease
        instead (renewals end now); the process is going down, and the thread with it."""
        if call is not None and call.running():
            call.stop.set()
            entry.overrun_until = self.clock.now()
            if entry.stop_reason is None:
                entry.stop_reason = Outcome.INTERRUPTED
            self.permits.release(1)
            log.bind(event="sync_left_running", job_id=entry.job.id, kind=entry.job.kind).warning(
                "job {} ({}): the worker is stopping while the sync handler still runs (a "
                "thread cannot be killed): no completion is written, and the job comes back "
                "through recovery once its lease runs out",
                entry.job.id,
                entry.job.kind,
            )
            return
        ran = self.clock.now() - started
        with contextlib.suppress(asyncio.QueueFull):  # else: recovered by lease
            self.completed.put_nowait(completions.interrupted(entry.job, error_fields(exc), ran))
        entry.state = EntryState.FINALIZING
        self.permits.release(1)

    def _stopped(self, entry: Entry, policy: Policy, ran: float) -> Completion:
        """The attempt's alarm rang (or it was fired): say why, as its completion."""
        return completions.stopped(entry.job, policy, self._reason(entry), ran)

    @staticmethod
    def _reason(entry: Entry) -> Outcome:
        """Why the attempt was asked to stop: fired for a reason, or its alarm rang."""
        if entry.stop_reason is not None:
            return entry.stop_reason
        # The alarm rang at the earlier of the two; which one is decided by comparing
        # them, not by reading the clock again (uvloop rounds timers to milliseconds and
        # its clock may read a hair before the deadline that fired).
        return Outcome.TIMEOUT if entry.timeout_at <= entry.deadline else Outcome.LEASE_LOST


def _why(reason: Outcome, policy: Policy) -> str:
    if reason is Outcome.TIMEOUT:
        return f"its {policy.timeout:g}s execution timeout passed"
    return {
        Outcome.LEASE_LOST: "its lease was not confirmed in time",
        Outcome.LOCK_LOST: "a named lock it held was lost",
        Outcome.CANCELLED: "the job was cancelled",
        Outcome.INTERRUPTED: "the worker is stopping",
    }.get(reason, reason.value)


class Executors:
    """The N executor loops as one stage, with the claimer's and heartbeat's lifecycle:
    ``start()`` creates one task per executor, ``stop()`` (idempotent) ends them, and a
    test drives one entry through one executor with ``Executor.run_once``."""

    def __init__(self, executors: Sequence[Executor], claimed: asyncio.Queue[Entry | None]):
        self.executors = tuple(executors)
        self.claimed = claimed
        self._tasks: tuple[asyncio.Task[None], ...] = ()
        self._stopped = False

    @property
    def tasks(self) -> tuple[asyncio.Task[None], ...]:
        """The running loops' tasks (empty before ``start``)."""
        return self._tasks

    def start(self, on_ended: Callable[[asyncio.Task[Any]], None] | None = None) -> None:
        """One task per executor, named ``acta-executor-<i>``; ``on_ended`` is called when
        one ends (the supervisor tells a crash from the plan)."""
        if self._tasks or self._stopped:
            return
        self._tasks = tuple(
            asyncio.create_task(e.run(), name=f"acta-executor-{i}")
            for i, e in enumerate(self.executors)
        )
        if on_ended is not None:
            for task in self._tasks:
                task.add_done_callback(on_ended)

    async def stop(self, seconds: float) -> int:
        """End every loop: one ``None`` per executor on the Claimed channel (each returns
        once it has finished the entry in hand), then, after ``seconds``, cancel
        those still running (a cancelled attempt hands over an interrupted completion,
        unless its sync handler's thread still runs: that row is left to its lease).
        Returns how many had to be cancelled. Idempotent: a second call returns 0."""
        if self._stopped:
            return 0
        self._stopped = True
        if not self._tasks:
            return 0
        for _ in self._tasks:
            self.claimed.put_nowait(None)
        _done, stuck = await asyncio.wait(self._tasks, timeout=seconds)
        for task in stuck:
            task.cancel()
        return len(stuck)
