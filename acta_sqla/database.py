"""Reaching the database from the application's side: the URL (the configured one or the
embedded default's), its asyncpg and SQLAlchemy spellings, engines for acta's own commands,
and the ORM's database errors turned into acta errors (``DuplicateJob``).

SQLAlchemy is imported inside the functions that need it: the worker's own path (asyncpg
only) imports this module for :func:`database_url` and :func:`asyncpg_dsn` without loading
it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from .errors import DuplicateJob
from .schema import SCHEMA

if TYPE_CHECKING:
    from sqlalchemy.engine import URL, ExceptionContext
    from sqlalchemy.ext.asyncio import AsyncEngine

    from .settings import ActaSettings


def database_url(settings: ActaSettings) -> str:
    """The configured URL, or the embedded default's (started on demand)."""
    if settings.database_url:
        return settings.database_url
    from . import embedded

    return embedded.start(settings.data_dir)


_SCHEME = re.compile(r"^(postgresql|postgres)(\+[A-Za-z0-9_]+)?://")


def async_url(url: str | URL) -> str:
    """The URL with the asyncpg driver, as SQLAlchemy's async engine wants it."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url) if isinstance(url, str) else url
    return parsed.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)


def asyncpg_dsn(url: str | URL) -> str:
    """The URL as a plain libpq-style DSN, as ``asyncpg.connect`` wants it: the same URL with
    the scheme ``postgresql://`` (SQLAlchemy URLs and libpq URIs quote alike)."""
    text = url if isinstance(url, str) else url.render_as_string(hide_password=False)
    return _SCHEME.sub("postgresql://", text, count=1)


# ---------------------------------------------------------------- engines


def engine_options(schema: str) -> dict[str, Any]:
    """Execution options that point acta's models at ``schema`` (ACTA_SCHEMA) when it is
    not the default ``acta``: ``create_async_engine(url, execution_options=...)``."""
    return {} if schema == SCHEMA else {"schema_translate_map": {SCHEMA: schema}}


def create_engine(url: str, schema: str) -> AsyncEngine:
    """An async engine (asyncpg) for acta's own commands."""
    from sqlalchemy.ext.asyncio import create_async_engine

    return create_async_engine(async_url(url), execution_options=engine_options(schema))


# ---------------------------------------------------------------- ORM errors → acta errors

_UNIQUE_INDEX = "job_unique_key_idx"
_KEY_DETAIL = re.compile(
    r"Key \(namespace, unique_key\)=\((?P<ns>.*?), (?P<key>.*)\) already exists"
)


def _db_error_fields(exc: BaseException | None) -> tuple[str | None, str | None]:
    """(constraint name, detail) of a driver error, for asyncpg and psycopg alike."""
    seen = 0
    while exc is not None and seen < 5:
        seen += 1
        constraint = getattr(exc, "constraint_name", None)
        detail = getattr(exc, "detail", None)
        diag = getattr(exc, "diag", None)
        if diag is not None:
            constraint = constraint or getattr(diag, "constraint_name", None)
            detail = detail or getattr(diag, "message_detail", None)
        if constraint:
            return constraint, detail
        exc = exc.__cause__ or getattr(exc, "orig", None)
    return None, None


def _translate_error(context: ExceptionContext) -> BaseException | None:
    constraint, detail = _db_error_fields(context.original_exception)
    if constraint != _UNIQUE_INDEX:
        return None
    match = _KEY_DETAIL.search(detail or "")
    if match is None:
        return DuplicateJob("?", "?")
    return DuplicateJob(match["ns"], match["key"])


def install_error_translation() -> None:
    """Make a plain ``session.add`` of a duplicate unique job raise ``DuplicateJob`` (naming
    the key) instead of a bare IntegrityError, on every engine, sync or async."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if not event.contains(Engine, "handle_error", _translate_error):
        event.listen(Engine, "handle_error", _translate_error)
