"""The `acta` command line (Typer; the app is assembled in ``commands``, each command
loaded when it runs).

Start-up runs with Python's cyclic garbage collector paused: importing the libraries and
the app allocates hundreds of thousands of objects that live as long as the process, and
the collector would walk them again and again (about a fifth of a worker's start-up CPU).
A long-running command (``acta worker``, ``acta dashboard``) calls
:func:`acta_sqla.cli._common.started` once it is built: the start-up objects are frozen
out of every later collection (``gc.freeze``) and the collector runs again. A bounded
command (``acta jobs``, ``acta db``, ``acta demo``'s few seconds, …) runs with it paused
to the end; ``main`` turns it back on as it returns or raises, for a program that calls it.
"""

from __future__ import annotations

import gc
from typing import Any


def main() -> None:
    was_on = gc.isenabled()
    gc.disable()  # until _common.started(); see the module's docstring
    try:
        from ._common import configure_logging, run_app
        from .commands import app

        configure_logging()
        run_app(app)
    finally:
        if was_on:  # called from a program of its own: its collector as it was
            gc.enable()


def __getattr__(name: str) -> Any:
    if name == "app":  # ``from acta_sqla.cli import app``: the Typer app
        from .commands import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
