"""Defaults that a command's signature shows before any setting is read: ``acta worker
--help`` and ``acta --help`` print them without importing pydantic-settings (``settings``
re-exports them with its other constants)."""

from __future__ import annotations

DEFAULT_GRACE_SECONDS = 30.0
"""Seconds running handlers get to finish when a worker is asked to stop."""

DEFAULT_FORCED_STOP_SECONDS = 10.0
"""Seconds a stopping worker waits, once the grace is over and it has cancelled the handlers
still running, for them to end (``ACTA_FORCED_STOP_WAIT``, ``acta worker
--forced-stop-wait``)."""
