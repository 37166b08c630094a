"""The claimer: takes due rows for free executors, one statement per batch."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Protocol

from loguru import logger

from .. import _faults as faults
from ..settings import IDLE_JITTER_SECONDS, POLL_FLOOR_SECONDS, Timings
from ..values import Claim, ClaimedJob
from .clock import Clock, Timer
from .inflight import Entry, Permits, Registry
from .stage import LoopStage

log = logger.bind(stage="claimer")


DRAIN_PROBE_SECONDS = 0.1
"""While a suspect is due and this worker still has work in flight, it claims nothing and
asks again this often (or as soon as it has drained): another worker may take the
suspect first, and then this one goes back to claiming at once."""

DRAIN_CHECK_SECONDS = 0.01
"""How often a draining worker looks whether its last entry is gone (a length check)."""


SUSPECT_PROBE_SECONDS = 1.0
"""How often a claim also asks whether a suspect is due (the full ``claim_jobs``); the
claims in between are the plain hot claim, which never takes a suspect. A due suspect
waits at most about this long (plus the drain) before a worker turns to it. The claim
right after a suspect ran alone probes whatever the time (the next suspect of its batch)."""


class ClaimStore(Protocol):
    async def claim(self, limit: int, alone: bool) -> Claim: ...
    async def claim_plain(self, limit: int) -> list[ClaimedJob]: ...
    async def next_due_in(self) -> float | None: ...


class Claimer(LoopStage):
    """Waits for one permit, then takes every other free one, and claims that many rows in
    one call. After a claim that found work it lets the executors take those rows before
    asking again, so the next claim asks for every permit they freed instead of the one or
    two free at that instant. An empty claim sleeps until the next row is due (50 ms..1 s,
    jittered up to 100 ms); a wake-up ends the sleep early. A failed claim backs off 1 s.

    Suspects (jobs lost with a worker before they were known to start) run alone, so that
    a job that kills its worker takes nothing else down and its next loss names it: the
    claim tells whether a suspect is due; a worker with work in flight then claims nothing
    and drains (asking again every ``DRAIN_PROBE_SECONDS``, in case another worker took
    it), and a worker with nothing in flight takes the suspect alone, then claims nothing
    more until it is done. Plain claims pay one probe of an empty index for this.
    """

    def __init__(
        self,
        store: ClaimStore,
        registry: Registry,
        permits: Permits,
        claimed: asyncio.Queue[Entry | None],
        timings: Timings,
        safety_poll: float,
        clock: Clock | None = None,
        on_claim: Callable[[int, float], None] | None = None,
        on_idle: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.permits = permits
        self.claimed = claimed
        self.timings = timings
        self.safety_poll = safety_poll
        self.clock = clock or Clock()
        self.wake_event = asyncio.Event()
        self._stop = asyncio.Event()
        self.stopping = False
        self.idle = asyncio.Event()
        """Set while the last claim found nothing (burst mode and tests wait on it)."""
        self.idle_since = 0.0
        """When the last claim that found nothing, suspects included, started (the clock's
        time; the plain claim cannot see suspects, so only a probing one counts): burst
        mode stops only once such a claim started after the last completion was written,
        as a completion can make rows due (a parent its last child wakes, a lane's next
        job), and a suspect may have become due meanwhile (``wake(probe=True)``)."""
        self.claims = 0
        self.claiming = False
        """A claim statement is in flight: rows it takes are neither in the registry nor
        'ready' yet. Burst mode reads it (with ``claims``) so that it never calls the
        queue empty from a look taken while a claim was moving rows."""
        self.claimed_rows = 0
        self._on_claim = on_claim
        """Called after each claim that found work: (rows, seconds the claim took)."""
        self._on_idle = on_idle
        """Called when a claim finds nothing after one that found work."""
        super().__init__()
        self._timer: Timer | None = None
        self._timer_at = float("inf")
        self._rng = random.Random()
        self._isolated = False
        """A suspect was claimed alone: claim nothing until the registry is empty."""
        self._suspect_due = False
        """The last claim held back for a due suspect: drain, then claim alone."""
        self.suspect_probe_every = SUSPECT_PROBE_SECONDS
        self._next_probe = float("-inf")

    def wake(self, probe: bool = False) -> None:
        """End an idle sleep now (a NOTIFY arrived, or this process made a row due);
        ``probe``: the next claim also asks for a due suspect (burst mode's last look)."""
        if probe:
            self._next_probe = float("-inf")
        self.wake_event.set()

    def wake_after(self, seconds: float) -> None:
        """This process made a row due ``seconds`` from now (a retry): wake then, even if
        the claimer's last look at the queue saw nothing waiting."""
        when = self.clock.now() + seconds
        if self._timer is not None and self._timer_at <= when:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self.clock.call_at(when, self._timer_fired)

    def _timer_fired(self) -> None:
        self._timer, self._timer_at = None, float("inf")
        self.wake()

    task_name = "acta-claimer"

    async def stop(self) -> None:
        """Claim no more: close the permits, end an idle sleep, let a claim in flight
        finish. Idempotent."""
        if not self._begin_stop():
            return
        self.stopping = True
        self._stop.set()
        self.wake_event.set()
        self.permits.close()
        if self._timer is not None:
            self._timer.cancel()
        task = self._task
        if task is not None:
            # A claim in flight is allowed to finish, so its rows reach the registry (and
            # are handed back by the shutdown) instead of being stranded by a cancel.
            await asyncio.shield(task) if not task.done() else None

    async def run(self) -> None:
        while not self.stopping:
            await self.run_once()

    async def run_once(self) -> int:
        """One claim: returns the number of rows claimed."""
        if self._isolated or self._suspect_due:
            # A suspect runs alone until it is done; for a due suspect, drain first (but
            # ask again now and then: another worker may have taken it).
            await self._drain(None if self._isolated else DRAIN_PROBE_SECONDS)
            if self._isolated:
                # Suspects come in batches (a worker's death loses every row it held): the
                # claim after one ran alone probes at once for the next, instead of within
                # SUSPECT_PROBE_SECONDS, so the batch is not run at one row a second.
                self._next_probe = float("-inf")
            self._isolated = False
            if self.stopping:
                return 0
        permits = await self.permits.take_all()
        if self.stopping:
            self.permits.release(permits)
            return 0
        self.wake_event.clear()
        started = self.clock.now()
        self.claiming = True
        alone = len(self.registry) == 0
        # Ask whether a suspect is due at most once per probe interval (and on every claim
        # while draining for one); in between, the plain claim pays nothing for suspects.
        probe = self._suspect_due or started >= self._next_probe
        try:
            if probe:
                self._next_probe = started + self.suspect_probe_every
                claim = await self.store.claim(permits, alone)
            else:
                claim = Claim(await self.store.claim_plain(permits), False)
        except Exception as exc:
            self.claiming = False
            self.permits.release(permits)
            log.bind(event="claim_failed").warning(
                "claim failed, retrying in {:.1f}s: {}", self.safety_poll, exc
            )
            await self.clock.wait(self._stop, self.safety_poll)
            return 0
        jobs = claim.jobs
        self.permits.release(permits - len(jobs))
        self.claims += 1
        # From here to the registry's adds (or the idle mark) nothing awaits: the rows are
        # accounted for before anyone else runs.
        self.claiming = False
        self._suspect_due = claim.suspect_due and not jobs
        if not jobs:
            if self._suspect_due:
                return 0  # held back for a suspect: not idle, drain (next run_once)
            if probe:
                self.idle_since = started
            if not self.idle.is_set():
                self.idle.set()
                if self._on_idle is not None:
                    self._on_idle()
            await self._idle_sleep()
            return 0
        self.idle.clear()
        self.claimed_rows += len(jobs)
        if jobs[0].alone:
            self._isolated = True
            log.bind(event="suspect_claimed", job_id=jobs[0].id, kind=jobs[0].kind).info(
                "job {} ({}) runs alone: an earlier attempt was lost with its worker",
                jobs[0].id,
                jobs[0].kind,
            )
        # Rows leave in claim order (the statement returns them so); the deadline counts
        # from the claim's start, because the lease the database gave them counts from the
        # same statement.
        deadline = started + self.timings.attempt_deadline
        add, put = self.registry.add, self.claimed.put_nowait
        for job in jobs:
            put(add(job, deadline))
        if faults.active is not None:  # tests only (acta_sqla.testing.faults)
            await faults.active.reached("after_claim")
        if self._on_claim is not None:
            self._on_claim(len(jobs), self.clock.now() - started)
        await self.claimed.join()
        return len(jobs)

    async def _drain(self, at_most: float | None) -> None:
        """Wait until nothing is in flight (every entry's completion has landed), for at
        most ``at_most`` seconds (None: however long it takes), or until stopped. Polled:
        the registry has no event for "empty", and this runs only around suspects."""
        until = None if at_most is None else self.clock.now() + at_most
        while len(self.registry) and not self.stopping:
            step = DRAIN_CHECK_SECONDS
            if until is not None:
                left = until - self.clock.now()
                if left <= 0:
                    return
                step = min(step, left)
            await self.clock.wait(self._stop, step)

    async def _idle_sleep(self) -> None:
        try:
            due = await self.store.next_due_in()
        except Exception:
            due = None
        await self.clock.wait(self.wake_event, self.idle_seconds(due))

    def idle_seconds(self, due: float | None) -> float:
        """How long an empty claim sleeps: until the next row is due, at least 50 ms and at
        most the safety poll, jittered by up to 100 ms. At the cap the jitter is taken off
        instead of being cut away, so idle workers (with nothing due, all at the cap) spread
        over 0.9..1 s instead of claiming in lockstep every 1.0 s."""
        seconds = self.safety_poll if due is None else max(due, POLL_FLOOR_SECONDS)
        jitter = self._rng.uniform(0, min(IDLE_JITTER_SECONDS, self.safety_poll / 2))
        if seconds + jitter <= self.safety_poll:
            return seconds + jitter
        return self.safety_poll - jitter
