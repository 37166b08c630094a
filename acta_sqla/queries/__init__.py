"""Every statement acta sends, one named builder each with its one-line purpose; no I/O
here (the store, the session helpers and the read model run them).

* ``queries.catalogue``: the worker's statements (:class:`WorkerSQL`), plain SQL for asyncpg,
  rendered once per worker from the modules of their concern: ``claim``, ``complete``,
  ``heartbeat``, ``recovery``, ``locks``, ``definitions``, ``workers``. No SQLAlchemy.
* ``queries.session``: statements on the application's own SQLAlchemy session (enqueue,
  cancel, retry).
* ``queries.inspect``: the read model's statements (queue depth, workers, job listings,
  one job's detail), run by ``acta_sqla.inspect``.
* ``queries.admin``: acta's own tools (the migrations' view of the schema, the test
  helper); ``queries.demo``: ``acta demo``'s.

Status sets are rendered from ``status.py`` (``queries._render``), never spelled here.
``tests/unit/sql_catalogue.sql`` holds every statement as rendered, so that a change to
any of them shows in one diff (tests/unit/test_sql_catalogue.py).

Names are resolved lazily, so a worker process never imports SQLAlchemy for them.
"""

from __future__ import annotations

import importlib
from typing import Any

_WORKER_NAMES = {"WorkerSQL"}


_SUBMODULES = {
    "admin",
    "admission",
    "breakers",
    "claim",
    "complete",
    "definitions",
    "demo",
    "heartbeat",
    "inspect",
    "locks",
    "recovery",
    "schedules",
    "session",
    "waits",
    "worker",
    "workers",
}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES or name.startswith("_"):
        # ``from . import claim``: let the import system load the submodule itself.
        raise AttributeError(name)
    module = "worker" if name in _WORKER_NAMES else "session"
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
