"""The in-flight registry: every claim from the moment it is taken until its completion has
committed (Claimed → Executing → Finalizing → removed), and the permits that bound it.

Who writes what:
- the claimer adds entries (Claimed) with their first deadline;
- the executor moves an entry to Executing and Finalizing, and arms the registry's alarm
  for the running attempt (:meth:`Registry.arm`);
- the heartbeat re-arms ``deadline`` (:meth:`Registry.rearm`) and sets ``stop_reason``
  (through :meth:`Registry.fire`);
- the finalizer removes an entry once its write has landed (or been fenced out).
All of this happens on one event loop, so no lock is needed. The one exception is the
lifeline thread (worker/lifeline.py): while the loop is blocked it READS the entries (the
loop cannot change them meanwhile) and renews their rows on its own connection; the loop
learns of those renewals through :attr:`Registry.catch_up` before it trusts a deadline.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from ..values import ClaimedJob, Outcome
from .clock import Clock, Timer


class EntryState(StrEnum):
    CLAIMED = "claimed"
    EXECUTING = "executing"
    FINALIZING = "finalizing"


@dataclass(slots=True, eq=False)
class Entry:
    job: ClaimedJob
    deadline: float
    """Loop time at which the attempt is cancelled unless a renewal moves it on."""
    state: EntryState = EntryState.CLAIMED
    started: float | None = None
    """Loop time the handler started (None while Claimed)."""
    timeout_at: float = float("inf")
    """Loop time the kind's execution timeout fires."""
    stop_reason: Outcome | None = None
    """Why this attempt was asked to stop (lease lost, cancel, shutdown); None while healthy."""
    task: asyncio.Task[object] | None = field(default=None, repr=False)
    """The executor task running the handler while the alarm is armed (None otherwise)."""
    alarm: float = float("inf")
    """When the armed alarm rings: min(deadline, timeout_at)."""
    expired: bool = False
    """The alarm rang (or the attempt was fired): the registry cancelled ``task``."""
    locks: dict[str, int] = field(default_factory=dict)
    """Named locks this attempt holds (with how deep), renewed by the heartbeat."""
    registry: Registry | None = field(default=None, repr=False)
    """The registry holding this entry (for its ``catch_up`` before a deadline is trusted)."""
    overrun_until: float | None = None
    """Set when a sync handler was asked to stop while its thread still runs (a thread
    cannot be killed): the row stays held and renewed until this loop time at most, so that
    no retry starts while the thread runs (worker/executor.py). None otherwise."""

    @property
    def key(self) -> tuple[int, int]:
        return (self.job.id, self.job.execution_id)

    def fired(self, now: float) -> bool:
        """True once the attempt must stop: asked to, or past its deadline."""
        return self.stop_reason is not None or self.past_deadline(now)

    def renewable(self, now: float) -> bool:
        """Whether the heartbeat renews this row now: while its completion is being written,
        while its attempt has not been asked to stop, and, for a sync handler that was asked
        to stop but whose thread still runs, until its overrun cap while its renewals keep
        being confirmed (a lost lease is not renewed on: the deadline passes)."""
        if self.state is EntryState.FINALIZING:
            return True
        if self.overrun_until is not None:
            return now < self.overrun_until and not self.past_deadline(now)
        return not self.fired(now)

    def past_deadline(self, now: float) -> bool:
        """True once ``now`` is past the attempt deadline (after any renewals the lifeline
        made while the loop was blocked have been applied)."""
        if now < self.deadline:
            return False
        # Past its deadline as the loop last knew it. If the loop was just blocked, the
        # lifeline may have renewed the row meanwhile: learn that first, or a renewed entry
        # would be skipped (an executor) or left out of the next beat (the heartbeat).
        registry = self.registry
        if registry is not None and registry.catch_up is not None:
            registry.catch_up()
        return now >= self.deadline


class Registry:
    """The entries, and ONE alarm for every running attempt.

    A running attempt must stop at the earlier of its deadline and its execution timeout.
    Instead of a timer per attempt (``asyncio.timeout`` costs a loop timer and a task
    lookup per job), the registry keeps a heap of (when, entry) and one loop timer for the
    earliest; when it rings, every attempt due is cancelled (``task.cancel()``) with
    ``expired`` set, and the executor turns that into the attempt's completion. Stale heap
    items (re-armed or finished attempts) are skipped when they surface, and the heap is
    rebuilt from the armed entries when stale items outnumber them.

    The alarm's timer comes from the injectable ``clock``: unit tests ring it on a fake
    clock instead of waiting for wall time.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or Clock()
        self._entries: dict[tuple[int, int], Entry] = {}
        self._alarms: list[tuple[float, int, Entry]] = []
        self._seq = itertools.count()
        self._armed = 0
        self._timer: Timer | None = None
        self._timer_at = float("inf")
        self.catch_up: Callable[[], None] | None = None
        """Applies renewals made outside the loop (the lifeline's) to the deadlines; called
        before the alarm cancels anything and before a past deadline is believed."""

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries.values()))

    def add(self, job: ClaimedJob, deadline: float) -> Entry:
        entry = Entry(job=job, deadline=deadline, registry=self)
        self._entries[entry.key] = entry
        return entry

    def get(self, key: tuple[int, int]) -> Entry | None:
        return self._entries.get(key)

    def remove(self, key: tuple[int, int]) -> None:
        self._entries.pop(key, None)

    def counts(self) -> Counter[EntryState]:
        return Counter(e.state for e in self._entries.values())

    # ------------------------------------------------------------------ the alarm

    def arm(self, entry: Entry, task: asyncio.Task[object]) -> None:
        """The handler of ``entry`` starts in ``task``: ring at min(deadline, timeout_at)."""
        entry.task = task
        self._armed += 1
        self._push(entry)

    def disarm(self, entry: Entry) -> None:
        """The handler ended (however): its alarm no longer rings."""
        if entry.task is None:
            return
        entry.task = None
        self._armed -= 1
        if len(self._alarms) > 2 * self._armed + 64:
            live = [i for i in self._alarms if i[2].task is not None and i[2].alarm == i[0]]
            heapq.heapify(live)
            self._alarms = live

    def rearm(self, entry: Entry, deadline: float) -> None:
        """A renewal moved the attempt's deadline on. Never back: a beat that was in
        flight while the loop was blocked may answer after the lifeline's later renewals
        were applied, and its older start must not shorten the deadline they set."""
        if deadline <= entry.deadline:
            return
        entry.deadline = deadline
        # An attempt already stopping (its alarm rang in this very loop iteration, or it
        # was fired) is not brought back: its handler is being cancelled.
        if entry.task is not None and not entry.expired and entry.stop_reason is None:
            self._push(entry)

    def fire(self, entry: Entry, reason: Outcome, now: float) -> None:
        """Ask an attempt to stop now: a running handler is cancelled; a Claimed entry is
        skipped by its executor. A Finalizing entry is left to its write."""
        if entry.state is EntryState.FINALIZING or entry.stop_reason is not None:
            return
        entry.stop_reason = reason
        if entry.task is not None and not entry.expired:
            self._expire(entry)

    def _push(self, entry: Entry) -> None:
        when = min(entry.deadline, entry.timeout_at)
        entry.alarm = when
        if when == float("inf"):
            return
        heapq.heappush(self._alarms, (when, next(self._seq), entry))
        if when < self._timer_at:
            self._schedule(when)

    def _schedule(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self.clock.call_at(when, self._ring)

    def _ring(self) -> None:
        self._timer, self._timer_at = None, float("inf")
        # The alarm may ring first thing after a long block of the loop (timers run before
        # anything else the loop had queued): deadlines moved on by the lifeline's renewals
        # during the block are applied before any attempt is cancelled for its deadline.
        if self.catch_up is not None:
            self.catch_up()
        # The loop's timers are rounded to the millisecond: what is due within one counts.
        now = self.clock.now() + 0.001
        alarms = self._alarms
        while alarms and alarms[0][0] <= now:
            when, _, entry = heapq.heappop(alarms)
            if entry.task is not None and not entry.expired and entry.alarm == when:
                self._expire(entry)
        while alarms and (alarms[0][2].task is None or alarms[0][2].alarm != alarms[0][0]):
            heapq.heappop(alarms)  # stale: finished or re-armed since
        if alarms:
            self._schedule(alarms[0][0])

    @staticmethod
    def _expire(entry: Entry) -> None:
        entry.expired = True
        assert entry.task is not None
        entry.task.cancel()


class Permits:
    """Claims held and not yet handed to the finalizer: a claim takes a row only for a free
    executor, so nothing waits in memory for an executor."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.free = total
        self.closed = False
        self._available = asyncio.Event()
        self._available.set()

    def close(self) -> None:
        """Wake a waiting ``take_all`` for good: the claimer is stopping."""
        self.closed = True
        self._available.set()

    async def take_all(self) -> int:
        """Wait for one permit, then take every other free one (0 once closed)."""
        while self.free == 0:
            if self.closed:
                return 0
            self._available.clear()
            await self._available.wait()
        taken, self.free = self.free, 0
        self._available.clear()
        return taken

    def release(self, n: int = 1) -> None:
        if n <= 0:
            return
        self.free += n
        if self.free > self.total:
            raise RuntimeError(f"permits over-released: {self.free} free of {self.total}")
        self._available.set()
