"""``acta dashboard``: serve the web dashboard with its own server (uvicorn).

It binds 127.0.0.1 unless told otherwise; any other address needs a password
(``ACTA_DASHBOARD_PASSWORD``), and without one the command refuses to start: a dashboard
that can cancel and delete jobs is never open to a network by accident.
"""

from __future__ import annotations

import os
import socket
from typing import Annotated

import typer

from ._common import EXIT_CONFIGURATION, cli_namespace, fail, run_cli
from .db import DatabaseUrl, _database

PASSWORD_ENV = "ACTA_DASHBOARD_PASSWORD"
SECRET_ENV = "ACTA_DASHBOARD_SECRET"


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
    database_url: DatabaseUrl = None,
) -> None:
    """Serve the web dashboard: see, search, retry and cancel jobs."""
    from ..dashboard.security import is_loopback

    password = os.environ.get(PASSWORD_ENV) or None
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
        fail(
            f"the dashboard needs the 'dashboard' extra ({exc.name} is missing): "
            "pip install 'acta-sqla[dashboard]'",
            command="acta dashboard",
        )
    from loguru import logger

    chosen = cli_namespace(namespace) if namespace is not None else None
    with _database(database_url, None) as (settings, url, where):
        app = acta_dashboard(
            url,
            namespace=chosen or settings.namespace,
            schema=settings.db_schema,
            read_only=read_only,
            password=password,
            secret=os.environ.get(SECRET_ENV) or None,
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
