"""One lifecycle for the worker's long-lived stages, as River's ``startstop``: the claimer,
the finalizer, the heartbeat and the executors each run their loop in named task(s)
started by ``start(on_ended)``, end it with an idempotent ``stop(...)``, and expose the
one step a test drives (``run_once``) against a fake store and a ``FakeClock``.

The supervisor owns the order (start: consumers before producers; stop: the reverse) and
``on_ended`` (it tells a stage's crash from the plan). What each stop does differs and stays
with its stage: the claimer lets a claim in flight finish, the heartbeat is cancelled, the
finalizer flushes, the executors get a grace; only that it happens once is shared here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

OnEnded = Callable[[asyncio.Task[Any]], None]
"""Called with a stage's task when it ends, whether by plan or by a crash."""


class Stage(Protocol):
    """What the supervisor needs of every stage (``stop`` varies: some take a deadline)."""

    @property
    def tasks(self) -> tuple[asyncio.Task[Any], ...]:
        """The running loops' tasks (empty before ``start``); kept after the stop."""
        ...

    def start(self, on_ended: OnEnded | None = None) -> None: ...


class LoopStage:
    """A stage whose loop (:meth:`run`) is ONE task named :attr:`task_name`: started once,
    never again after its stop (a stop before the start leaves nothing to start)."""

    task_name: ClassVar[str]

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The loop's task (None before ``start``)."""
        return self._task

    @property
    def tasks(self) -> tuple[asyncio.Task[Any], ...]:
        return () if self._task is None else (self._task,)

    @property
    def stopped(self) -> bool:
        return self._stopped

    def start(self, on_ended: OnEnded | None = None) -> None:
        """Run :meth:`run` as the task :attr:`task_name`; ``on_ended`` is called when it
        ends (the supervisor tells a crash from the plan). Idempotent."""
        if self._task is None and not self._stopped:
            self._task = asyncio.create_task(self.run(), name=self.task_name)
            if on_ended is not None:
                self._task.add_done_callback(on_ended)

    def _begin_stop(self) -> bool:
        """Mark the stage stopped; False when it already was (a stop's second call)."""
        if self._stopped:
            return False
        self._stopped = True
        return True

    async def run(self) -> None:
        raise NotImplementedError
