"""Reaching the database from the application's side: the URL (the configured one or the
embedded default's), its asyncpg spelling, engines for acta's own commands, and the ORM's
database errors turned into acta errors (``DuplicateJob``).

One URL serves every path: the worker connects with asyncpg from :func:`asyncpg_dsn`, and
the engines of acta's commands (and of the dashboard) connect through the very same asyncpg
call (:func:`create_engine`), so a libpq parameter such as ``?sslmode=require`` means the
same thing everywhere. SQLAlchemy's own asyncpg dialect would instead pass each query
parameter to ``asyncpg.connect`` as a keyword argument, which refuses ``sslmode``.

SQLAlchemy is imported inside the functions that need it: the worker's own path (asyncpg
only) imports this module for :func:`database_url` and :func:`asyncpg_dsn` without loading
it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode

from .errors import ConfigurationError, DuplicateJob
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

_IGNORED_PARAMETERS = frozenset(
    {
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
        "prepared_statement_cache_size",
    }
)
"""libpq parameters of the client's own socket that asyncpg does not implement, and
SQLAlchemy's asyncpg-dialect option ``prepared_statement_cache_size`` (an application's
URL may carry it). Kept in a DSN, asyncpg would send them to the server as settings, which
refuses them ("unrecognized configuration parameter"): they are left out (acta's
connections have their own timeouts and prepare their own statements)."""

_CLIENT_PARAMETERS = _IGNORED_PARAMETERS | {"connect_timeout", "ssl"}
"""Query parameters :func:`connect_arguments` takes out of the DSN (and maybe translates)."""


def connect_arguments(url: str | URL) -> tuple[str, dict[str, Any]]:
    """``(dsn, keyword arguments)`` of ``asyncpg.connect`` for ``url``: the DSN as
    :func:`asyncpg_dsn` spells it, and ``timeout`` from libpq's ``connect_timeout``."""
    text = url if isinstance(url, str) else url.render_as_string(hide_password=False)
    text = _SCHEME.sub("postgresql://", text, count=1)
    base, mark, query = text.partition("?")
    if not mark or not query:
        return text, {}
    query, _, fragment = query.partition("#")
    pairs = parse_qsl(query, keep_blank_values=True)
    names = {name for name, _ in pairs}
    kept: list[tuple[str, str]] = []
    options: dict[str, Any] = {}
    changed = False
    for name, value in pairs:
        if name not in _CLIENT_PARAMETERS:
            kept.append((name, value))
            continue
        changed = True
        if name == "connect_timeout":
            # libpq: whole seconds; zero or negative waits for ever, less than 2 means 2.
            try:
                seconds = int(value.strip())
            except ValueError:
                raise ConfigurationError(
                    f"the database URL's connect_timeout={value!r} is not a whole number of seconds"
                ) from None
            if seconds > 0:
                options["timeout"] = float(max(seconds, 2))
        elif name == "ssl" and "sslmode" not in names:
            # SQLAlchemy's asyncpg dialect spells libpq's sslmode ``ssl`` (``?ssl=require``).
            kept.append(("sslmode", value))
    if not changed:
        return text, {}
    dsn = base + ("?" + urlencode(kept) if kept else "")
    return dsn + (f"#{fragment}" if fragment else ""), options


def asyncpg_dsn(url: str | URL) -> str:
    """The URL as a plain libpq-style DSN, as ``asyncpg.connect`` wants it: the same URL with
    the scheme ``postgresql://`` (SQLAlchemy URLs and libpq URIs quote alike), less the
    libpq parameters asyncpg has no use for (:func:`connect_arguments`)."""
    return connect_arguments(url)[0]


# ---------------------------------------------------------------- engines


def engine_options(schema: str) -> dict[str, Any]:
    """Execution options that point acta's models at ``schema`` (ACTA_SCHEMA) when it is
    not the default ``acta``: ``create_async_engine(url, execution_options=...)``."""
    return {} if schema == SCHEMA else {"schema_translate_map": {SCHEMA: schema}}


def create_engine(url: str | URL, schema: str = SCHEMA) -> AsyncEngine:
    """An async engine (asyncpg) for acta's own commands. Its connections are opened by
    ``asyncpg.connect`` with the worker's own DSN (:func:`connect_arguments`), not from
    SQLAlchemy's reading of the URL: a libpq parameter in the URL (``sslmode``,
    ``application_name``, ``connect_timeout``...) works here as in the worker."""
    import asyncpg
    from sqlalchemy.ext.asyncio import create_async_engine

    dsn, options = connect_arguments(url)

    async def connect() -> asyncpg.Connection:
        return await asyncpg.connect(dsn, **options)

    return create_async_engine(
        "postgresql+asyncpg://", async_creator=connect, execution_options=engine_options(schema)
    )


# ---------------------------------------------------------------- ORM errors → acta errors

_UNIQUE_INDEX = "job_unique_key_idx"
_KEY_DETAIL = re.compile(
    r"Key \(namespace, unique_key\)=\((?P<ns>.*?), (?P<key>.*)\) already exists"
)


_UNIQUE_VIOLATION = "23505"


def _db_error_fields(exc: BaseException | None) -> tuple[str | None, str | None, str | None]:
    """(SQLSTATE, constraint name, detail) of a driver error, for asyncpg and psycopg
    alike."""
    seen = 0
    while exc is not None and seen < 5:
        seen += 1
        sqlstate = getattr(exc, "sqlstate", None)
        constraint = getattr(exc, "constraint_name", None)
        detail = getattr(exc, "detail", None)
        diag = getattr(exc, "diag", None)
        if diag is not None:
            sqlstate = sqlstate or getattr(diag, "sqlstate", None)
            constraint = constraint or getattr(diag, "constraint_name", None)
            detail = detail or getattr(diag, "message_detail", None)
        if constraint:
            return sqlstate, constraint, detail
        exc = exc.__cause__ or getattr(exc, "orig", None)
    return None, None, None


def _translate_error(context: ExceptionContext) -> BaseException | None:
    sqlstate, constraint, detail = _db_error_fields(context.original_exception)
    # Only a unique violation of the unique-key index is a duplicate: an entry too large
    # for that index (54000) names the same constraint, and was reported as a DuplicateJob
    # of key '?' (keys are bounded before the database now: policy.MAX_KEY_BYTES).
    if sqlstate != _UNIQUE_VIOLATION or constraint != _UNIQUE_INDEX:
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
