"""``acta worker``: run jobs until SIGTERM/SIGINT.

Parsed by its Typer command like every other: ``acta`` builds only the command it runs
(``commands.py``), so a worker's start imports Typer and this module, and none of the
other commands, SQLAlchemy, Alembic or the dashboard (tests/e2e/test_startup.py).
"""

from __future__ import annotations

import asyncio
import importlib
import math
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Annotated

import typer
from loguru import logger

from ..defaults import DEFAULT_FORCED_STOP_SECONDS, DEFAULT_GRACE_SECONDS
from ..errors import ConfigurationError, WorkerCrashed
from ._common import run_cli, started

if TYPE_CHECKING:
    from ..app import Acta

__all__ = ["load_app", "run_worker", "serve", "worker"]


@run_cli
def worker(
    app: Annotated[
        str | None,
        typer.Option(
            "--app",
            "-a",
            envvar="ACTA_APP",
            help="module:attribute of your Acta (ACTA_APP: also in .env).",
        ),
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
    forced_stop_wait: Annotated[
        float | None,
        typer.Option(
            help="Seconds the handlers cancelled after the grace get to end, then the worker "
            "exits past them (default: ACTA_FORCED_STOP_WAIT, or "
            f"{DEFAULT_FORCED_STOP_SECONDS:g})."
        ),
    ] = None,
    burst: Annotated[
        bool, typer.Option(help="Stop once no job is due and nothing is running.")
    ] = False,
) -> None:
    """Run jobs until SIGTERM/SIGINT (the second signal cancels running handlers)."""
    serve(
        app,
        executors=executors,
        namespace=namespace,
        grace=grace,
        forced_stop_wait=forced_stop_wait,
        burst=burst,
    )


def serve(
    app: str | None,
    *,
    executors: int | None = None,
    namespace: str | None = None,
    grace: float = DEFAULT_GRACE_SECONDS,
    forced_stop_wait: float | None = None,
    burst: bool = False,
) -> None:
    """Run the worker of the app ``module:attribute`` (None: ``ACTA_APP``, from the
    environment or ``.env``) until SIGTERM/SIGINT, or until idle with ``burst``."""
    from ..settings import check_executors, check_forced_stop, check_grace, load_settings

    if executors is not None:
        check_executors(executors, f"--executors {executors}")
    check_grace(grace, f"--grace {grace:g}")
    if forced_stop_wait is not None:
        check_forced_stop(forced_stop_wait, f"--forced-stop-wait {forced_stop_wait:g}")
    # ACTA_APP is a setting like the others: Typer reads the environment (envvar), the
    # settings the .env file of the current folder too.
    acta = load_app(app or load_settings().app)
    runner = _runner()
    runner(
        run_worker(
            acta,
            executors=executors,
            namespace=namespace,
            grace=grace,
            forced_stop_wait=forced_stop_wait,
            burst=burst,
        )
    )
    _exit_past_stuck_threads()


def load_app(spec: str | None) -> Acta:
    """Import ``module:attribute`` and return the Acta it names."""
    from ..app import Acta  # the app imports it first (--help does not need it)

    if not spec:
        raise ConfigurationError(
            "no app given: pass --app module:attribute (e.g. --app myproject.jobs:acta) or set "
            "ACTA_APP (in the environment or .env)"
        )
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(
            f"--app {spec!r}: expected module:attribute, e.g. myproject.jobs:acta"
        )
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigurationError(
            f"--app {spec!r}: cannot import module {module_name!r} ({exc}); run from the "
            "folder that holds it or fix PYTHONPATH"
        ) from None
    try:
        app = getattr(module, attr)
    except AttributeError:
        raise ConfigurationError(
            f"--app {spec!r}: module {module_name!r} has no attribute {attr!r}"
        ) from None
    if not isinstance(app, Acta):
        raise ConfigurationError(
            f"--app {spec!r} names a {type(app).__name__}, not an acta_sqla.Acta"
        )
    return app


async def run_worker(
    app: Acta,
    *,
    executors: int | None = None,
    namespace: str | None = None,
    grace: float = DEFAULT_GRACE_SECONDS,
    forced_stop_wait: float | None = None,
    burst: bool = False,
) -> None:
    from .. import _faults

    # No testing.inline mode while this process runs a worker (set back when it ends: a
    # command run in-process, as a test does, must not leave its process marked for good).
    marked, _faults.worker_process = _faults.worker_process, True
    try:
        await _run(app, executors, namespace, grace, forced_stop_wait, burst)
    finally:
        _faults.worker_process = marked


async def _run(
    app: Acta,
    executors: int | None,
    namespace: str | None,
    grace: float,
    forced_stop_wait: float | None,
    burst: bool,
) -> None:
    from ..settings import load_settings
    from ..worker import Worker

    given = {"executors": "--executors", "forced_stop_wait": "--forced-stop-wait"} | (
        {"namespace": "--namespace"} if namespace else {}
    )
    settings = load_settings(
        given,
        executors=executors,
        namespace=namespace or app.namespace,
        forced_stop_wait=forced_stop_wait,
    )
    worker = Worker(app, settings, grace=grace, burst=burst)
    started()
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal(signum: int) -> None:
        nonlocal signals
        signals += 1
        name = signal.Signals(signum).name
        if signals == 1:
            logger.bind(stage="worker").info(
                "{} received: stopping (running handlers get {}; send again to cancel them)",
                name,
                f"{grace:g}s" if math.isfinite(grace) else "as long as they need",
            )
            worker.request_stop()
        else:
            logger.bind(stage="worker").warning("{} again: cancelling running handlers", name)
            worker.force()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await worker.run()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    if worker.crashed:
        raise WorkerCrashed("the worker stopped after an internal error (see the log above)")
    if worker.stubborn:
        # A handler that swallows its cancel would hang the event loop's own shutdown (which
        # cancels and awaits every task) forever. The worker has flushed its completions,
        # closed its connections and marked itself stopped: leave now; the stubborn rows
        # come back through recovery when their lease runs out.
        _exit_now(0)


def _runner():  # type: ignore[no-untyped-def]
    try:
        import uvloop

        return uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        return asyncio.run


def _exit_past_stuck_threads() -> None:
    # A sync handler that ignores its timeout keeps its thread; the interpreter would join
    # it at exit and hang. The worker's work is done and flushed, so leave now.
    if any(t.is_alive() and t.name.startswith("acta-sync") for t in threading.enumerate()):
        _exit_now(0)


def _exit_now(status: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
