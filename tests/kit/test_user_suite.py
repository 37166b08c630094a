"""The test kit as a user gets it: a project of its own (outside this repository) whose
test file uses only the public API, run by pytest in a subprocess, so that the plugin is
loaded through its ``pytest11`` entry point as in any project that installs acta-sqla."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def test_a_users_suite_passes(tmp_path: Path, server_url: str) -> None:
    project = tmp_path / "shop"
    project.mkdir()
    (project / "test_shop.py").write_text((HERE / "user_suite.py").read_text())
    (project / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTA_")}
    env["ACTA_TEST_DATABASE_URL"] = server_url  # the plugin makes its own database there
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_shop.py"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert "7 passed" in run.stdout, run.stdout[-3000:]
