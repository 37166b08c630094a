"""The worker's clock: loop time for deadlines and waits, injectable for tests.

Local waits use the event loop's monotonic clock; every lease and due-time comparison is
made by the database with ``now()``, so a skewed host clock changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib


class Clock:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def now(self) -> float:
        # Called several times per job: keep the loop instead of looking it up each time.
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = asyncio.get_running_loop()
        return loop.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def wait(self, event: asyncio.Event, seconds: float) -> bool:
        """Wait for ``event`` at most ``seconds``; True if it was set."""
        if event.is_set():
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await event.wait()
        return event.is_set()
