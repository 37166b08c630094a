"""The worker's fault-injection seam, for ``acta_sqla.testing.faults`` (tests only).

``active`` is None unless a test armed a fault: each seam below costs one module attribute
read (at a claim, at a handler's start, before a completion write, at a connect), and a
production worker never sets it. The worker running the current task is ``current`` (a
context variable set by ``Worker.run``: its stages' tasks inherit it), so that a fault
reached in a stage knows which worker to kill.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Protocol

__all__ = ["POINTS", "Faults", "active", "current"]

POINTS = ("after_claim", "in_handler", "before_completion_commit")
"""Where ``crash_at`` can stop a worker dead."""


class Faults(Protocol):
    async def reached(self, point: str) -> None:
        """A worker's stage reached ``point`` (one of ``POINTS``); may kill the worker
        (``Worker.kill``) or, before a completion write, raise the write's failure."""
        ...

    def connecting(self, application_name: str) -> None:
        """A worker connection is about to open; raises ``OSError`` to refuse it."""
        ...


active: Faults | None = None
"""The armed faults (None: none; the seams do nothing)."""

worker_process = False
"""Set by ``acta worker`` (the CLI) in its process: ``acta_sqla.testing.inline`` then
refuses, as the worker runs the jobs."""

current: ContextVar[Any] = ContextVar("acta_worker", default=None)
"""The ``Worker`` whose ``run`` the current task belongs to (None outside a worker)."""
