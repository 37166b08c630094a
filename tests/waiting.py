"""Waiting in tests: poll a condition with a deadline, never sleep and hope.

``wait_for`` blocks (for tests that drive other processes); ``until`` yields to the event
loop (for async tests whose subject runs on the same loop). Both return the predicate's
first truthy value and fail, naming what they waited for, once the deadline passes.
Both poll at ``interval`` first, then less and less often (x1.5 a poll, up to
``max(interval, SLOWEST)``): a condition met at once is seen at once, and a long wait does
not ask the database 50 times a second while other tests need the same two cores.
``until_lock_waiters`` waits until statements sent elsewhere are queued on a lock in the
server (the moment a concurrency test must reach before it lets the holder go).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

import asyncpg

SLOWEST = 0.1
"""The longest pause between two polls (unless the caller's own interval is longer)."""


def _next(pause: float, slowest: float) -> float:
    return min(pause * 1.5, slowest)


def _timed_out(timeout: float, what: str, predicate: object) -> AssertionError:
    return AssertionError(f"timed out after {timeout:g}s waiting for {what or predicate}")


def wait_for(
    predicate: Callable[[], object], timeout: float = 30.0, what: str = "", interval: float = 0.02
) -> Any:
    deadline = time.monotonic() + timeout
    pause, slowest = interval, max(interval, SLOWEST)
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise _timed_out(timeout, what, predicate)
        time.sleep(pause)
        pause = _next(pause, slowest)
    return value


async def until(
    predicate: Callable[[], object], timeout: float = 30.0, what: str = "", interval: float = 0.002
) -> Any:
    """As ``wait_for``, on the event loop; ``predicate`` may also return an awaitable (a
    question asked of the database), whose result is the condition."""
    deadline = time.monotonic() + timeout
    pause, slowest = interval, max(interval, SLOWEST / 5)
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(timeout, what, predicate)
        await asyncio.sleep(pause)
        pause = _next(pause, slowest)


async def until_lock_waiters(
    conn: asyncpg.Connection, waiters: int = 1, timeout: float = 30.0, interval: float = 0.002
) -> None:
    """Until at least ``waiters`` lock requests wait ungranted in the server (``pg_locks``),
    asked on ``conn``."""

    async def enough() -> bool:
        return await conn.fetchval("SELECT count(*) FROM pg_locks WHERE NOT granted") >= waiters

    await until(enough, timeout, f"{waiters} waiter(s) on a lock", interval)
