"""acta's logs for applications: the bridge to the standard library's ``logging``, and the
worker's line format.

acta logs with loguru and, being a library, is silent until an application enables it
(the ``acta`` CLI does, with :func:`worker_format`). An application whose logs go through
the standard library (uvicorn, Sentry, most log shippers) calls one function::

    import acta_sqla.logging

    acta_sqla.logging.to_stdlib()

Every loguru record from then on -- acta's own and those a handler writes with ``ctx.log``
-- is handed to the standard library logger of the module that logged it
(``acta_sqla.worker.executor``, or your handler's module), where your handlers, levels and
filters apply. The job's fields ride along as attributes of the ``LogRecord``
(``job_id``, ``kind``, ``attempt``, ``trace_id``: None on a line about no job), so a
format such as ``"%(levelname)s %(name)s job=%(job_id)s %(message)s"`` shows them.

(This module is ``acta_sqla.logging``: modules inside the package import the standard
library's ``logging`` as usual, imports being absolute.)
"""

from __future__ import annotations

import logging
from typing import Any

from loguru import logger

JOB_FIELDS = ("job_id", "kind", "attempt", "trace_id")
"""What loguru's ``extra`` carries about a job (``ctx.log`` binds them; the worker binds
some on its own lines about a job), copied onto the stdlib records."""

_BASE = "<dim>{time:HH:mm:ss}</dim> <level>{level: <7}</level> {message}"


class StdlibBridge(logging.Handler):
    """A loguru sink handing each record to the standard library logger of its module
    (loguru's documented ``PropagateHandler``), with the job's fields as attributes."""

    def emit(self, record: logging.LogRecord) -> None:
        extra: dict[str, Any] = getattr(record, "extra", None) or {}
        for field in JOB_FIELDS:
            if not hasattr(record, field):
                setattr(record, field, extra.get(field))
        target = logging.getLogger(record.name)
        if target.isEnabledFor(record.levelno):
            target.handle(record)


def to_stdlib(level: str | int = "DEBUG") -> int:
    """Send acta's log records (and every other loguru record of the process) to the
    standard library's ``logging``, from ``level`` up (stdlib's levels then filter as
    usual). Enables acta's logs, which the library keeps disabled until asked. Returns
    the loguru sink's id (``loguru.logger.remove(id)`` undoes it)."""
    sink = logger.add(StdlibBridge(), level=level, format="{message}")
    logger.enable("acta_sqla")
    return sink


def worker_format(record: Any) -> str:
    """The ``acta`` CLI's line format (a loguru format function): the time, the level and
    the message, then, on a line about a job, its id, kind, attempt and trace id."""
    extra = record["extra"]
    tail = ""
    if "job_id" in extra:
        tail = " <dim>[job {extra[job_id]}"
        if "kind" in extra:
            tail += " {extra[kind]}"
        if "attempt" in extra:
            tail += " attempt {extra[attempt]}"
        if extra.get("trace_id"):
            tail += " trace {extra[trace_id]}"
        tail += "]</dim>"
    return _BASE + tail + "\n{exception}"
