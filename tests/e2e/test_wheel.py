"""The wheel carries acta's migrations: a user who only pip-installed the package can run
`acta db upgrade` (DESIGN §1)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from acta_sqla.settings import SCHEMA_HEAD
from tests.harness import REPO_ROOT

UPGRADE = """
import sys
import acta_sqla
from acta_sqla import migrate
assert acta_sqla.__file__.startswith(sys.argv[2]), acta_sqla.__file__
print(migrate.migrations_path())
migrate.upgrade(sys.argv[1])
print(migrate.current(sys.argv[1]))
"""


def test_the_wheel_ships_the_migrations_and_they_run_from_it(
    tmp_path: Path, scratch_database
) -> None:  # type: ignore[no-untyped-def]
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(REPO_ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp_path / "dist").glob("acta_sqla-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "acta_sqla/_migrations/env.py" in names
    assert "acta_sqla/py.typed" in names  # PEP 561: type checkers read the package
    assert any(n.startswith("acta_sqla/_migrations/versions/0001") for n in names)
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    url = scratch_database()
    # Outside the repository, with only the unpacked wheel on the path for acta_sqla.
    env = {**os.environ, "PYTHONPATH": str(unpacked)}
    done = subprocess.run(
        [sys.executable, "-c", UPGRADE, url, str(unpacked)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    path, revision = done.stdout.split()
    assert path == str(unpacked / "acta_sqla" / "_migrations")
    assert revision == SCHEMA_HEAD
