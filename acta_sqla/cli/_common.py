"""Shared by the ``acta`` sub-commands: settings, logging, and errors as one line.

A user's mistake (a bad setting, a bad URL, a database that is down, an unknown revision)
is reported as ``acta <command>: <what went wrong>`` on stderr with a non-zero exit status,
never as a traceback. A bug in acta still shows its traceback.
"""

from __future__ import annotations

import functools
import gc
import importlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar, overload

from loguru import logger

from ..errors import ActaError, ConfigurationError, describe_error

if TYPE_CHECKING:
    from ..settings import ActaSettings

# Imported where they are used, not with this module: ``acta --help`` and ``acta worker
# --help`` load neither pydantic-settings (``..settings``) nor asyncpg. The error checks
# below ask only modules already loaded: an exception of a class from a module that was
# never imported cannot exist.

P = ParamSpec("P")
R = TypeVar("R")

EXIT_FAILURE = 1
"""The command could not do its work (database unreachable, migration refused, …)."""
EXIT_CONFIGURATION = 2
"""A setting or option has a value acta cannot use (as Click's usage errors)."""
EXIT_INTERRUPTED = 130


def started() -> None:
    """A long-running command is built: freeze what start-up allocated out of every later
    garbage collection and let the collector run again (``main`` paused it; see
    ``acta_sqla/cli/__init__.py``). A no-op when the collector already runs: a command
    invoked in-process (a test, ``typer.testing``) leaves its process's collector alone."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def _loaded(module: str, *names: str) -> tuple[type[BaseException], ...]:
    """The exception classes ``names`` of ``module`` if it is loaded, else none: what was
    never imported raised nothing, so a failing command imports no library to classify
    its error (SQLAlchemy and Alembic, asked here, take a few hundred ms to import)."""
    loaded = sys.modules.get(module)
    if loaded is None:
        return ()
    return tuple(found for name in names if (found := getattr(loaded, name, None)) is not None)


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean the user's setup is wrong or unavailable, not that acta has a bug."""
    return (
        ActaError,
        *_loaded("asyncpg", "PostgresError", "InterfaceError"),
        OSError,  # refused, unreachable, unknown host, timeouts (TimeoutError is an OSError)
        # The embedded server's pg_ctl/initdb/psql failed.
        subprocess.CalledProcessError,
        subprocess.TimeoutExpired,
        # Connection refused, unknown database, permission denied, …; a URL SQLAlchemy
        # cannot parse.
        *_loaded("sqlalchemy.exc", "DBAPIError", "ArgumentError"),
        *_loaded("alembic.util", "CommandError"),  # unknown revision, nothing to downgrade
    )


OPTIONS = {
    "database_url": "--database-url",
    "db_schema": "--schema",
    "data_dir": "--data-dir",
    "namespace": "--namespace",
}
"""The commands' options for the settings they override, as an error names them."""


def load_cli_settings(**overrides: Any) -> ActaSettings:
    """Settings from the environment and ``.env``, with the command line's options on top
    (``None`` means "not given"). A bad value raises ConfigurationError naming it: the
    option when it came from the command line, else the ``ACTA_*`` variable."""
    from ..settings import load_settings

    return load_settings(OPTIONS, **overrides)


def printable(text: object) -> str:
    """``text`` for the terminal: control characters (an escape sequence in a kind's name or
    a handler's error message would drive the user's terminal) shown escaped, as ``repr``
    shows them; everything printable unchanged."""
    value = str(text)
    if value.isprintable():
        return value
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in value)


def cli_namespace(given: str | None) -> str:
    """The namespace a command acts on: ``--namespace`` (checked as ``ACTA_NAMESPACE`` is:
    a mistyped one is a one-line error, not an empty answer), else ``ACTA_NAMESPACE``, else
    ``default``."""
    from ..settings import NAMESPACE_PATTERN, NAMESPACE_RULE

    if given is None:
        return load_cli_settings().namespace
    if not NAMESPACE_PATTERN.match(given):
        raise ConfigurationError(f"--namespace {given!r}: {NAMESPACE_RULE}")
    return given


def configure_logging(level: str = "INFO") -> None:
    """Send acta's logs to stderr, one short line each. Only the CLI does this: the library
    itself never configures log sinks. A line about a job ends with its id, kind, attempt
    and trace id (``acta_sqla.logging.worker_format``)."""
    logger.remove()
    add_cli_sink(level)


def add_cli_sink(level: str = "INFO") -> int:
    """The CLI's sink beside whatever sinks there are (stderr, one short line each), acta's
    logs enabled; the sink's id. ``configure_logging`` removes the others first."""
    from ..logging import worker_format

    sink = logger.add(
        sys.stderr,
        level=level,
        format=worker_format,
        backtrace=False,
        diagnose=False,
    )
    logger.enable("acta_sqla")
    return sink


def shown_url(url: str) -> str:
    """``url`` fit to print: the password masked, the driver name kept; a URL that does not
    parse is shown as given, its password masked all the same."""
    from ..settings import masked_url

    return masked_url(url)


def _database_errors() -> tuple[type[BaseException], ...]:
    return (
        *_loaded("sqlalchemy.exc", "DBAPIError"),
        *_loaded("asyncpg", "PostgresError", "InterfaceError"),
        OSError,
    )


@contextmanager
def on_database(where: str) -> Iterator[None]:
    """Name the database in a driver or network error raised inside the block, so that
    the one line says which server refused (e.g. ``postgresql://app@db:5432/app:
    ConnectionRefusedError: ...``)."""
    try:
        yield
    except Exception as exc:
        if not isinstance(exc, _database_errors()):
            raise
        if _client_configuration(exc):
            raise ConfigurationError(f"{where}: {describe_error(exc)}") from exc
        raise ActaError(f"{where}: {describe_error(exc)}") from exc


def _causes(exc: BaseException, depth: int = 5) -> Iterator[BaseException]:
    """``exc`` and what it wraps: SQLAlchemy's ``orig`` (the driver's error), else the
    ``__cause__``, at most ``depth`` deep."""
    current: BaseException | None = exc
    for _ in range(depth):
        if current is None:
            return
        yield current
        orig = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) else current.__cause__


def _client_configuration(exc: BaseException) -> bool:
    """True when asyncpg refused the connection's settings before connecting (an invalid
    ``sslmode``, a missing root certificate, ...): a configuration error, whoever wraps it."""
    refused = _loaded("asyncpg", "ClientConfigurationError")
    return bool(refused) and any(isinstance(e, refused) for e in _causes(exc))


def fail(message: str, code: int = EXIT_FAILURE, command: str = "acta") -> NoReturn:
    """Print ``<command>: message`` on stderr and exit with ``code`` (inside a command)."""
    import typer  # imported by then: only commands run under Typer call this

    typer.echo(f"{command}: {message}", err=True)
    raise typer.Exit(code)


def _failure(
    exc: BaseException, failure: int = EXIT_FAILURE, configuration: int = EXIT_CONFIGURATION
) -> tuple[str, int] | None:
    """The one line and the exit status for a user's mistake; None for a bug."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", EXIT_INTERRUPTED
    if isinstance(exc, ConfigurationError):
        return describe_error(exc), configuration
    if _client_configuration(exc):
        return f"the database URL is unusable: {describe_error(exc)}", configuration
    if isinstance(exc, _user_errors()):
        return describe_error(exc), failure
    return None


def command_path(fn: Callable[..., Any]) -> str:
    """``acta db upgrade`` for ``upgrade`` in ``acta_sqla.cli.db``; ``acta worker`` for a
    command of the top level (its own module, or this package)."""
    group = fn.__module__.rsplit(".", 1)[-1]
    name = fn.__name__.rstrip("_").replace("_", "-")
    if group in ("cli", "__init__", "__main__", name):
        return f"acta {name}"
    return f"acta {group} {name}"


@overload
def run_cli(fn: Callable[P, R], /) -> Callable[P, R]: ...
@overload
def run_cli(
    *, failure: int = EXIT_FAILURE, configuration: int = EXIT_CONFIGURATION
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def run_cli(
    fn: Callable[P, R] | None = None,
    /,
    *,
    failure: int = EXIT_FAILURE,
    configuration: int = EXIT_CONFIGURATION,
) -> Any:
    """Decorate a command function (under ``@app.command()``) so that user errors become
    one line on stderr and a non-zero exit status; anything else (a bug) keeps its
    traceback. ``@run_cli(failure=3, configuration=3)`` picks the exit statuses (``acta
    doctor`` keeps 1 and 2 for its findings).

    The line starts with the command line as the user typed it (``acta status:``, ``acta
    jobs ls:``), read from Click's context: a command registered outside its module's group
    (``acta status`` lives in ``jobs.py``) is still named as it was called."""
    if fn is None:
        return functools.partial(run_cli, failure=failure, configuration=configuration)
    static = command_path(fn)

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (Exception, KeyboardInterrupt) as exc:
            found = _failure(exc, failure, configuration)
            if found is None:
                raise
            fail(*found, invoked_path(static))

    # A usage error (an unknown option, a value Click cannot parse) is a configuration
    # mistake too: run_app exits with this status (Typer copies the attribute onto the
    # callback it registers).
    wrapper.usage_exit_status = configuration  # type: ignore[attr-defined]
    return wrapper


def _typer_exceptions() -> tuple[Any, Any, Any]:
    """Click's ``UsageError`` and ``ClickException`` and the ``Abort`` as Typer raises them:
    Typer 0.2x vendors its own Click (``typer._click``) and has its own Abort, older
    releases use Click's."""
    from typer import core

    vendored = getattr(core, "_click", None)
    click = vendored if vendored is not None else importlib.import_module("click")
    abort = getattr(core, "Abort", None) or click.exceptions.Abort
    return click.exceptions.UsageError, click.exceptions.ClickException, abort


def run_app(app: Any, args: list[str] | None = None) -> NoReturn:
    """Run the Typer app as ``acta`` and exit. Click's usage errors (an unknown command or
    option, a bad value) are one line, ``acta jobs ls: no such option: --bogus; see 'acta jobs
    ls --help'``, and exit 2 (``acta doctor``: 3, as any of its configuration
    mistakes, since 1 and 2 are its findings) instead of Click's usage text and boxed
    error. Everything else is as Click's standalone mode does it."""
    usage_error, click_exception, abort = _typer_exceptions()
    try:
        returned = app(args=args, prog_name="acta", standalone_mode=False)
    except usage_error as exc:
        ctx = exc.ctx
        if type(exc).__name__ == "NoArgsIsHelpError":
            # A group named without a command: its help (Typer's rich help is already
            # printed by then, Click's plain help is the error's text).
            if exc.format_message().strip():
                exc.show()
            raise SystemExit(exc.exit_code) from None
        path = ctx.command_path if ctx is not None else "acta"
        message = exc.format_message().strip().replace("\n", " ").rstrip(".")
        message = message[:1].lower() + message[1:]
        print(f"{path}: {printable(message)}; see '{path} --help'", file=sys.stderr)
        callback = ctx.command.callback if ctx is not None else None
        raise SystemExit(getattr(callback, "usage_exit_status", exc.exit_code)) from None
    except click_exception as exc:
        print(f"acta: {printable(exc.format_message())}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
    except abort:
        print("Aborted!", file=sys.stderr)
        raise SystemExit(1) from None
    # Not standalone: an Exit's status comes back as the value, a command's own return
    # value (None) means success.
    status = returned if isinstance(returned, int) and not isinstance(returned, bool) else 0
    raise SystemExit(status)


def invoked_path(default: str) -> str:
    """``acta`` and the sub-command names of the running Click command (``acta jobs ls``),
    whatever the program was called (a test runner's ``root``); ``default`` outside a
    command."""
    ctx = _click_context()
    if ctx is None:
        return default
    names: list[str] = []
    while ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(["acta", *reversed(names)]) if names else default


def _click_context() -> Any:
    """The running command's Click context, or None. Typer 0.2x builds its commands with
    a Click of its own (``typer._click``), older releases with Click itself: ask both."""
    for module in ("typer._click.globals", "click.globals"):
        try:
            get = importlib.import_module(module).get_current_context
        except (ImportError, AttributeError):
            continue
        ctx = get(silent=True)
        if ctx is not None:
            return ctx
    return None


STALE_SCHEMA_STATES = frozenset({"42703", "42P01", "42883", "3F000"})
"""SQLSTATEs of a statement that names what this code's schema has and the database's does
not (undefined column, table, function; missing schema): an acta upgraded before its
migrations ran."""


def _sqlstate(exc: BaseException) -> str | None:
    for candidate in _causes(exc):
        state = getattr(candidate, "sqlstate", None)
        if isinstance(state, str):
            return state
    return None


async def explain_stale_schema(exc: BaseException, url: str, schema: str) -> None:
    """When ``exc`` is a statement that failed on a column, table or function this code
    expects, and acta's schema is behind this code, raise the one line that says what to do
    (``acta db upgrade``) instead of the driver's error. Asked only after a failure: a
    command that works pays nothing for it."""
    if _sqlstate(exc) not in STALE_SCHEMA_STATES:
        return
    import asyncpg

    from ..database import asyncpg_dsn
    from ..queries.workers import schema_revision
    from ..settings import SCHEMA_HEAD, SCHEMA_VERSION_TABLE, schema_behind

    try:
        conn = await asyncpg.connect(asyncpg_dsn(url))
        try:
            rows = await conn.fetch(schema_revision(schema, SCHEMA_VERSION_TABLE))
        finally:
            await conn.close()
        current = rows[0][0] if rows else None
    except asyncpg.PostgresError:
        current = None  # no version table: never migrated
    if current != SCHEMA_HEAD:
        raise schema_behind(schema, current) from None
