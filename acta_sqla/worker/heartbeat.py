"""The heartbeat: one call per beat renews exactly what the registry holds."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from loguru import logger

from ..settings import Timings
from ..values import HeartbeatReport, Outcome
from .clock import Clock
from .inflight import EntryState, Registry
from .stage import LoopStage

log = logger.bind(stage="heartbeat")


class HeartbeatStore(Protocol):
    async def heartbeat(
        self, held: Sequence[tuple[int, int, bool]], locks: Sequence[tuple[str, int, int]] = ()
    ) -> HeartbeatReport: ...


class Heartbeat(LoopStage):
    """Every beat: snapshot the registry and make one call with the held pairs. A renewed
    row re-arms its entry's deadline (from the start of this renewal); a row locked by
    another transaction keeps its deadline for the next beat; a row not answered cancels a
    Claimed or Executing entry, while a Finalizing entry is left to its write. When the
    namespace's definitions version moved, the policies are reloaded; when this beat took
    the recovery pass, the pass runs beside the loop.

    An entry whose deadline already fired is not renewed: its handler was told to stop,
    and the lease must be allowed to run out if it does not. The one exception is a sync
    handler asked to stop whose thread still runs (a thread cannot be killed): its row is
    renewed on while the thread runs, up to its overrun cap, so that no retry starts
    while it runs (:meth:`Entry.renewable`, worker/executor.py); once a beat finds that
    row lost, it is not renewed again.

    Cadence: beats START on a fixed schedule, one interval apart (not one interval after
    the previous beat ended), and a beat that has not answered when the next one is due is
    abandoned (its connection is dropped and the next beat starts on time). Every deadline
    counts from the last confirmed renewal's start, one interval before the next beat, so a
    slow or hung beat costs nothing as long as the following one answers within half an
    interval: 1 + 1.5 beats = the attempt deadline of 2.5 beats. (A beat that waited one
    interval after the previous one ENDED, and could hang for its whole statement timeout,
    pushed the next renewal past the deadline and cancelled every running attempt although
    the database lease was still valid.)

    A confirmed beat that follows a silence of ``worker_dead_after`` (7 beats) or more, with
    no renewal in between (the lifeline's included, see :meth:`renewed_outside`), means
    recovery may have marked this worker dead and every lease it held has run out:
    ``on_silence`` is told (the supervisor registers the worker again).
    """

    def __init__(
        self,
        store: HeartbeatStore,
        registry: Registry,
        timings: Timings,
        clock: Clock | None = None,
        on_definitions: Callable[[int], None] | None = None,
        on_depth: Callable[[list[tuple[Any, ...]]], None] | None = None,
        on_recovery_due: Callable[[], None] | None = None,
        on_silence: Callable[[float], None] | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.timings = timings
        self.clock = clock or Clock()
        self.on_definitions = on_definitions
        self.on_depth = on_depth
        """Told the namespace's queue depth when this worker's beat measured it."""
        self.on_recovery_due = on_recovery_due
        self.on_silence = on_silence
        self.beats = 0
        self.failures = 0
        self.last_confirmed: float | None = None
        """Loop time the last confirmed renewal (this heartbeat's or the lifeline's) started."""
        self._stop = asyncio.Event()
        super().__init__()

    task_name = "acta-heartbeat"

    async def stop(self) -> None:
        """End the loop (cancelled where it waits or beats). Idempotent."""
        if not self._begin_stop():
            return
        self._stop.set()
        task = self._task
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception as exc:
                # Already reported when it happened (the supervisor stops the worker);
                # shutdown goes on so that the rest still closes cleanly.
                log.bind(event="heartbeat_failed").warning("heartbeat had failed: {}", exc)

    async def run(self) -> None:
        interval = self.timings.heartbeat
        if self.last_confirmed is None:
            self.last_confirmed = self.clock.now()  # the worker row was just registered
        due = self.clock.now() + interval
        while not self._stop.is_set():
            await self.clock.wait(self._stop, max(0.0, due - self.clock.now()))
            if self._stop.is_set():
                return
            await self.run_once()
            due = next_beat(due, self.clock.now(), interval)

    def renewed_outside(self, started: float) -> None:
        """A renewal that started at loop time ``started`` was confirmed (called by the
        lifeline for its renewals made while the loop was blocked)."""
        if self.last_confirmed is None or started > self.last_confirmed:
            self.last_confirmed = started

    async def run_once(self) -> HeartbeatReport | None:
        now = self.clock.now()
        snapshot = [e for e in self.registry if e.renewable(now)]
        held = [(e.job.id, e.job.execution_id, e.started is not None) for e in snapshot]
        locks = [(name, e.job.id, e.job.execution_id) for e in snapshot for name in e.locks]
        started = self.clock.now()
        try:
            report = await self._bounded(self.store.heartbeat(held, locks), started)
        except Exception as exc:
            self.failures += 1
            # Deadlines stay as they are: an attempt whose renewals keep failing is
            # cancelled at its deadline, before the lease runs out.
            log.bind(event="heartbeat_failed").warning("heartbeat failed: {}", exc)
            return None
        self.beats += 1
        deadline = started + self.timings.attempt_deadline
        after = self.clock.now()
        previous = self.last_confirmed
        self.renewed_outside(started)
        if (
            previous is not None
            and after - previous >= self.timings.worker_dead_after
            and self.on_silence is not None
        ):
            self.on_silence(after - previous)
        lost = 0
        for entry in snapshot:
            key = entry.key
            if key in report.renewed:
                self.registry.rearm(entry, deadline)
                if entry.job.id in report.cancel_requested:
                    self.registry.fire(entry, Outcome.CANCELLED, after)
            elif key in report.busy:
                continue
            elif entry.state is not EntryState.FINALIZING:
                lost += 1
                self.registry.fire(entry, Outcome.LEASE_LOST, after)
                if entry.overrun_until is not None:
                    # An overrunning sync attempt's row is no longer ours: renewing it on
                    # would only fail again, beat after beat.
                    entry.overrun_until = min(entry.overrun_until, after)
        for name, job_id, execution_id in locks:
            if (name, job_id, execution_id) not in report.locks_renewed:
                entry = self.registry.get((job_id, execution_id))
                if entry is not None and name in entry.locks:
                    log.bind(event="lock_lost", lock=name, job_id=job_id).warning(
                        "job {}: lock {!r} was not renewed; cancelling the attempt", job_id, name
                    )
                    self.registry.fire(entry, Outcome.LOCK_LOST, after)
        if lost:
            log.bind(event="lease_lost", count=lost).warning(
                "{} held row(s) were not renewed (recovered or taken over): their attempts "
                "are cancelled",
                lost,
            )
        if self.on_definitions is not None:
            self.on_definitions(report.definitions_version)
        if report.recovery_due and self.on_recovery_due is not None:
            self.on_recovery_due()
        if report.depth is not None and self.on_depth is not None:
            self.on_depth(report.depth)
        return report

    async def _bounded(self, call: Awaitable[HeartbeatReport], started: float) -> HeartbeatReport:
        """Await one beat, abandoning it when the next one is due (one interval after this
        one started, on the worker's clock): a hung beat must not hold up the next."""
        beat = asyncio.ensure_future(call)
        abandoned = False
        when = started + self.timings.heartbeat

        def abandon() -> None:
            nonlocal abandoned, timer
            if beat.done():
                return
            late = self.clock.now() > when + self.timings.heartbeat / 10
            if late and not abandoned:
                # Ringing late: the loop was blocked (or the process frozen) while the beat
                # was in flight, and timers run before the loop reads its sockets. Its
                # answer may be waiting there: give it a tenth of a beat more.
                abandoned = True
                timer = self.clock.call_at(self.clock.now() + self.timings.heartbeat / 10, abandon)
                return
            abandoned = True
            beat.cancel()

        timer = self.clock.call_at(when, abandon)
        try:
            return await beat
        except asyncio.CancelledError:
            if not abandoned:
                raise  # the heartbeat itself is being stopped
            drop = getattr(self.store, "heartbeat_conn", None)
            if drop is not None:
                # A cancelled statement leaves the connection mid-protocol: open a new one.
                await drop.discard()
            raise BeatTimeout(
                f"no answer within {self.timings.heartbeat:g}s (the beat interval); "
                "abandoned so that the next beat starts on time"
            ) from None
        finally:
            timer.cancel()


class BeatTimeout(Exception):
    """A beat did not answer before the next one was due."""


def next_beat(due: float, now: float, interval: float) -> float:
    """When the beat after the one due at ``due`` starts: one interval after it was DUE
    (however long it took), or at once if that time has already passed (the beat was
    abandoned, or the loop was blocked): its rows have gone that long without renewal."""
    following = due + interval
    if following > now:
        return following
    return now
