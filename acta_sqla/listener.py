"""LISTEN for the namespace's new-job notifications, on a connection of its own that comes
back after a killed connection or a database restart."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import asyncpg
from loguru import logger

from . import _faults
from .connections import app_name
from .errors import brief


class Listener:
    """LISTEN on the namespace's channel, on its own connection, re-established after a
    killed connection or a database restart; every notification (and every reconnect,
    which may have missed some) calls ``on_notify``."""

    def __init__(self, dsn: str, channel: str, on_notify: Callable[[], None]) -> None:
        self.dsn = dsn
        self.channel = channel
        self.on_notify = on_notify
        self.application_name = app_name("listen")
        self.connected = asyncio.Event()
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._conn: asyncpg.Connection | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="acta-listener")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            conn.terminate()

    def _notified(self, *_: Any) -> None:
        self.on_notify()

    def _terminated(self, *_: Any) -> None:
        self._lost.set()

    async def _run(self) -> None:
        delay = 0.5
        log = logger.bind(stage="listener")
        while True:
            try:
                if _faults.active is not None:  # tests only: a simulated outage
                    _faults.active.connecting(self.application_name)
                conn = await asyncpg.connect(
                    self.dsn,
                    timeout=10,
                    server_settings={"application_name": self.application_name},
                )
                self._lost.clear()
                conn.add_termination_listener(self._terminated)
                await conn.add_listener(self.channel, self._notified)
                self._conn = conn
            except Exception as exc:
                self.connected.clear()
                log.bind(event="listen_failed").warning(
                    "cannot LISTEN, retrying in {:.1f}s: {}", delay, brief(exc)
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            delay = 0.5
            self.connected.set()
            # Whatever was notified while we were not listening is picked up by one claim.
            self.on_notify()
            while not self._lost.is_set():
                # A silently dead socket never reports termination: probe it now and then.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(5.0):
                        await self._lost.wait()
                if self._lost.is_set():
                    break
                try:
                    await conn.execute("SELECT 1", timeout=5.0)
                except Exception:
                    break
            self.connected.clear()
            log.bind(event="listen_lost").warning("LISTEN connection lost; reconnecting")
            conn.terminate()
            self._conn = None
