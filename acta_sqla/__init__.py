"""acta-sqla: a durable PostgreSQL job queue for SQLAlchemy 2 applications."""

from .app import Acta as Acta
from .app import EnqueueResult as EnqueueResult
from .app import Handler as Handler
from .context import Context as Context
from .errors import ActaError as ActaError
from .errors import Cancel as Cancel
from .errors import ConfigurationError as ConfigurationError
from .errors import DuplicateJob as DuplicateJob
from .errors import Fail as Fail
from .errors import InvalidJob as InvalidJob
from .errors import InvalidJobArgs as InvalidJobArgs
from .errors import LockUnavailable as LockUnavailable
from .errors import PayloadTooLarge as PayloadTooLarge
from .errors import Retry as Retry
from .errors import UnknownJobKind as UnknownJobKind
from .models import Execution as Execution
from .models import Job as Job
from .models import JobStatus as JobStatus
from .models import Worker as Worker
from .policy import Policy as Policy
from .settings import ActaSettings as ActaSettings
from .store import engine_options as engine_options
from .store import install_error_translation as _install_error_translation

__version__ = "0.1.0"

__all__ = [
    "Acta",
    "ActaError",
    "ActaSettings",
    "Cancel",
    "ConfigurationError",
    "Context",
    "DuplicateJob",
    "EnqueueResult",
    "Execution",
    "Fail",
    "Handler",
    "InvalidJob",
    "InvalidJobArgs",
    "Job",
    "JobStatus",
    "LockUnavailable",
    "PayloadTooLarge",
    "Policy",
    "Retry",
    "UnknownJobKind",
    "Worker",
    "__version__",
    "engine_options",
]

_install_error_translation()

# The library never configures log sinks: applications (and the `acta` CLI) enable it.
from loguru import logger as _logger  # noqa: E402

_logger.disable("acta_sqla")
