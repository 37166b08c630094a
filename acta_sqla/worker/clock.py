"""The worker's clock: loop time for deadlines and waits, injectable for tests.

Local waits use the event loop's monotonic clock; every lease and due-time comparison is
made by the database with ``now()``, so a skewed host clock changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Protocol


class Timer(Protocol):
    """What :meth:`Clock.call_at` returns: a pending callback that can be cancelled."""

    def cancel(self) -> None: ...


class Clock:
    """Loop time, sleeps, waits and timers. Stages take one (``clock=``) so that unit tests
    can drive deadlines and windows with ``tests/unit/fakes.FakeClock`` instead of wall time."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        # Called several times per job: keep the loop instead of looking it up each time.
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def now(self) -> float:
        return self._running_loop().time()

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` on the loop at loop time ``when`` (the registry's one alarm)."""
        return self._running_loop().call_at(when, callback)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def timeout(self, seconds: float) -> contextlib.AbstractAsyncContextManager[Any]:
        """``async with clock.timeout(s):`` raises TimeoutError when ``s`` seconds pass
        (the finalizer's 50 ms batch window)."""
        return asyncio.timeout(seconds)

    async def wait(self, event: asyncio.Event, seconds: float) -> bool:
        """Wait for ``event`` at most ``seconds``; True if it was set."""
        if event.is_set():
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await event.wait()
        return event.is_set()
