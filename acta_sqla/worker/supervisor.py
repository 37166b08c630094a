"""The supervisor: wires the stages, owns the start and stop order.

Start: database (the embedded default is started and migrated on first use), worker row,
definitions, schedules, LISTEN, then finalizer, executors, heartbeat, the lifeline thread
and claimer -- consumers before producers, so nothing is produced that no one takes.

Stop (SIGTERM/SIGINT): stop claiming; hand back claimed-but-unstarted rows uncharged; let
running handlers finish within the grace period (a second signal, or the end of the grace,
cancels them: they are retried uncharged); flush the finalizer; stop the heartbeat (it
renews what is still held until the last write), the lifeline and the listener; mark the
worker stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from loguru import logger

from .. import _faults as faults
from .. import metrics, tracing
from ..app import Acta
from ..database import database_url
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
from ..values import Completion, Outcome
from . import definitions
from .admission import Admission
from .breakers import Breakers
from .claimer import Claimer
from .clock import Clock
from .completions import handback
from .executor import Executor, ExecutorConfig, Executors
from .finalizer import Finalizer
from .fires import Fires
from .heartbeat import Heartbeat
from .inflight import Entry, EntryState, Permits, Registry
from .lifeline import Lifeline
from .recovery import run_recovery
from .stage import Stage

log = logger.bind(stage="worker")

FORCED_STOP_SECONDS = 10.0
"""After handlers are cancelled at shutdown, how long to wait for them to end."""
STUBBORN_WAIT_SECONDS = 1.0
"""Once a handler is known to ignore its cancel, how long the other executors get to end."""
FLUSH_SECONDS = 30.0
"""How long the last completions may keep failing to write before the worker gives up on
them (their rows then come back through recovery); after a second signal a failed write
is not repeated at all."""

BURST_RECHECK = 0.05
"""A burst worker's shortest wait before it looks again for a bounced job that is due."""


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

    async def _connect(self) -> WorkerStore:
        url = await asyncio.to_thread(database_url, self.settings)
        if not self.settings.database_url:
            from .. import migrate

            await asyncio.to_thread(migrate.upgrade, url, "head", self.settings.db_schema)
        return WorkerStore(url, self.settings.db_schema, self.namespace, self.timings)

    async def _register(self, store: WorkerStore) -> None:
        """Register the worker row and store definitions, waiting out a database that is
        down (logging why) until it answers or a stop is requested."""
        delay = 1.0
        while True:
            # The stages' connections open while start-up runs on the admin connection; a
            # role that cannot connect now connects again on first use.
            connecting = store.preconnect()
            try:
                await store.check_schema()
                self.worker_id = await self._register_row(store)
                self.started.set()
                # Not awaited: a statement that waits on a table lock must hold up the
                # first claim (which queues behind it on its connection), not start-up.
                self._spawn(self._warm_stages(store))
                await store.store_definitions(
                    {k: h.policy.to_json() for k, h in self.acta.handlers.items()}
                )
                await self.reload_definitions()
                await self.fires.store_declared(store)
                return
            except StoreUnavailable as exc:
                log.bind(event="database_unavailable").warning(
                    "database unavailable, retrying in {:.0f}s: {}", delay, exc
                )
                if await self.clock.wait(self._stop_requested, delay):
                    raise
                delay = min(delay * 2, 30.0)
            finally:
                await connecting

    async def start(self) -> None:
        self.store = store = await self._connect()
        # Before the stages warm up: they prepare the claim this worker will run.
        # Which telemetry SDKs the process has, asked once for the store and the executors.
        store.measure_depth = metered = metrics.sdk_configured()
        tracer = tracing.worker_tracer()
        store.telemetry = metered or tracer is not None
        await self._register(store)
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
            recover=run_recovery,
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
                await self._wait_burst_done()
            else:
                await self._stop_requested.wait()
        finally:
            if self.killed:
                await self._bury()
            else:
                await self.shutdown()

    def kill(self) -> None:
        """Stop dead, as SIGKILL stops ``acta worker`` (``testing.faults.crash_at``): every
        stage is cancelled where it stands and every connection is cut at once, so nothing
        more is written: no hand-back, no completion, no stop of the worker row. The rows
        it held stay ``executing`` until their leases run out and recovery takes them
        back. (A sync handler's thread cannot be killed: it runs on, unheard.)"""
        if self.killed:
            return
        self.killed = True
        self._stop_requested.set()  # stages ending now is the plan, not a crash
        self._force.set()
        tasks: list[asyncio.Task[Any] | None] = [
            *(t for stage in self._stages() for t in stage.tasks),
            getattr(getattr(self, "listener", None), "_task", None),
            *self._background,
        ]
        for task in tasks:
            if task is not None:
                task.cancel()
        if self.store is not None:
            for rc in self.store._roles():
                rc._drop()  # terminate: the server rolls back whatever was open
        listener = getattr(self, "listener", None)
        if listener is not None and listener._conn is not None:
            listener._conn.terminate()
        log.bind(event="worker_killed", worker_id=self.worker_id).warning(
            "worker {} killed (fault injection): nothing more is written",
            self.worker_id,
        )

    def _stages(self) -> list[Stage]:
        """The stages built so far (a kill may come before the start has built them all)."""
        names = ("claimer", "finalizer", "heartbeat", "executors")
        return [stage for name in names if (stage := getattr(self, name, None)) is not None]

    async def _bury(self) -> None:
        """After :meth:`kill`: wait for the cancelled stages, stop the lifeline thread (it
        would renew the dead worker's leases) and the listener; write nothing."""
        tasks = [t for stage in self._stages() for t in stage.tasks] + list(self._background)
        current = asyncio.current_task()
        await asyncio.gather(*(t for t in tasks if t is not current), return_exceptions=True)
        await self.lifeline.stop()
        await self.listener.stop()
        if self.store is not None:
            for rc in self.store._roles():
                rc._drop()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.stopped.set()

    async def _wait_burst_done(self) -> None:
        while not self._stop_requested.is_set():
            if (
                self.claimer.idle.is_set()
                and len(self.registry) == 0
                and not self.claimer.wake_event.is_set()
                and self.completed.empty()
            ):
                if self.claimer.idle_since >= self.finalizer.written_at:
                    # Nothing due. Done, unless admission bounced a job (no free slot of its
                    # concurrency key, or its rate window): it waits for its slot or window,
                    # not for a time its enqueuer chose, so the burst runs it too. A job
                    # delayed on purpose (delay, run_at, a retry's back-off) stays.
                    assert self.store is not None
                    try:
                        due_in = await self.store.bounced_due_in(list(self.acta.handlers))
                    except Exception as exc:  # the database is away: ask again, as the
                        # claimer does (the lifeline stops a worker that cannot reach it)
                        log.warning("burst: could not look for bounced jobs: {}", exc)
                        await self.clock.wait(self._stop_requested, 1.0)
                        continue
                    if due_in is None:
                        return
                    # The claimer wakes by itself when the job is due; look again then.
                    await self.clock.wait(self._stop_requested, max(due_in, BURST_RECHECK))
                    self.claimer.wake(probe=True)
                    continue
                # The last completion may have made rows due (a parent, a lane's next
                # job), and a suspect may have become due: one more claim, a probing one,
                # before calling it done.
                self.claimer.wake(probe=True)
            await self.clock.wait(self._stop_requested, 0.01)

    async def shutdown(self) -> None:
        if self.stopped.is_set():
            return
        # From here on, stages ending is the plan, not a crash.
        self._stop_requested.set()
        await self.claimer.stop()
        handed = self._hand_back_unstarted()
        await self._wait_executing(self.grace)
        if self._executing():
            self._interrupt_all()
            await self._wait_executing(FORCED_STOP_SECONDS)
        self.stubborn = self._report_stubborn()
        # An executor whose handler swallowed its cancel never reads the None: don't wait
        # for it again (its row is left to its lease; the CLI exits past its task).
        await self.executors.stop(STUBBORN_WAIT_SECONDS if self.stubborn else FORCED_STOP_SECONDS)
        await self.finalizer.stop(FLUSH_SECONDS)
        if self.killed:  # crash_at's point was the shutdown's last write: write nothing more
            await self._bury()
            return
        if self.breakers is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.breakers.drain(), FLUSH_SECONDS)
        await self.heartbeat.stop()
        await self.lifeline.stop()
        await self.listener.stop()
        for task in list(self._background):
            task.cancel()
        assert self.store is not None
        try:
            await self.store.stop_worker()
        except Exception as exc:
            log.warning("could not mark worker {} stopped: {}", self.worker_id, exc)
        await self.store.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        log.bind(event="worker_stopped", worker_id=self.worker_id).info(
            "worker {} stopped ({} claimed-but-unstarted handed back, {} left held)",
            self.worker_id,
            handed,
            len(self.registry),
        )
        self.stopped.set()

    def _hand_back_unstarted(self) -> int:
        """Claimed-but-unstarted rows go back ``ready`` at once, uncharged, through the
        finalizer's last batch. One that finds the Completed channel full (its writes are
        failing) is let go instead: the registry forgets it, so its lease runs out and
        recovery returns it, also uncharged (it never started)."""
        handed = 0
        let_go = 0
        while not self.claimed.empty():
            entry = self.claimed.get_nowait()
            self.claimed.task_done()
            if entry is None:
                continue
            try:
                self.completed.put_nowait(handback(entry.job, 0.0))
            except asyncio.QueueFull:
                self.registry.remove(entry.key)
                let_go += 1
                continue
            entry.stop_reason = Outcome.HANDBACK
            entry.state = EntryState.FINALIZING
            handed += 1
        if let_go:
            log.bind(event="handback_left_to_lease", count=let_go).warning(
                "{} claimed-but-unstarted row(s) could not be handed back (the completions "
                "are not being written): they return through recovery when their leases "
                "run out, uncharged",
                let_go,
            )
        return handed

    def _executing(self) -> int:
        return sum(1 for e in self.registry if e.state is not EntryState.FINALIZING)

    async def _wait_executing(self, seconds: float) -> None:
        deadline = self.clock.now() + seconds
        while self._executing() and self.clock.now() < deadline:
            if self._force.is_set():
                return
            await self.clock.wait(self._force, min(0.05, max(0.0, deadline - self.clock.now())))

    def _report_stubborn(self) -> list[Entry]:
        """Attempts still running after they were cancelled: their handlers swallow
        cancellation. Each is named in the log and left to its lease (recovery takes the
        row back once the lease runs out), so that one bad handler cannot keep the worker
        from exiting."""
        stubborn = [e for e in self.registry if e.state is EntryState.EXECUTING]
        for entry in stubborn:
            log.bind(
                event="handler_ignored_cancel", job_id=entry.job.id, kind=entry.job.kind
            ).error(
                "job {} ({}): the handler ignored its cancellation and is still running; "
                "exiting without it (its row comes back through recovery when the lease runs "
                "out)",
                entry.job.id,
                entry.job.kind,
            )
        return stubborn

    def _interrupt_all(self) -> None:
        now = self.clock.now()
        for entry in self.registry:
            if entry.state is EntryState.EXECUTING:
                self.registry.fire(entry, Outcome.INTERRUPTED, now)

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
        self._spawn(self._register_again(seconds))

    async def _register_row(self, store: WorkerStore) -> int:
        """A new worker row for this process (at start-up, and after a long silence)."""
        return await store.register_worker(
            hostname=socket.gethostname(),
            pid=os.getpid(),
            executors=self.executors_count,
            kinds=sorted(self.acta.handlers),
            version=_version(),
        )

    async def _register_again(self, seconds: float) -> None:
        """The worker went silent for 7 beats (the process was suspended, or cut off from
        the database; the lifeline keeps a merely blocked loop from it): recovery may have
        marked it dead, freeing its locks and slots, and every lease it held has run out
        (its attempts were cancelled at their deadlines). It does not carry on under the
        old identity: its old row is marked stopped, it registers a new one and goes on
        claiming under the new id, with no restart (a database outage must not need one)."""
        store = self.store
        assert store is not None
        old = self.worker_id
        try:
            self.worker_id = await self._register_row(store)
            # A beat already queued with the old id would set the old row back to
            # running: one beat under the new id first (the heartbeat connection runs them
            # in order), then the old row is marked stopped.
            await self.heartbeat.run_once()
            await store.stop_worker(old)
        except Exception as exc:
            log.bind(event="register_again_failed").error(
                "worker {} could not register again after its silence: {}", old, exc
            )
            return
        self.lifeline.stale_store = True
        await self._warm_stages(self.store)  # names the stage connections after the new id
        await self.listener.stop()
        self._listen()
        log.bind(event="registered_again", worker_id=self.worker_id, old=old).warning(
            "worker {} went {:.1f}s without a confirmed lease renewal (the worker-dead limit "
            "is {:g}s): recovery may have marked it dead and everything it held has run out "
            "of its lease; registered again as worker {}",
            old,
            seconds,
            self.timings.worker_dead_after,
            self.worker_id,
        )

    def _on_recovery_due(self) -> None:
        if not self._recovering:
            self._spawn(self._recover())

    async def _warm_stages(self, store: WorkerStore) -> None:
        try:
            await store.open_stage_connections()
        except Exception as exc:  # each role connects and prepares on first use instead
            log.bind(event="warm_up_failed").debug("stage connections not warmed: {}", exc)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _recover(self) -> None:
        assert self.store is not None
        self._recovering = True
        try:
            await run_recovery(self.store)
            # A chain broken by a path that wrote no completion of a fire (an operator's
            # cancel of a pending fire, a fire failed by recovery).
            await self.fires.ensure()
        except Exception as exc:
            log.bind(event="recovery_failed").warning("recovery pass failed: {}", exc)
        finally:
            self._recovering = False

    async def reload_definitions(self) -> None:
        """Load the stored definitions, apply them (``worker/definitions.py`` decides)."""
        assert self.store is not None
        try:
            stored = await self.store.load_definitions()
        except Exception as exc:
            log.warning("could not load definitions: {}", exc)
            return
        declared = {kind: handler.policy for kind, handler in self.acta.handlers.items()}
        new = definitions.reload(declared, stored, self.policies, self.definitions_version)
        for kind, why in new.refused.items():
            log.bind(event="bad_override", kind=kind).error(
                "ignoring the stored overrides of {!r}: {}", kind, why
            )
        for kind, diff in new.diffs.items():
            log.bind(event="policy_changed", kind=kind).info("kind {!r}: policy now {}", kind, diff)
        self.policies = new.policies
        self.store.paused = new.paused
        self.definitions_version = new.version
        if new.changed:
            log.bind(event="definitions_reloaded", paused=new.paused).info(
                "definitions of namespace {!r} reloaded (version {}){}",
                self.namespace,
                new.version,
                f"; paused: {', '.join(new.paused)}" if new.paused else "",
            )
            claimer = getattr(self, "claimer", None)
            if claimer is not None:
                claimer.wake()  # a resumed kind's jobs may be due now


def _version() -> str:
    from .. import __version__

    return __version__
