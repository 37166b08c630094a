"""`acta worker`: run jobs until SIGTERM/SIGINT."""

from __future__ import annotations

from typing import Annotated

import typer

from ..settings import DEFAULT_GRACE_SECONDS
from ._common import run_cli
from .launch import WorkerOptions, load_app, run_worker, serve

__all__ = ["load_app", "run_worker", "worker"]


@run_cli
def worker(
    app: Annotated[
        str | None,
        typer.Option("--app", "-a", envvar="ACTA_APP", help="module:attribute of your Acta."),
    ] = None,
    executors: Annotated[
        int | None,
        typer.Option(help="Executor loops (default: ACTA_EXECUTORS, or 4 per core in 8..64)."),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(help="Namespace to serve: the app's (the default); another is refused."),
    ] = None,
    grace: Annotated[
        float, typer.Option(help="Seconds running handlers get to finish at shutdown.")
    ] = DEFAULT_GRACE_SECONDS,
    burst: Annotated[
        bool, typer.Option(help="Stop once no job is due and nothing is running.")
    ] = False,
) -> None:
    """Run jobs until SIGTERM/SIGINT (the second signal cancels running handlers)."""
    serve(WorkerOptions(app, executors, namespace, grace, burst))
