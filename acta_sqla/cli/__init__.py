"""The `acta` command line (Typer). Sub-commands live in sibling modules."""

from __future__ import annotations

import typer

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="acta-sqla: a durable PostgreSQL job queue for SQLAlchemy applications.",
)


from .worker import worker as _worker  # noqa: E402

app.command()(_worker)


def main() -> None:
    app()
