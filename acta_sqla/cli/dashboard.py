"""``acta dashboard``: serve the web dashboard with its own server (uvicorn).

It binds 127.0.0.1 unless told otherwise; any other address needs a password
(``ACTA_DASHBOARD_PASSWORD``), and without one the command refuses to start: a dashboard
that can cancel and delete jobs is never open to a network by accident. Its settings
(``ACTA_DASHBOARD_*``) come from the environment and ``.env`` alike (pydantic-settings):
a password written in ``.env`` is asked for like one in the environment.

It answers only requests whose ``Host`` names the address it is bound to (for loopback:
``localhost``, ``127.0.0.1``, ``::1``), or one of ``ACTA_DASHBOARD_ALLOWED_HOSTS``: a web
page whose name resolves to 127.0.0.1 (DNS rebinding) cannot reach it from a browser.
"""

from __future__ import annotations

import socket
from typing import Annotated, NoReturn

import typer

from ._common import EXIT_CONFIGURATION, cli_namespace, fail, run_cli, started
from .db import DatabaseUrl, _database

PASSWORD_ENV = "ACTA_DASHBOARD_PASSWORD"


def _missing_extra(exc: ImportError) -> NoReturn:
    """One line for a dashboard import the ``dashboard`` extra would have brought."""
    fail(
        f"the dashboard needs the 'dashboard' extra ({exc.name} is missing): "
        "pip install 'acta-sqla[dashboard]'",
        command="acta dashboard",
    )


@run_cli
def dashboard(
    host: Annotated[
        str, typer.Option(help="Address to listen on; any but loopback needs a password.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8080,
    namespace: Annotated[
        str | None, typer.Option(help="Namespace shown first (default: ACTA_NAMESPACE).")
    ] = None,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Show everything, allow no action.")
    ] = False,
    only: Annotated[
        str | None,
        typer.Option(
            "--only-namespaces",
            help="Comma-separated: the only namespaces shown, ?ns= cannot leave them "
            "(default: ACTA_DASHBOARD_NAMESPACES; empty = all).",
        ),
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Serve the web dashboard: see, search, retry and cancel jobs."""
    try:
        from ..dashboard.security import hosts_for_bind, is_loopback
        from ..dashboard.settings import DashboardSettings, settings_problem
    except ImportError as exc:
        _missing_extra(exc)
    from pydantic import ValidationError

    try:
        board = DashboardSettings(**({"namespaces": only} if only is not None else {}))
    except ValidationError as exc:
        fail(settings_problem(exc), EXIT_CONFIGURATION, "acta dashboard")
    password = board.password.get_secret_value() if board.password else None
    if not is_loopback(host) and password is None:
        fail(
            f"refusing to listen on {host}: set {PASSWORD_ENV} (the dashboard's password) "
            "to serve beyond this machine, or use --host 127.0.0.1",
            EXIT_CONFIGURATION,
            "acta dashboard",
        )
    try:
        import uvicorn

        from ..dashboard import acta_dashboard
    except ImportError as exc:
        _missing_extra(exc)
    from loguru import logger

    chosen = cli_namespace(namespace) if namespace is not None else None
    pinned = board.namespaces
    hosts = board.allowed_hosts or tuple(hosts_for_bind(host))
    with _database(database_url, None) as (settings, url, where):
        first = chosen or settings.namespace
        if pinned and chosen is None and first not in pinned:
            first = pinned[0]
        if pinned and first not in pinned:
            fail(
                f"--namespace {first} is not one of the namespaces shown "
                f"({', '.join(pinned)}): add it to --only-namespaces",
                EXIT_CONFIGURATION,
                "acta dashboard",
            )
        app = acta_dashboard(
            url,
            namespace=first,
            schema=settings.db_schema,
            read_only=read_only,
            allowed_hosts=hosts,
            settings=board,
        )
        listening = _listen(host, port)
        shown = f"[{host}]" if ":" in host else host
        logger.bind(stage="dashboard").info(
            "dashboard on http://{}:{}/ ({}{}{})",
            shown,
            listening.getsockname()[1],
            where,
            ", read-only" if read_only else "",
            ", password required" if password else "",
        )
        config = uvicorn.Config(app, log_level="warning", access_log=False)
        started()
        uvicorn.Server(config).run(sockets=[listening])


def _listen(host: str, port: int) -> socket.socket:
    """The dashboard's socket, bound before anything is logged: a port in use is one line
    (uvicorn would log its own error after acta's "dashboard on" line), and ``--port 0``
    logs the port the system chose."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}", command="acta dashboard")
    return sock
