"""``acta worker`` without Typer: the worker's own start-up path.

``acta`` hands a ``worker`` command line whose options all take a plain form (``--app X``,
``--app=X``, ``-a X``, ``--executors N``, ``--namespace X``, ``--grace S``, ``--burst``,
``--no-burst``) straight to :func:`serve`, so a worker starts without importing Typer and
the other commands (about 50 ms of every start on a 2-core machine). Anything else
(``--help``, an unknown option, a value that does not parse) goes to the Typer command in
``worker.py``, which prints its usual help or error; both paths end in :func:`serve`.
"""

from __future__ import annotations

import asyncio
import importlib
import math
import os
import signal
import sys
import threading
from dataclasses import dataclass

from loguru import logger

from ..app import Acta
from ..errors import ConfigurationError, WorkerCrashed
from ..settings import DEFAULT_GRACE_SECONDS, load_settings


@dataclass(frozen=True)
class WorkerOptions:
    """``acta worker``'s options, as the Typer command declares them."""

    app: str | None = None
    executors: int | None = None
    namespace: str | None = None
    grace: float = DEFAULT_GRACE_SECONDS
    burst: bool = False


_VALUED = {"--app": "app", "-a": "app", "--executors": "executors"}
_VALUED |= {"--namespace": "namespace", "--grace": "grace"}
_FLAGS = {"--burst": True, "--no-burst": False}


def worker_options(args: list[str]) -> WorkerOptions | None:
    """The options of ``acta worker ARGS`` when every one is in a plain form; None for
    anything the Typer command must see (help, an unknown option or argument, a repeat,
    a missing value, a number that does not parse)."""
    given: dict[str, object] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, inline = arg.partition("=")
        # ``--app=X`` or ``--app X`` (Click reads ``-a=X`` as the value "=X": left to it)
        valued = name.startswith("--") or not eq
        if name in _FLAGS and not eq:
            field, value = "burst", _FLAGS[name]
        elif name in _VALUED and valued and (eq or i + 1 < len(args)):
            field = _VALUED[name]
            if not eq:
                i += 1
                inline = args[i]
            if not inline or inline.startswith("-"):
                return None  # a value like an option: let Click decide what it means
            if field == "executors" and not (inline.isascii() and inline.isdigit()):
                return None  # int() reads "٣" as 3 where Typer (pydantic) refuses it
            if field == "grace" and not inline.isascii():
                return None  # as above: float() reads Unicode digits, Typer does not
            try:
                value = {"executors": int, "grace": float}.get(field, str)(inline)
            except ValueError:
                return None
        else:
            return None
        if field in given:
            return None
        given[field] = value
        i += 1
    if "app" not in given:
        given["app"] = os.environ.get("ACTA_APP") or None  # Typer's envvar, as Click reads it
    return WorkerOptions(**given)  # type: ignore[arg-type]


def serve(options: WorkerOptions) -> None:
    """Run the worker the options describe until SIGTERM/SIGINT (both paths)."""
    executors, grace = options.executors, options.grace
    if executors is not None and not 1 <= executors <= 1024:
        raise ConfigurationError(f"--executors {executors}: must be between 1 and 1024")
    # NaN compares false with everything: it would pass ``< 0`` and then end the grace at
    # once. inf is a grace (running handlers may run to their end, each bounded by its own
    # timeout; a second signal still cancels them), as a large finite number would be.
    if math.isnan(grace) or grace < 0:
        raise ConfigurationError(f"--grace {grace:g}: must be >= 0 seconds")
    # ACTA_APP is a setting like the others: the environment (Typer's envvar, or the plain
    # path's own reading) or else the .env file of the current folder.
    acta = load_app(options.app or load_settings().app)
    runner = _runner()
    runner(
        run_worker(
            acta,
            executors=executors,
            namespace=options.namespace,
            grace=grace,
            burst=options.burst,
        )
    )
    _exit_past_stuck_threads()


def main(options: WorkerOptions) -> None:
    """``acta worker`` started without Typer: logs to stderr, and a user's mistake is one
    line and a non-zero exit, as every command's (``_common.run_cli``)."""
    from ._common import configure_logging, exit_on_user_error

    configure_logging()
    exit_on_user_error(lambda: serve(options), "acta worker")


def load_app(spec: str | None) -> Acta:
    """Import ``module:attribute`` and return the Acta it names."""
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
    burst: bool = False,
) -> None:
    from ..worker import Worker

    given = {"executors": "--executors"} | ({"namespace": "--namespace"} if namespace else {})
    settings = load_settings(given, executors=executors, namespace=namespace or app.namespace)
    worker = Worker(app, settings, grace=grace, burst=burst)
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
