"""The `acta` command line (Typer; the app is assembled in ``commands``, each command
loaded when it runs)."""

from __future__ import annotations

from typing import Any


def main() -> None:
    from ._common import configure_logging, run_app
    from .commands import app

    configure_logging()
    run_app(app)


def __getattr__(name: str) -> Any:
    if name == "app":  # ``from acta_sqla.cli import app``: the Typer app
        from .commands import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
