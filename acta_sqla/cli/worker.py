"""`acta worker`: run jobs until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import sys
import threading
from typing import Annotated

import typer
from loguru import logger

from ..app import Acta
from ..errors import ConfigurationError, WorkerCrashed
from ..settings import DEFAULT_GRACE_SECONDS, load_settings
from ._common import run_cli


def load_app(spec: str | None) -> Acta:
    """Import ``module:attribute`` and return the Acta it names."""
    if not spec:
        raise ConfigurationError(
            "no app given: pass --app module:attribute (e.g. --app myproject.jobs:acta) or set "
            "ACTA_APP"
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
    burst: bool = False,
) -> None:
    from ..worker import Worker

    settings = load_settings(executors=executors, namespace=namespace or app.namespace)
    worker = Worker(app, settings, grace=grace, burst=burst)
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal(signum: int) -> None:
        nonlocal signals
        signals += 1
        name = signal.Signals(signum).name
        if signals == 1:
            logger.bind(stage="worker").info(
                "{} received: stopping (running handlers get {:g}s; send again to cancel them)",
                name,
                grace,
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
        str | None, typer.Option(help="Namespace to serve (default: the app's).")
    ] = None,
    grace: Annotated[
        float, typer.Option(help="Seconds running handlers get to finish at shutdown.")
    ] = DEFAULT_GRACE_SECONDS,
    burst: Annotated[
        bool, typer.Option(help="Stop once no job is due and nothing is running.")
    ] = False,
) -> None:
    """Run jobs until SIGTERM/SIGINT (the second signal cancels running handlers)."""
    acta = load_app(app)
    if executors is not None and not 1 <= executors <= 1024:
        raise ConfigurationError(f"--executors {executors}: must be between 1 and 1024")
    if grace < 0:
        raise ConfigurationError(f"--grace {grace:g}: must be >= 0 seconds")
    runner = _runner()
    runner(run_worker(acta, executors=executors, namespace=namespace, grace=grace, burst=burst))
    _exit_past_stuck_threads()


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
