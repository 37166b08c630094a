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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from loguru import logger

from ..app import Handler
from ..context import Context
from ..errors import Cancel, Fail, Retry
from ..policy import Policy
from ..settings import MAX_RESULT_BYTES
from ..values import Completion, Outcome
from . import completions
from .clock import Clock
from .completions import error_fields
from .inflight import Entry, EntryState, Permits, Registry
from .locks import Locker, LockStore

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
            completion = completions.failed(entry.job, policy, error_fields(exc), None)
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
            return completions.handback(job, self.safety_poll)
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
            return completions.fail_now(job, error_fields(exc), None)
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
                self._interrupted(entry, exc, now)
                raise
        except BaseException as exc:  # a handler must never take the worker down
            error = exc
        finally:
            self.registry.disarm(entry)
        if entry.expired and task.uncancel() > cancelling:
            # The executor task itself is also being cancelled (the loop is going down).
            exc = asyncio.CancelledError()
            self._interrupted(entry, exc, now)
            raise exc
        ran = self.clock.now() - now
        if entry.expired:
            return self._stopped(entry, policy, ran)
        if error is None:
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

    def _interrupted(self, entry: Entry, exc: BaseException, started: float) -> None:
        """The executor task itself is being cancelled (the loop is going down): hand the
        completion over before the cancel goes through."""
        ran = self.clock.now() - started
        with contextlib.suppress(asyncio.QueueFull):  # else: recovered by lease
            self.completed.put_nowait(completions.interrupted(entry.job, error_fields(exc), ran))
        entry.state = EntryState.FINALIZING
        self.permits.release(1)

    def _stopped(self, entry: Entry, policy: Policy, ran: float) -> Completion:
        """The attempt's alarm rang (or it was fired): say why, as its completion."""
        reason = entry.stop_reason
        if reason is None:
            # The alarm rang at the earlier of the two; which one is decided by comparing
            # them, not by reading the clock again (uvloop rounds timers to milliseconds and
            # its clock may read a hair before the deadline that fired).
            reason = Outcome.TIMEOUT if entry.timeout_at <= entry.deadline else Outcome.LEASE_LOST
        return completions.stopped(entry.job, policy, reason, ran)


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
        those still running (a cancelled attempt hands over an interrupted completion).
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
