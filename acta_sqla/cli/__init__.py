"""The `acta` command line (Typer; the app is assembled in ``commands``).

``acta worker`` with plain options starts through ``launch`` without importing Typer or the
other commands: a worker's start-up is part of every deploy and every autoscale.
"""

from __future__ import annotations

import sys
from typing import Any


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["worker"]:
        from . import launch

        options = launch.worker_options(args[1:])
        if options is not None:
            launch.main(options)
            return
    from ._common import configure_logging, run_app
    from .commands import app

    configure_logging()
    run_app(app)


def __getattr__(name: str) -> Any:
    if name == "app":  # ``from acta_sqla.cli import app``: the Typer app, built on demand
        from .commands import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
