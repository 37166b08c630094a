"""Real `acta worker` processes for the end-to-end tests (tests/harness.py does the work).

* ``oracle_log``: the run log the handlers of ``tests.e2e.app`` append to.
* ``start_worker``: start ``acta worker --app tests.e2e.app:acta`` processes
  (:class:`tests.harness.WorkerProcess`); every one still alive at the end is killed.
* ``sql``: run one statement on the test database (autocommit), rows back.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import REPO_ROOT as REPO_ROOT
from tests.harness import Sql, WorkerFactory, sql_runner, start_workers, stop_all
from tests.harness import acta_command as acta_command
from tests.harness import read_runs as read_runs
from tests.waiting import wait_for as wait_for

APP = "tests.e2e.app:acta"


@pytest.fixture
def oracle_log(tmp_path: Path) -> Path:
    return tmp_path / "runs.log"


@pytest.fixture
def sql(db: str) -> Iterator[Sql]:
    run, conn = sql_runner(db)
    yield run
    conn.close()


@pytest.fixture
def start_worker(db: str, sql: Sql, oracle_log: Path, tmp_path: Path) -> Iterator[WorkerFactory]:
    start, started = start_workers(APP, db, sql, oracle_log, tmp_path)
    yield start
    stop_all(started)
