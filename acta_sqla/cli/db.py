"""``acta db``: acta's migrations, and the embedded PostgreSQL.

The database is ``--database-url``, else ``ACTA_DATABASE_URL``, else the embedded server
(started on demand in ``ACTA_DATA_DIR`` and left running for the next command).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .. import database, embedded
from ._common import load_cli_settings, on_database, run_cli, shown_url

if TYPE_CHECKING:
    from ..settings import ActaSettings

app = typer.Typer(
    name="db",
    no_args_is_help=True,
    help=(
        "acta's schema: migrations (upgrade, downgrade, current), the database's URL (url) "
        "and the embedded PostgreSQL (stop)."
    ),
)

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="PostgreSQL URL (default: ACTA_DATABASE_URL, else the embedded PostgreSQL).",
        show_default=False,
    ),
]
Schema = Annotated[
    str | None,
    typer.Option("--schema", help="Schema of acta's tables (default: ACTA_SCHEMA, else acta)."),
]


def _migrate():  # type: ignore[no-untyped-def]
    # Alembic and SQLAlchemy load only for the `db` commands, not with the CLI itself.
    from .. import migrate

    return migrate


# "-1" must reach `downgrade` as an argument, not be parsed as an unknown option.
_RELATIVE_REVISIONS = {"ignore_unknown_options": True}


@contextmanager
def _database(
    database_url: str | None, schema: str | None
) -> Iterator[tuple[ActaSettings, str, str]]:
    """Settings, the URL (starting the embedded server when none is configured) and how to
    name the database in messages; errors inside the block name it too."""
    settings = load_cli_settings(database_url=database_url, db_schema=schema)
    if settings.database_url:
        where = f"schema {settings.db_schema!r} of {shown_url(settings.database_url)}"
    else:
        where = (
            f"schema {settings.db_schema!r} of the embedded PostgreSQL in "
            f"{settings.data_dir.expanduser().resolve()}"
        )
    with on_database(where):
        yield settings, database.database_url(settings), where


def _label(revision: str | None) -> str:
    if revision is None:
        return "none"
    return f"{revision} (head)" if revision in _migrate().heads() else revision


@app.command()
@run_cli
def upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
    database_url: DatabaseUrl = None,
    schema: Schema = None,
) -> None:
    """Bring acta's tables up to REVISION (default: the latest)."""
    with _database(database_url, schema) as (settings, url, where):
        before = _migrate().current(url, settings.db_schema)
        _migrate().upgrade(url, revision, settings.db_schema)
        after = _migrate().current(url, settings.db_schema)
    if before == after:
        typer.echo(f"already at {_label(after)} ({where})")
    else:
        typer.echo(f"upgraded {_label(before)} -> {_label(after)} ({where})")


@app.command(context_settings=_RELATIVE_REVISIONS)
@run_cli
def downgrade(
    revision: Annotated[
        str, typer.Argument(help="Target revision: -1 (one step), a revision id, or base.")
    ] = "-1",
    database_url: DatabaseUrl = None,
    schema: Schema = None,
) -> None:
    """Take acta's tables back to REVISION (default: one step); `base` removes them all."""
    with _database(database_url, schema) as (settings, url, where):
        before = _migrate().current(url, settings.db_schema)
        _migrate().downgrade(url, revision, settings.db_schema)
        after = _migrate().current(url, settings.db_schema)
    typer.echo(f"downgraded {_label(before)} -> {_label(after)} ({where})")


@app.command()
@run_cli
def current(database_url: DatabaseUrl = None, schema: Schema = None) -> None:
    """Print the revision acta's tables are at ("none" before the first upgrade)."""
    with _database(database_url, schema) as (settings, url, _):
        revision = _migrate().current(url, settings.db_schema)
    typer.echo(_label(revision))


DataDir = Annotated[
    Path | None,
    typer.Option(help="Data folder of the embedded PostgreSQL (default: ACTA_DATA_DIR)."),
]


@app.command()
@run_cli
def url(
    show_password: Annotated[
        bool, typer.Option("--show-password", help="Print the password instead of ***.")
    ] = False,
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Print the URL acta uses (ACTA_DATABASE_URL, else the embedded server's), password masked.

    Starts the embedded PostgreSQL if it is not running: psql "$(acta db url)" reaches it."""
    settings = load_cli_settings(database_url=database_url, data_dir=data_dir)
    if settings.database_url:
        found = settings.database_url
    else:
        folder = settings.data_dir.expanduser().resolve()
        with on_database(f"the embedded PostgreSQL in {folder}"):
            found = embedded.start(folder)
    typer.echo(found if show_password else shown_url(found))


@app.command()
@run_cli
def stop(data_dir: DataDir = None) -> None:
    """Stop the embedded PostgreSQL (a server named by a URL is never touched)."""
    settings = load_cli_settings(data_dir=data_dir)
    folder = settings.data_dir.expanduser().resolve()
    if embedded.stop(folder):
        typer.echo(f"stopped the embedded PostgreSQL in {folder}")
    else:
        typer.echo(f"no embedded PostgreSQL is running in {folder}")
