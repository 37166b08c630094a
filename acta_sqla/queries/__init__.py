"""Every statement acta sends, one named builder each; no I/O here (``store`` runs them).

* ``queries.session``: statements on the application's own SQLAlchemy session (enqueue,
  cancel, retry).
* ``queries.worker``: the worker's statements (:class:`WorkerSQL`), plain SQL for asyncpg.

Names are resolved lazily, so a worker process never imports SQLAlchemy for them.
"""

from __future__ import annotations

import importlib
from typing import Any

_WORKER_NAMES = {"WorkerSQL"}


def __getattr__(name: str) -> Any:
    module = "worker" if name in _WORKER_NAMES else "session"
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
