"""The lifeline: a worker keeps its leases while its event loop is blocked.

The most common asyncio mistake, blocking work inside an ``async def`` handler
(``time.sleep``, a CPU loop, a sync driver), stops everything on the worker's loop, the
heartbeat included. Without renewals the worker's leases ran out during the block: another
worker ran the same job while the first still ran it, the innocent jobs sharing the loop
were charged as lost again and again until they failed, and nothing said why.

How it works (one thread, one event loop and one connection of its own):

* On the worker's loop, a ticker runs every ``tick`` (a quarter beat, at most 1 s) and
  records when it last ran. Nothing else of the lifeline runs on the loop until the loop
  comes back from a block.
* The lifeline thread looks every ``tick``. Once the loop has not ticked for ``tick +
  threshold`` (threshold: half a beat, at most 5 s) the loop is *stalled*: the thread logs a
  warning naming the running handlers and where the loop thread is (file, line, function),
  counts the stall, and renews the leases at once and then once per beat interval, on its
  own loop and connection (``acta:lifeline:<id>``), with the heartbeat's own statement
  (which also refreshes the worker row, and may take the namespace's recovery pass: the
  thread then runs it on its own connection too). It renews exactly what the registry
  holds at that moment (read while the loop is blocked,
  so it cannot change under the read), minus what the heartbeat would leave out: an entry
  whose deadline already fired or that was asked to stop.
* Bounded: an attempt is renewed only until its own execution timeout; an entry with no
  running attempt (claimed but not started, or waiting for its completion write) only
  while some running attempt is within its timeout (or, when none runs at all, for the
  default timeout from the start of the stall). A loop that never comes back therefore
  holds each job at most its timeout plus one lease; past the bound the lifeline stops
  beating altogether, and the worker is marked dead after 7 beats, as if it had died.
* A look that finds the thread itself did not run for a tick plus the threshold is a
  frozen process (SIGSTOP, a paused VM), not a blocked loop: nothing is renewed until the
  loop has had a tick plus the threshold, from the thaw, to come back. A loop that ended
  without stopping the worker (closed by an embedding application) stops the thread.
* When the loop comes back, :meth:`Lifeline.catch_up` (called by the registry before its
  alarm cancels anything and before a past deadline is believed, and by the ticker) moves
  each renewed entry's deadline to the lifeline's confirmed renewal start plus the attempt
  deadline, the rule the heartbeat follows. The ticker then logs how long the loop was
  blocked and records it in the metrics.

Renewals outside the loop never touch the registry: only the loop does, in ``catch_up``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from loguru import logger

from .. import metrics
from ..settings import (
    DEFAULT_TIMEOUT_SECONDS,
    LOOP_TICK_SECONDS,
    STALL_WARNING_SECONDS,
    Timings,
)
from ..values import HeartbeatReport
from .clock import Clock, Timer
from .inflight import Entry, EntryState, Registry

log = logger.bind(stage="lifeline")

JOIN_SECONDS = 5.0
"""How long stopping waits for the lifeline thread to close its connection."""

Key = tuple[int, int]


class LifelineStore(Protocol):
    async def heartbeat(
        self, held: Sequence[tuple[int, int, bool]], locks: Sequence[tuple[str, int, int]] = ()
    ) -> HeartbeatReport: ...
    async def close(self) -> None: ...


@dataclass(slots=True)
class Stall:
    since: float
    """Monotonic time the loop last ticked before this stall."""
    next_renewal: float
    """Monotonic time of the next renewal try."""
    gave_up: bool = False


class Lifeline:
    """Renews a worker's leases from a thread of its own while the worker's loop is blocked.

    ``make_store`` is called in the lifeline thread, the first time it must renew: the store
    it returns (``WorkerStore.twin()``) opens its connections on that thread's loop.
    ``recover`` runs a recovery pass on that store when a renewal took the namespace's pass.
    ``on_renewed`` is told, on the worker's loop, the loop time a renewal made outside it
    started (the heartbeat counts it as a confirmed renewal). ``monotonic`` is the thread's
    clock; it must tick with the loop clock (``time.monotonic`` does, for asyncio and uvloop).
    """

    def __init__(
        self,
        registry: Registry,
        timings: Timings,
        make_store: Callable[[], LifelineStore],
        clock: Clock | None = None,
        *,
        namespace: str = "",
        recover: Callable[[Any], Awaitable[object]] | None = None,
        on_renewed: Callable[[float], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.timings = timings
        self.make_store = make_store
        self.clock = clock or Clock()
        self.namespace = namespace
        self.recover = recover
        self.on_renewed = on_renewed
        self.monotonic = monotonic
        self.tick = min(LOOP_TICK_SECONDS, timings.heartbeat / 4)
        self.threshold = min(STALL_WARNING_SECONDS, timings.heartbeat / 2)
        self.renewals = 0
        """Renewals confirmed outside the loop."""
        self._renewals_reported = 0
        self.stalls = 0
        """Stalls seen by the loop when it came back."""
        # Shared between the loop and the thread (plain attribute reads and writes are
        # atomic; the dict of pending renewals is swapped under the lock).
        self._seen = monotonic()
        """Monotonic time the loop's ticker last ran."""
        self._offset = 0.0
        """Monotonic time minus loop time, measured by the ticker."""
        self._lock = threading.Lock()
        self._pending: dict[Key, float] = {}
        """Renewals confirmed outside the loop and not yet applied: key -> monotonic start."""
        self._counted: float | None = None
        """``_seen`` of the stall the thread already counted."""
        # The thread's own.
        self._renewed_at: dict[Key, float] = {}
        self._stall: Stall | None = None
        self._looked: float | None = None
        """Monotonic time of the thread's previous look."""
        self._thawed = float("-inf")
        """Monotonic time the thread last found the whole process had been frozen: the loop
        is measured from then on, not from before the freeze."""
        self._store: LifelineStore | None = None
        self._recovering: asyncio.Task[object] | None = None
        self._loop_thread: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._woken: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        """The thread's loop and the event that ends its wait between looks (``stop``)."""
        self._timer: Timer | None = None
        self.stale_store = False
        """Set when the worker registered again: the next renewal uses a fresh store (one
        that beats for the new worker id)."""

    # ------------------------------------------------------------------ on the worker's loop

    def start(self) -> None:
        """Start the ticker on the running loop and the lifeline thread."""
        self.start_ticker()
        self._thread = threading.Thread(target=self._main, name="acta-lifeline", daemon=True)
        self._thread.start()

    def start_ticker(self) -> None:
        """The loop's half: the ticker, and the registry's catch-up (unit tests drive the
        thread's half, :meth:`step`, themselves)."""
        self.registry.catch_up = self.catch_up
        self._loop_thread = threading.get_ident()
        self._loop = asyncio.get_running_loop()
        self._mark()
        self._timer = self.clock.call_at(self.clock.now() + self.tick, self._tick)

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._stopping.set()
        woken, self._woken = self._woken, None
        if woken is not None:
            # End the thread's wait for its next look now, not up to a tick later.
            with contextlib.suppress(RuntimeError):  # its loop has ended already
                woken[0].call_soon_threadsafe(woken[1].set)
        thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.to_thread(thread.join, JOIN_SECONDS)
        self.catch_up()

    def _mark(self) -> None:
        now = self.monotonic()
        self._offset = now - self.clock.now()
        self._seen = now

    def _tick(self) -> None:
        gap = self.monotonic() - self._seen
        since = self._seen
        self._mark()
        self.catch_up()
        if gap >= self.tick + self.threshold:
            self._came_back(gap - self.tick, since)
        self._timer = self.clock.call_at(self.clock.now() + self.tick, self._tick)

    def catch_up(self) -> None:
        """Apply the renewals the lifeline made while the loop was blocked: each renewed
        entry's deadline moves to that renewal's start plus the attempt deadline."""
        if not self._pending:
            return
        with self._lock:
            pending, self._pending = self._pending, {}
        offset = self.monotonic() - self.clock.now()
        for key, started in pending.items():
            entry = self.registry.get(key)
            if entry is not None:
                self.registry.rearm(entry, started - offset + self.timings.attempt_deadline)
        if self.on_renewed is not None:
            self.on_renewed(max(pending.values()) - offset)

    def _came_back(self, seconds: float, since: float) -> None:
        self.stalls += 1
        seen = self._counted == since
        if not seen:
            metrics.record_stall(self.namespace)
        metrics.record_stall_duration(self.namespace, seconds)
        renewals, self._renewals_reported = (
            self.renewals - self._renewals_reported,
            self.renewals,
        )
        if not seen and seconds >= self.threshold + 3 * self.tick:
            # Long enough that the lifeline thread, looking every tick, would have seen it
            # (with room for its own lateness) had it run: the whole process was frozen.
            log.bind(event="process_suspended", seconds=round(seconds, 3)).warning(
                "the worker process did not run for {:.1f}s (suspended: SIGSTOP, a paused VM "
                "or container, heavy swapping?); no lease was renewed meanwhile",
                seconds,
            )
            return
        log.bind(event="loop_blocked", seconds=round(seconds, 3)).warning(
            "the event loop was blocked for {:.1f}s (running handlers: {}); an async handler "
            "must not block (time.sleep, CPU work, sync I/O): use await, asyncio.to_thread or "
            "a sync `def` handler. {} lease renewal(s) were made from the lifeline thread "
            "meanwhile",
            seconds,
            running(list(self.registry)) or "none",
            renewals,
        )

    # ------------------------------------------------------------------ in the thread

    def _main(self) -> None:
        # A loop of its own (asyncio's, whatever the worker's is): it only waits and renews.
        asyncio.run(self._run())

    async def _run(self) -> None:
        woken = asyncio.Event()
        self._woken = (asyncio.get_running_loop(), woken)
        try:
            while not self._stopping.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), self.tick)
                if self._stopping.is_set():
                    break
                try:
                    await self.step()
                except Exception:  # the lifeline must never die of one bad look
                    log.bind(event="lifeline_error").exception("lifeline step failed")
        finally:
            if self._recovering is not None:
                self._recovering.cancel()
            store, self._store = self._store, None
            if store is not None:
                with contextlib.suppress(Exception):
                    await store.close()

    async def step(self) -> None:
        """One look: is the loop stalled, and is a renewal due?"""
        loop = self._loop
        if loop is not None and (loop.is_closed() or not loop.is_running()):
            # The worker's loop ended without stopping the worker (an embedding app closed
            # it): a silent ticker means no loop at all, not a blocked one. Renewing on
            # would hold the rows (and take recovery passes) for nobody.
            self._stopping.set()
            return
        now = self.monotonic()
        looked, self._looked = self._looked, now
        if looked is not None and now - looked >= self.tick + self.threshold:
            # This thread did not run either: the whole process was frozen (SIGSTOP, a
            # paused VM), not just its loop. The loop gets the allowance of a running one
            # (a tick plus the threshold) from now on before it counts as blocked: just
            # after a thaw it may need more than a tick (timers due, a busy machine), and
            # a frozen process must not be told as a blocked loop.
            self._thawed = now
            return
        seen = self._seen
        since = max(seen, self._thawed)
        if now - since < self.tick + self.threshold:
            self._stall = None
            return
        stall = self._stall
        if stall is None or stall.since != since:
            stall = self._stall = Stall(since=since, next_renewal=now)
            self._counted = seen
            metrics.record_stall(self.namespace)
            self._warn(now - since - self.tick)
        if now >= stall.next_renewal:
            stall.next_renewal = now + self.timings.heartbeat
            await self.renew(stall)

    def renewable(
        self, stall: Stall, now: float
    ) -> tuple[list[tuple[int, int, bool]], list[tuple[str, int, int]], bool]:
        """What may be renewed now: the held triples and lock holds, as the heartbeat would
        send them, minus what is past its bound; and whether the worker may still beat at
        all (some running attempt is within its timeout, or none runs and the stall is
        younger than the default timeout)."""
        entries = self._entries()
        offset = self._offset
        timeouts = [
            e.timeout_at + offset
            for e in entries
            if e.state is EntryState.EXECUTING and e.started is not None
        ]
        others_until = max(timeouts) if timeouts else stall.since + DEFAULT_TIMEOUT_SECONDS
        held: list[tuple[int, int, bool]] = []
        locks: list[tuple[str, int, int]] = []
        for e in entries:
            if e.state is not EntryState.FINALIZING:
                if e.stop_reason is not None:
                    continue
                deadline = e.deadline + offset
                last = self._renewed_at.get(e.key)
                if last is not None:
                    deadline = max(deadline, last + self.timings.attempt_deadline)
                if now >= deadline:
                    continue  # its handler is to be cancelled: let the lease run out
            running = e.state is EntryState.EXECUTING and e.started is not None
            until = e.timeout_at + offset if running else others_until
            if now >= until:
                continue
            held.append((e.job.id, e.job.execution_id, e.started is not None))
            locks.extend((name, e.job.id, e.job.execution_id) for name in e.locks)
        return held, locks, now < others_until

    async def renew(self, stall: Stall) -> HeartbeatReport | None:
        started = self.monotonic()
        held, locks, alive = self.renewable(stall, started)
        if not alive:
            # Nothing keeps the worker row fresh either: it is marked dead after 7 beats,
            # as a crashed worker would be.
            if not stall.gave_up:
                stall.gave_up = True
                log.bind(event="lifeline_gave_up").warning(
                    "the event loop is still blocked past {}: no more renewals; the leases "
                    "run out and recovery takes the rows back",
                    "every running job's execution timeout"
                    if any(e.state is EntryState.EXECUTING for e in self._entries())
                    else f"{DEFAULT_TIMEOUT_SECONDS:g}s with no handler running",
                )
            return None
        stall.gave_up = False
        if self.stale_store:
            self.stale_store = False
            await self._drop_store()
        if self._store is None:
            self._store = self.make_store()
        try:
            report = await asyncio.wait_for(
                self._store.heartbeat(held, locks), self.timings.heartbeat
            )
        except Exception as exc:
            log.bind(event="lifeline_failed").warning(
                "lease renewal from the lifeline thread failed: {}", exc
            )
            if isinstance(exc, TimeoutError):
                await self._drop_store()
            return None
        renewed = report.renewed
        with self._lock:
            for key in renewed:
                self._pending[key] = started
        held_keys = {(j, x) for j, x, _ in held}
        self._renewed_at = {k: v for k, v in self._renewed_at.items() if k in held_keys}
        self._renewed_at.update(dict.fromkeys(renewed, started))
        self.renewals += 1
        metrics.record_lifeline_renewal(self.namespace, len(renewed))
        log.bind(event="lifeline_renewed", rows=len(renewed)).debug(
            "event loop blocked: renewed {} of {} held row(s) and the worker row from the "
            "lifeline thread",
            len(renewed),
            len(held),
        )
        if report.recovery_due and self.recover is not None:
            # This renewal took the namespace's recovery pass: run it here, since the
            # worker's loop cannot.
            if self._recovering is None or self._recovering.done():
                self._recovering = asyncio.create_task(self._recover(self._store))
        return report

    async def _recover(self, store: LifelineStore) -> None:
        assert self.recover is not None
        try:
            await self.recover(store)
        except Exception as exc:
            log.bind(event="recovery_failed").warning("recovery pass failed: {}", exc)

    async def _drop_store(self) -> None:
        # A statement cut off mid-protocol leaves its connection unusable: start afresh.
        store, self._store = self._store, None
        if store is not None:
            with contextlib.suppress(Exception):
                await store.close()

    def _entries(self) -> list[Entry]:
        # The loop is blocked, so the registry does not change under this read; should the
        # loop come back in the middle of it, try again.
        for _ in range(3):
            with contextlib.suppress(RuntimeError):
                return list(self.registry)
        return []

    def _warn(self, seconds: float) -> None:
        where = ""
        frame = sys._current_frames().get(self._loop_thread or -1)
        if frame is not None:
            top = traceback.extract_stack(frame)[-1]
            where = f"; the loop thread is at {top.filename}:{top.lineno} in {top.name}"
        log.bind(event="loop_blocked", seconds=round(seconds, 3)).warning(
            "the event loop has been blocked for {:.1f}s (running handlers: {}{}): renewing "
            "the leases from the lifeline thread until each job's execution timeout",
            seconds,
            running(self._entries()) or "none",
            where,
        )


def running(entries: list[Entry]) -> str:
    """The running handlers, as ``kind (job id)``, for a log line."""
    found = [f"{e.job.kind} (job {e.job.id})" for e in entries if e.state is EntryState.EXECUTING]
    more = f" and {len(found) - 10} more" if len(found) > 10 else ""
    return ", ".join(found[:10]) + more
