"""The one place that talks to PostgreSQL at run time: URLs, connections, the statements of
`queries`, rows turned into frozen values, and database errors turned into acta errors."""

from __future__ import annotations

import re

from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, ExceptionContext, make_url

from .errors import DuplicateJob
from .settings import ActaSettings


def database_url(settings: ActaSettings) -> str:
    """The configured URL, or the embedded default's (started on demand)."""
    if settings.database_url:
        return settings.database_url
    from . import embedded

    return embedded.start(settings.data_dir)


def _url(url: str | URL) -> URL:
    return url if isinstance(url, URL) else make_url(url)


def async_url(url: str | URL) -> str:
    """The URL with the asyncpg driver, as SQLAlchemy's async engine wants it."""
    return _url(url).set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)


def asyncpg_dsn(url: str | URL) -> str:
    """The URL as a plain libpq-style DSN, as ``asyncpg.connect`` wants it."""
    return _url(url).set(drivername="postgresql").render_as_string(hide_password=False)


# ---------------------------------------------------------------- database errors → acta errors

_UNIQUE_INDEX = "job_unique_key_idx"
_KEY_DETAIL = re.compile(r"Key \(namespace, unique_key\)=\((?P<ns>.*?), (?P<key>.*)\) already exists")


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
    if not event.contains(Engine, "handle_error", _translate_error):
        event.listen(Engine, "handle_error", _translate_error)
