"""Defaults that a command's signature shows before any setting is read: ``acta worker
--help`` and ``acta --help`` print them without importing pydantic-settings (``settings``
re-exports them with its other constants)."""

from __future__ import annotations

DEFAULT_GRACE_SECONDS = 30.0
"""Seconds running handlers get to finish when a worker is asked to stop."""
