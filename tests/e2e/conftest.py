"""Real `acta worker` processes for the end-to-end tests (tests/harness.py does the work;
``sql`` and ``runs_log`` are the shared fixtures of tests/conftest.py).

* ``start_worker``: start ``acta worker --app tests.e2e.app:acta`` processes
  (:class:`tests.harness.WorkerProcess`); every one still alive at the end is killed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import Sql, Workers

APP = "tests.e2e.app:acta"


@pytest.fixture
def start_worker(db: str, sql: Sql, runs_log: Path, tmp_path: Path) -> Iterator[Workers]:
    with Workers(APP, db, sql, runs_log, tmp_path) as workers:
        yield workers
