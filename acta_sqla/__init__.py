"""acta-sqla: a durable PostgreSQL job queue for SQLAlchemy 2 applications.

The public names load on first use: ``from acta_sqla import Acta`` in a worker does not
import the ORM models (and SQLAlchemy with them) unless something asks for ``Job``.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from loguru import logger as _logger

__version__ = "0.1.0"

_EXPORTS: dict[str, tuple[str, str]] = {
    "Acta": (".app", "Acta"),
    "ActaError": (".errors", "ActaError"),
    "ActaSettings": (".settings", "ActaSettings"),
    "Breaker": (".policy", "Breaker"),
    "Cancel": (".errors", "Cancel"),
    "ConfigurationError": (".errors", "ConfigurationError"),
    "Context": (".context", "Context"),
    "DeadlockDetected": (".errors", "DeadlockDetected"),
    "DuplicateJob": (".errors", "DuplicateJob"),
    "EnqueueResult": (".session", "EnqueueResult"),
    "Execution": (".models", "Execution"),
    "Fail": (".errors", "Fail"),
    "Handler": (".handler", "Handler"),
    "InvalidJob": (".errors", "InvalidJob"),
    "InvalidJobArgs": (".errors", "InvalidJobArgs"),
    "Job": (".models", "Job"),
    "JobBatch": (".handler", "JobBatch"),
    "JobStatus": (".status", "JobStatus"),
    "LockUnavailable": (".errors", "LockUnavailable"),
    "PayloadTooLarge": (".errors", "PayloadTooLarge"),
    "Policy": (".policy", "Policy"),
    "Rate": (".policy", "Rate"),
    "Retry": (".errors", "Retry"),
    "UnknownJobKind": (".errors", "UnknownJobKind"),
    "UniqueKeyHeld": (".errors", "UniqueKeyHeld"),
    "WorkerRow": (".models", "WorkerRow"),
    "Child": (".waits", "Child"),
    "InvalidSignal": (".errors", "InvalidSignal"),
    "JobActive": (".errors", "JobActive"),
    "JobFinished": (".errors", "JobFinished"),
    "JobNotFound": (".errors", "JobNotFound"),
    "WaitForChildren": (".waits", "WaitForChildren"),
    "WaitForSignal": (".waits", "WaitForSignal"),
    "engine_options": (".database", "engine_options"),
}

__all__ = [
    "Acta",
    "ActaError",
    "ActaSettings",
    "Breaker",
    "Cancel",
    "Child",
    "ConfigurationError",
    "Context",
    "DeadlockDetected",
    "DuplicateJob",
    "EnqueueResult",
    "Execution",
    "Fail",
    "Handler",
    "InvalidJob",
    "InvalidJobArgs",
    "InvalidSignal",
    "Job",
    "JobActive",
    "JobBatch",
    "JobFinished",
    "JobNotFound",
    "JobStatus",
    "LockUnavailable",
    "PayloadTooLarge",
    "Policy",
    "Rate",
    "Retry",
    "UniqueKeyHeld",
    "UnknownJobKind",
    "WaitForChildren",
    "WaitForSignal",
    "WorkerRow",
    "__version__",
    "engine_options",
]

if TYPE_CHECKING:
    from .app import Acta as Acta
    from .context import Context as Context
    from .database import engine_options as engine_options
    from .errors import ActaError as ActaError
    from .errors import Cancel as Cancel
    from .errors import ConfigurationError as ConfigurationError
    from .errors import DeadlockDetected as DeadlockDetected
    from .errors import DuplicateJob as DuplicateJob
    from .errors import Fail as Fail
    from .errors import InvalidJob as InvalidJob
    from .errors import InvalidJobArgs as InvalidJobArgs
    from .errors import InvalidSignal as InvalidSignal
    from .errors import JobActive as JobActive
    from .errors import JobFinished as JobFinished
    from .errors import JobNotFound as JobNotFound
    from .errors import LockUnavailable as LockUnavailable
    from .errors import PayloadTooLarge as PayloadTooLarge
    from .errors import Retry as Retry
    from .errors import UniqueKeyHeld as UniqueKeyHeld
    from .errors import UnknownJobKind as UnknownJobKind
    from .handler import Handler as Handler
    from .handler import JobBatch as JobBatch
    from .models import Execution as Execution
    from .models import Job as Job
    from .models import JobStatus as JobStatus
    from .models import WorkerRow as WorkerRow
    from .policy import Breaker as Breaker
    from .policy import Policy as Policy
    from .policy import Rate as Rate
    from .session import EnqueueResult as EnqueueResult
    from .settings import ActaSettings as ActaSettings
    from .waits import Child as Child
    from .waits import WaitForChildren as WaitForChildren
    from .waits import WaitForSignal as WaitForSignal


_DEPRECATED: dict[str, tuple[str, str, str]] = {
    "Worker": (
        ".models",
        "WorkerRow",
        "acta_sqla.Worker is the ORM row of acta.worker, now exported as acta_sqla.WorkerRow;"
        " the process that runs jobs is acta_sqla.worker.Worker",
    ),
}
"""Old public names: still served, with a DeprecationWarning on every access."""


def __getattr__(name: str) -> Any:
    if name in _DEPRECATED:
        module, attr, message = _DEPRECATED[name]
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(module, __name__), attr)
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module, __name__), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


# The library never configures log sinks: applications (and the `acta` CLI) enable it.
_logger.disable("acta_sqla")
