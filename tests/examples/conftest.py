"""Fixtures of the examples tier: run ``python examples/NAME.py`` as a user would."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.harness import REPO_ROOT

EXAMPLE_TIMEOUT = 60.0


@pytest.fixture
def run_example(db: str, acta_env: dict[str, str]) -> Callable[[str], str]:
    """Run examples/NAME.py in a subprocess against the (emptied) test database, as
    ``ACTA_DATABASE_URL``; its stdout back, after asserting it exited 0."""

    def run(name: str) -> str:
        done = subprocess.run(
            [sys.executable, str(REPO_ROOT / "examples" / f"{name}.py")],
            cwd=REPO_ROOT,
            env=acta_env,
            capture_output=True,
            text=True,
            timeout=EXAMPLE_TIMEOUT,
        )
        assert done.returncode == 0, f"examples/{name}.py exited {done.returncode}:\n{done.stderr}"
        return done.stdout

    return run
