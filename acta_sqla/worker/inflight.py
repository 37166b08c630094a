"""The in-flight registry: every claim from the moment it is taken until its completion has
committed (Claimed → Executing → Finalizing → removed), and the permits that bound it.

Who writes what:
- the claimer adds entries (Claimed) with their first deadline;
- the executor moves an entry to Executing and Finalizing and owns ``scope``;
- the heartbeat re-arms ``deadline`` and sets ``stop_reason`` (through :meth:`fire`);
- the finalizer removes an entry once its write has landed (or been fenced out).
All of this happens on one event loop, so no lock is needed.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from ..values import ClaimedJob, Outcome


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
    scope: asyncio.Timeout | None = field(default=None, repr=False)
    locks: dict[str, int] = field(default_factory=dict)
    """Named locks this attempt holds (with how deep), renewed by the heartbeat."""

    @property
    def key(self) -> tuple[int, int]:
        return (self.job.id, self.job.execution_id)

    def fired(self, now: float) -> bool:
        """True once the attempt must stop: asked to, or past its deadline."""
        return self.stop_reason is not None or now >= self.deadline

    def rearm(self, deadline: float) -> None:
        self.deadline = deadline
        # A scope whose timer already fired (EXPIRING, in this very loop iteration) cannot
        # be rescheduled; its handler is being cancelled and the executor reports why.
        if self.scope is not None and self.stop_reason is None and not self.scope.expired():
            self.scope.reschedule(min(self.deadline, self.timeout_at))


class Registry:
    def __init__(self) -> None:
        self._entries: dict[tuple[int, int], Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries.values()))

    def add(self, job: ClaimedJob, deadline: float) -> Entry:
        entry = Entry(job=job, deadline=deadline)
        self._entries[entry.key] = entry
        return entry

    def get(self, key: tuple[int, int]) -> Entry | None:
        return self._entries.get(key)

    def remove(self, key: tuple[int, int]) -> None:
        self._entries.pop(key, None)

    def counts(self) -> Counter[EntryState]:
        return Counter(e.state for e in self._entries.values())

    def fire(self, entry: Entry, reason: Outcome, now: float) -> None:
        """Ask an attempt to stop now: a running handler is cancelled; a Claimed entry is
        skipped by its executor. A Finalizing entry is left to its write."""
        if entry.state is EntryState.FINALIZING or entry.stop_reason is not None:
            return
        entry.stop_reason = reason
        if entry.scope is not None and not entry.scope.expired():
            entry.scope.reschedule(now)


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
