"""The `acta` command line as one Typer app: the sub-commands live in sibling modules."""

from __future__ import annotations

import typer

from .db import app as db_app
from .definitions import app as definitions_app
from .definitions import pause as _pause
from .definitions import resume as _resume
from .doctor import doctor as _doctor
from .jobs import app as jobs_app
from .jobs import demo as _demo
from .jobs import signal as _signal
from .jobs import status as _status
from .schedules import app as schedules_app

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="acta-sqla: a durable PostgreSQL job queue for SQLAlchemy applications.",
)


from .dashboard import dashboard as _dashboard  # noqa: E402
from .worker import worker as _worker  # noqa: E402

app.command()(_worker)
app.add_typer(db_app, name="db")
app.add_typer(jobs_app, name="jobs")
app.add_typer(schedules_app, name="schedules")
app.add_typer(definitions_app, name="definitions")
app.command("pause")(_pause)
app.command("resume")(_resume)
app.command("status")(_status)
app.command("signal")(_signal)
app.command("demo")(_demo)
app.command("dashboard")(_dashboard)
app.command("doctor")(_doctor)
