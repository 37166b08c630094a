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
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from loguru import logger

from .. import _faults as faults
from .. import metrics, tracing
from ..app import Handler
from ..context import Context
from ..policy import Policy
from ..settings import ActaSettings, Timings
from ..values import ClaimedJob, Completion, Outcome
from ..waits import (
    WaitForChildren,
    children_from_json,
    has_lanes,
    held_lane,
)
from . import completions
from .clock import Clock
from .completions import Ran, error_fields
from .inflight import Entry, EntryState, Permits, Registry
from .locks import Locker, LockStore

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

log = logger.bind(stage="executor")

Admission = Callable[[Entry], Awaitable[Completion | None]]
"""Admission before the handler (concurrency slot, rate meter): None admits the entry, a
completion bounces it."""


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


class ExecutorStore(LockStore, Protocol):
    """The database calls an attempt makes beyond its completion (which the finalizer
    writes): ``ctx.lock``'s named locks, ``ctx.children`` of a run that follows a wait, and
    the lanes a child's waiting ancestors hold (asked only when a child spawns children
    with lanes). ``WorkerStore`` is one; a unit test passes none."""

    async def children_of(self, job_id: int) -> str | None: ...
    async def lanes_held_above(self, job_id: int) -> list[tuple[str, str]]: ...


@dataclass(frozen=True, slots=True)
class ExecutorConfig:
    """What every executor of a worker shares and never changes (the supervisor builds one
    for all its executors)."""

    handlers: Mapping[str, Handler[Any, Any]]
    policies: Callable[[str], Policy]
    """A kind's policy as it stands (the live definitions' reload changes what it answers)."""
    namespace: str
    safety_poll: float
    """The delay of a job handed back for want of a handler."""
    pool: ThreadPoolExecutor
    """Where sync handlers run."""
    lease: float = DEFAULT_LEASE_SECONDS
    """The worker's lease (from its heartbeat interval): part of the overrun cap."""
    admit: Admission | None = None
    """Admission before the handler (None: no keyed kind here, or a unit test)."""
    worker_id: Callable[[], int | None] = lambda: None
    chain: Callable[[ClaimedJob, Completion], Completion] | None = None
    """Adds a schedule's next fire to a fire's completion (None: no schedules here)."""
    tracer: Tracer | None = None
    """The attempt spans' tracer; None without an OpenTelemetry SDK (no span work). The
    worker asks once at start (``tracing.worker_tracer``) for all its executors."""
    job_metrics: bool = False
    """Record per-job histograms (duration, queue wait): only with a metrics SDK."""


class Executor:
    """One of N executor loops; they share the claimed channel and the completed channel.

    Each attempt is run (:meth:`_run`: invoke the handler, report what happened as a
    ``completions.Ran``), then concluded (``completions.conclude``: the decision), as the
    finalizer's ``run_once -> write -> _land`` keeps I/O apart from ``completions``."""

    def __init__(
        self,
        config: ExecutorConfig,
        registry: Registry,
        permits: Permits,
        claimed: asyncio.Queue[Entry | None],
        completed: asyncio.Queue[Any],
        store: ExecutorStore | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.registry = registry
        self.permits = permits
        self.claimed = claimed
        self.completed = completed
        self.store = store
        self.clock = clock or Clock()
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
            policy = self.config.policies(entry.job.kind)
            completion = completions.failed(entry.job, policy, error_fields(exc), None)
        config = self.config
        if config.job_metrics:
            metrics.record_job(config.namespace, entry.job, completion)
        if entry.job.schedule_name is not None and config.chain is not None:
            completion = config.chain(entry.job, completion)
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
        config = self.config
        handler = config.handlers.get(job.kind)
        if handler is None:
            if job.kind not in self._warned_kinds:
                self._warned_kinds.add(job.kind)
                log.bind(event="no_handler", kind=job.kind).warning(
                    "no handler for kind {!r} in this worker; handing its jobs back "
                    "(due again in {:g}s)",
                    job.kind,
                    config.safety_poll,
                )
            return completions.handback(job, config.safety_poll)
        if config.admit is not None:
            bounced = await config.admit(entry)
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
        tracer = self.config.tracer
        if tracer is None:
            return await self._run_attempt(entry, handler)
        with tracing.job_span(tracer, entry.job, self.config.namespace) as span:
            completion = await self._run_attempt(entry, handler)
            tracing.end_job_span(span, completion)
            return completion

    async def _run_attempt(self, entry: Entry, handler: Handler[Any, Any]) -> Completion:
        policy = self.config.policies(entry.job.kind)
        return completions.conclude(entry.job, policy, await self._run(entry, handler, policy))

    async def _run(self, entry: Entry, handler: Handler[Any, Any], policy: Policy) -> Ran:
        """Invoke the handler and report what happened (its result or error, how long it
        ran, why it was asked to stop): no decision. The attempt's alarm is armed for the
        call; a cancel of the executor task itself (the loop going down) hands over an
        interrupted completion and goes through."""
        job = entry.job
        config = self.config
        try:
            kwargs = handler.load_args(job.args_json)
        except Exception as exc:
            return Ran(None, exc, None)
        children: tuple[Any, ...] = ()
        if job.resumed is not None and self.store is not None:
            # Only a run that follows a wait reads its children (one indexed read).
            children = children_from_json(await self.store.children_of(job.id))
        # A sync handler's stop flag (``ctx.should_stop``): its thread cannot be cancelled.
        stop = None if handler.is_async else threading.Event()
        ctx = Context(
            job_id=job.id,
            kind=job.kind,
            args_json=job.args_json,
            attempt=job.attempts,
            execution_id=job.execution_id,
            namespace=config.namespace,
            worker_id=config.worker_id(),
            resumed=job.resumed,
            scheduled_at=job.scheduled_at,
            children=children,
            signals_json=job.signals_json,
            trace_id=tracing.trace_id(job.trace_context),
            _locker=Locker(self.store, entry, self.clock) if self.store is not None else None,
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
                if config.tracer is not None:  # the attempt's span, current in the thread too
                    call_fn = functools.partial(contextvars.copy_context().run, call_fn)
                thread = config.pool.submit(call_fn)
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
            return Ran(result, error, ran, stopped=self._reason(entry))
        if error is None and isinstance(result, WaitForChildren):
            return Ran(result, None, ran, stranded=await self._stranded(job, result))
        return Ran(result, error, ran)

    async def _stranded(self, job: ClaimedJob, wait: WaitForChildren) -> str | None:
        """Why the children ``wait`` spawns would strand a lane (queued behind the parent,
        or behind an ancestor that waits for it); None when they would not."""
        own = [(self.config.namespace, job.lane_key)] if job.lane_key is not None else []
        stranded = held_lane(own, wait.rows, "its parent")
        if (
            stranded is None
            and job.parent_id is not None  # a child spawning children with lanes
            and self.store is not None
            and has_lanes(wait.rows)
        ):
            above = await self.store.lanes_held_above(job.parent_id)
            stranded = held_lane(above, wait.rows, "an ancestor of its parent")
        return stranded

    async def _wait_thread(self, entry: Entry, call: SyncCall, policy: Policy) -> Any:
        """The sync handler's result, once its thread returns.

        Asked to stop (the alarm rang or the attempt was fired: this task is cancelled with
        ``entry.expired`` set) while the thread runs, the attempt is held until the thread
        returns (see the module's docstring); then the stop's ``CancelledError`` is raised
        again, so the attempt ends as its stop's reason says. Cancelled while waiting (the
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
        cap = overrun_cap(policy, self.config.lease)
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
    """The N executor loops as one stage, with every stage's lifecycle (``worker/stage.py``):
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
