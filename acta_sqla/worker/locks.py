"""Named locks held by an execution: ``async with ctx.lock("account:42"): ...``.

A lock row names its holder's (job, execution) pair and carries a lease the heartbeat
renews with the job's own. A lock not renewed cancels its attempt; a lock whose holder
stopped renewing expires with the lease and may be taken by another execution; a lock
is released when its ``async with`` block ends, and never outlives its execution by more
than one lease.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Protocol

from loguru import logger

from ..errors import LockUnavailable
from ..policy import Refused, check_key, shown
from .clock import Clock
from .inflight import Entry

log = logger.bind(stage="locks")


class LockStore(Protocol):
    async def take_lock(self, name: str, job_id: int, execution_id: int) -> bool: ...
    async def release_lock(self, name: str, job_id: int, execution_id: int) -> None: ...


class Locker:
    """Takes and releases the named locks of one running attempt."""

    def __init__(self, store: LockStore, entry: Entry, clock: Clock) -> None:
        self.store = store
        self.entry = entry
        self.clock = clock

    @contextlib.asynccontextmanager
    async def hold(self, name: str, wait: float) -> AsyncIterator[None]:
        try:
            # The name is the lock row's key: one PostgreSQL cannot store or index was a
            # failing statement inside the handler instead of this clear error.
            check_key(name)
        except Refused as why:
            raise ValueError(f"lock name {shown(name)} {why}") from None
        job = self.entry.job
        held = self.entry.locks
        if name not in held:
            deadline = self.clock.now() + wait
            delay = 0.05
            while not await self.store.take_lock(name, job.id, job.execution_id):
                left = deadline - self.clock.now()
                if left <= 0:
                    raise LockUnavailable(name, wait)
                await self.clock.sleep(min(delay, left))
                delay = min(delay * 2, 1.0)
        held[name] = held.get(name, 0) + 1
        try:
            yield
        finally:
            held[name] -= 1
            if held[name] == 0:
                del held[name]
                try:
                    # Shielded: a cancelled handler still gives its lock back now rather
                    # than one lease later.
                    await asyncio.shield(self.store.release_lock(name, job.id, job.execution_id))
                except Exception as exc:
                    log.bind(event="lock_release_failed", lock=name).warning(
                        "could not release lock {!r} ({}); it expires with its lease", name, exc
                    )
