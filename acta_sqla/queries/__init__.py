"""Every statement acta sends, one named builder each; no I/O here (``store`` runs them).

* ``queries.session``: statements on the application's own SQLAlchemy session (enqueue,
  cancel, retry).
* ``queries.worker``: the worker's statements (:class:`WorkerSQL`), plain SQL for asyncpg,
  rendered from the modules of their concern: ``claim``, ``complete``, ``heartbeat``,
  ``recovery``, ``locks``, ``definitions``, ``workers``.

Names are resolved lazily, so a worker process never imports SQLAlchemy for them.
"""

from __future__ import annotations

import importlib
from typing import Any

_WORKER_NAMES = {"WorkerSQL"}


_SUBMODULES = {"claim", "complete", "definitions", "heartbeat", "locks", "recovery", "workers"}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES or name.startswith("_"):
        # ``from . import claim``: let the import system load the submodule itself.
        raise AttributeError(name)
    module = "worker" if name in _WORKER_NAMES else "session"
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
