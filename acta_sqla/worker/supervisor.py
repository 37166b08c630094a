"""The supervisor: wires the stages and owns the start order.

Start: database (the embedded default is started and migrated on first use), worker row,
definitions, schedules (``worker/startup.py``), LISTEN, then finalizer, executors,
heartbeat, the lifeline thread and claimer -- consumers before producers, so nothing is
produced that no one takes.

Stop (SIGTERM/SIGINT): the graceful sequence of ``worker/shutdown.py``; a second signal
cancels running handlers (:meth:`Worker.force`).
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from loguru import logger

from .. import _faults as faults
from .. import metrics, tracing
from ..app import Acta
from ..errors import ConfigurationError, StoreUnavailable
from ..listener import Listener
from ..policy import Policy
from ..settings import (
    BATCH_MAX_COMPLETIONS,
    DEFAULT_GRACE_SECONDS,
    ActaSettings,
    load_settings,
)
from ..store import WorkerStore, app_name
from ..values import Completion
from . import shutdown as stopping
from . import startup
from .admission import Admission
from .breakers import Breakers
from .claimer import Claimer
from .clock import Clock
from .executor import Executor, ExecutorConfig, Executors
from .finalizer import Finalizer
from .fires import Fires
from .heartbeat import Heartbeat
from .inflight import Entry, Permits, Registry
from .lifeline import Lifeline
from .recovery import run_recovery

log = logger.bind(stage="worker")


class Worker:
    """One worker process's pipeline for one namespace.

    ``burst=True`` stops by itself once no job is due and nothing is in flight (used by
    ``acta worker --burst`` and :func:`acta_sqla.testing.drain`).
    """

    def __init__(
        self,
        acta: Acta,
        settings: ActaSettings | None = None,
        *,
        grace: float = DEFAULT_GRACE_SECONDS,
        burst: bool = False,
        clock: Clock | None = None,
        recover_first: bool = False,
    ) -> None:
        self.acta = acta
        self.settings = settings or load_settings(namespace=acta.namespace)
        if self.settings.namespace != acta.namespace:
            raise ConfigurationError(
                f"the worker was given namespace {self.settings.namespace!r} but the app's Acta "
                f"is for {acta.namespace!r}: a worker serves its app's namespace "
                f"(Acta(namespace=...)); leave --namespace out or give {acta.namespace!r}"
            )
        self.namespace = acta.namespace
        self.grace = grace
        self.burst = burst
        self.recover_first = recover_first
        """Run a recovery pass before the first claim (``testing.drain``: a lease a test
        expired is taken back by the next drain)."""
        self.killed = False
        """Set by :meth:`kill` (``acta_sqla.testing.faults.crash_at``)."""
        self.clock = clock or Clock()
        self.timings = self.settings.timings
        self.executors_count = self.settings.executors
        self.registry = Registry(self.clock)
        self.permits = Permits(self.executors_count)
        self.claimed: asyncio.Queue[Entry | None] = asyncio.Queue(maxsize=self.executors_count)
        # Room for a full batch and the executors behind it; when it fills, intake stops.
        self.completed: asyncio.Queue[Completion | None] = asyncio.Queue(
            maxsize=BATCH_MAX_COMPLETIONS + self.executors_count
        )
        self.policies: dict[str, Policy] = {k: h.policy for k, h in acta.handlers.items()}
        self.definitions_version = -1
        self.breakers: Breakers | None = None
        """Circuit breakers' outcomes (made at start, with the store)."""
        self.store: WorkerStore | None = None
        self.worker_id: int | None = None
        self.started = asyncio.Event()
        """Set once the schema is checked and the worker row registered (``worker_id`` is
        known): what an embedding waits on before it counts the worker as up."""
        self.stopped = asyncio.Event()
        self._stop_requested = asyncio.Event()
        self._force = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._background: set[asyncio.Task[Any]] = set()
        self._recovering = False
        self.crashed = False
        self.stubborn: list[Entry] = []
        """Attempts whose handlers ignored their cancel at shutdown (left to their lease)."""
        self.fires = Fires(acta.schedules, self.namespace, self._spawn)
        self._pool = ThreadPoolExecutor(
            max_workers=self.executors_count, thread_name_prefix="acta-sync"
        )

    def policy(self, kind: str) -> Policy:
        found = self.policies.get(kind)
        if found is None:
            handler = self.acta.handlers.get(kind)
            found = handler.policy if handler is not None else Policy()
        return found

    # ------------------------------------------------------------------ start

    async def start(self) -> None:
        self.store = store = await startup.connect(self.settings, self.namespace, self.timings)
        # Before the stages warm up: they prepare the claim this worker will run.
        # Which telemetry SDKs the process has, asked once for the store and the executors.
        store.measure_depth = metered = metrics.sdk_configured()
        tracer = tracing.worker_tracer()
        store.telemetry = metered or tracer is not None
        await startup.register(self, store)
        metrics.watch_registry(self.registry, self.namespace)
        self.finalizer = Finalizer(
            store, self.registry, self.completed, self.clock, on_written=self._on_written
        )
        if self._force.is_set():
            self.finalizer.give_up()
        self.claimer = Claimer(
            store,
            self.registry,
            self.permits,
            self.claimed,
            self.timings,
            self.settings.safety_poll_interval,
            self.clock,
            on_claim=lambda n, s: metrics.record_claim(self.namespace, n, s),
            on_idle=self.finalizer.flush,
        )
        # Concurrency slots and rate meters; plain jobs never reach the database here.
        self.breakers = Breakers(store, self.namespace)
        self.admission = Admission(store, self.policy, self.namespace, breakers=self.breakers)
        config = ExecutorConfig(
            self.acta.handlers,
            self.policy,
            self.namespace,
            self.settings.safety_poll_interval,
            self._pool,
            lease=self.timings.lease,
            admit=self.admission,
            worker_id=lambda: self.worker_id,
            chain=self.fires.chain if self.acta.schedules else None,
            tracer=tracer,
            job_metrics=metered,
        )
        self.executors = Executors(
            [
                Executor(
                    config,
                    self.registry,
                    self.permits,
                    self.claimed,
                    self.completed,
                    store,
                    self.clock,
                )
                for _ in range(self.executors_count)
            ],
            self.claimed,
        )
        self.heartbeat = Heartbeat(
            store,
            self.registry,
            self.timings,
            self.clock,
            on_definitions=self._on_definitions,
            on_recovery_due=self._on_recovery_due,
            on_depth=lambda rows: metrics.record_depth(
                self.namespace, rows, self.timings.heartbeat
            ),
            on_silence=self._on_silence,
        )
        # Renews the leases from a thread of its own while a handler blocks the loop.
        self.lifeline = Lifeline(
            self.registry,
            self.timings,
            store.twin,
            self.clock,
            namespace=self.namespace,
            recover=functools.partial(run_recovery, prune_budget=self.timings.prune_budget),
            on_renewed=self.heartbeat.renewed_outside,
        )
        self._listen()
        if self.recover_first:
            await self._recover()
        self.finalizer.start(on_ended=self._stage_ended)
        self.executors.start(on_ended=self._stage_ended)
        self.heartbeat.start(on_ended=self._stage_ended)
        self.lifeline.start()
        self.claimer.start(on_ended=self._stage_ended)
        log.bind(event="worker_started", worker_id=self.worker_id).info(
            "worker {} started: namespace {!r}, {} executors, kinds {}",
            self.worker_id,
            self.namespace,
            self.executors_count,
            sorted(self.acta.handlers),
        )

    # ------------------------------------------------------------------ run and stop

    def request_stop(self) -> None:
        """The first SIGTERM/SIGINT: stop gracefully."""
        self._stop_requested.set()

    def force(self) -> None:
        """The second signal: cancel running handlers now (their jobs are retried), and
        repeat no failed completion write (its rows come back through recovery)."""
        self._stop_requested.set()
        self._force.set()
        finalizer = getattr(self, "finalizer", None)  # None while still starting
        if finalizer is not None:
            finalizer.give_up()

    async def run(self) -> None:
        """Start, run until a stop is requested (or, in burst mode, until idle), stop."""
        token = faults.current.set(self)  # the stages' tasks inherit it (fault injection)
        try:
            await self._run()
        finally:
            faults.current.reset(token)

    async def _run(self) -> None:
        try:
            await self.start()
        except StoreUnavailable:
            if self._stop_requested.is_set():
                self.stopped.set()
                return
            raise
        try:
            if self.burst:
                await stopping.wait_burst_done(self)
            else:
                await self._stop_requested.wait()
        finally:
            if self.killed:
                await stopping.bury(self)
            else:
                await self.shutdown()

    def kill(self) -> None:
        """Stop dead, as SIGKILL stops ``acta worker`` (``worker/shutdown.py``)."""
        stopping.kill(self)

    async def shutdown(self) -> None:
        """The graceful stop (``worker/shutdown.py``)."""
        await stopping.shutdown(self)

    # ------------------------------------------------------------------ callbacks

    def _stage_ended(self, task: asyncio.Task[Any]) -> None:
        # A stage that ends on its own while the worker runs is a bug in acta: stop the
        # worker loudly (exit status 1) rather than live on as a zombie that holds leases
        # and claims nothing. Its rows come back through recovery.
        if task.cancelled() or self._stop_requested.is_set():
            return
        exc = task.exception()
        log.bind(event="stage_died").opt(exception=exc).critical(
            "{} ended unexpectedly ({}); stopping the worker",
            task.get_name(),
            exc or "returned",
        )
        self.crashed = True
        self.force()

    def _on_written(self, batch: Any, applied: set[int], seconds: float) -> None:
        metrics.record_batch(self.namespace, batch, applied, seconds)
        if self.breakers is not None:
            self.breakers.written(batch, applied)
        delays = [c.delay for c in batch if c.status == "ready" and c.job_id in applied]
        if delays:
            soonest = min(delays)
            if soonest <= 0:
                self.claimer.wake()
            elif soonest < self.settings.safety_poll_interval:
                self.claimer.wake_after(soonest)

    def _on_definitions(self, version: int) -> None:
        if version != self.definitions_version:
            self._spawn(self.reload_definitions())

    def _listen(self) -> None:
        assert self.store is not None
        self.listener = Listener(self.store.dsn, self.store.channel, self.claimer.wake)
        self.listener.application_name = app_name("listen", self.worker_id)
        self.listener.start()

    def _on_silence(self, seconds: float) -> None:
        self._spawn(startup.register_again(self, seconds))

    def _on_recovery_due(self) -> None:
        if not self._recovering:
            self._spawn(self._recover())

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _recover(self) -> None:
        assert self.store is not None
        self._recovering = True
        try:
            await run_recovery(self.store, self.timings.prune_budget)
            # A chain broken by a path that wrote no completion of a fire (an operator's
            # cancel of a pending fire, a fire failed by recovery).
            await self.fires.ensure()
        except Exception as exc:
            log.bind(event="recovery_failed").warning("recovery pass failed: {}", exc)
        finally:
            self._recovering = False

    async def reload_definitions(self) -> None:
        """Load the stored definitions, apply them (``worker/startup.py``)."""
        await startup.reload_definitions(self)
