"""Fixtures of the fault-injection tests: real `acta worker` processes with short clocks,
the oracle (status-log trigger + run log), and a private PostgreSQL cluster to restart.

* ``faults_db``: the session's test database, emptied, with the status-log trigger
  installed for this test only (dropped afterwards, so other test tiers never see it).
* ``sql``: the shared ``sql`` (tests/conftest.py), on ``faults_db``: the trigger is in
  place before the test's first statement.
* ``runs_log`` (shared, tests/conftest.py): the file the handlers of the fault apps append
  their runs to.
* ``workers``: start ``acta worker --app tests.faults.app:acta`` processes
  (:class:`tests.harness.Workers`); by default with ``ACTA_HEARTBEAT_INTERVAL=0.5``
  (lease 2 s, attempt deadline 1.25 s, worker dead after 3.5 s, recovery every 2 s), each
  waited for until ready. Every process still alive at the end is killed.
  :func:`make_workers` builds the same for another database or another fault app.
* ``private_cluster`` (module): a PostgreSQL cluster of this test module's own, which the
  restart tests may restart; ``private_db`` a fresh database on it, migrated, with the
  oracle installed. The machine's shared server is never stopped or restarted.

The checker of invariants I1-I5, I10, I11 and I17 is :func:`tests.faults.oracle.check`.
Waits poll the database or the run log with deadlines (``wait_for``). The default run takes
about 70 s on two cores; ``pytest -m soak tests/faults`` adds a long random-fault soak.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from acta_sqla import migrate
from tests.harness import Sql, Workers, insert_jobs
from tests.waiting import wait_for

from . import oracle
from .cluster import PrivateCluster

APP = "tests.faults.app:acta"
NAMESPACE = "faults"
SHORT_CLOCK = {"ACTA_HEARTBEAT_INTERVAL": "0.5"}
"""Lease 2 s, attempt deadline 1.25 s, worker dead after 3.5 s, recovery every 2 s."""


@pytest.fixture
def faults_db(db: str) -> Iterator[str]:
    oracle.install(db)
    try:
        yield db
    finally:
        oracle.uninstall(db)


@pytest.fixture
def sql(faults_db: str, sql: Sql) -> Sql:
    """The shared ``sql``, asked for after ``faults_db``: the oracle is installed first."""
    return sql


def make_workers(url: str, sql: Sql, runs_log: Path, tmp_path: Path, app: str = APP) -> Workers:
    """Fault-test workers of ``app`` on ``url``: the short clock, each waited for until
    ready; use as ``with make_workers(...) as start:`` (leaving kills what is left)."""
    return Workers(app, url, sql, runs_log, tmp_path, SHORT_CLOCK, ready=True)


@pytest.fixture
def workers(faults_db: str, sql: Sql, runs_log: Path, tmp_path: Path) -> Iterator[Workers]:
    with make_workers(faults_db, sql, runs_log, tmp_path) as start:
        yield start


def enqueue(sql: Sql, kind: str, n: int = 1, args: str = "{}", **cols: object) -> list[int]:
    """Insert ``n`` jobs of ``kind`` in one committed statement; their ids."""
    return insert_jobs(sql, NAMESPACE, kind, n, args, **cols)


def count_status(sql: Sql, *statuses: str) -> int:
    return int(sql("SELECT count(*) FROM acta.job WHERE status = ANY(%s)", list(statuses))[0][0])


def all_terminal(sql: Sql, n: int) -> bool:
    return count_status(sql, "succeeded", "failed", "cancelled") >= n


# ------------------------------------------------------------------ the private cluster


@contextlib.contextmanager
def running_cluster() -> Iterator[PrivateCluster]:
    """A private PostgreSQL cluster, stopped and removed afterwards."""
    cluster = PrivateCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def private_cluster() -> Iterator[PrivateCluster]:
    with running_cluster() as cluster:
        yield cluster


@pytest.fixture
def private_db(private_cluster: PrivateCluster) -> str:
    url = private_cluster.create_database(f"acta_faults_{secrets.token_hex(4)}")
    migrate.upgrade(url)
    oracle.install(url)
    return url


def claim_latency(sql: Sql, job: int) -> float | None:
    """Seconds from a job's insert to its first claim, both by the database clock."""
    log = f"{oracle.ORACLE_SCHEMA}.status_change"
    rows = sql(
        f"SELECT extract(epoch FROM c.at - i.at)::float8 FROM {log} i "
        f"JOIN {log} c ON c.job_id = i.job_id "
        "AND c.old_status = 'ready' AND c.new_status = 'executing' "
        "WHERE i.job_id = %s AND i.old_status IS NULL ORDER BY c.seq LIMIT 1",
        job,
    )
    return float(rows[0][0]) if rows else None


def pickup_latencies(sql: Sql, n: int = 5) -> list[float]:
    """Enqueue ``n`` jobs one at a time into an idle worker and return how long each took
    to be claimed. Run the worker with ``ACTA_SAFETY_POLL_INTERVAL=5``: then a pickup well
    under a second can only come from a NOTIFY wake-up, not from the idle poll."""
    out = []
    for _ in range(n):
        [job] = enqueue(sql, "quick")
        found = wait_for(
            lambda: [x for x in [claim_latency(sql, job)] if x is not None],  # noqa: B023
            15,
            f"job {job} to be claimed",
        )
        out.append(found[0])  # type: ignore[index]
        wait_for(
            lambda: sql("SELECT status FROM acta.job WHERE id = %s", job) == [("succeeded",)],  # noqa: B023
            15,
            f"job {job} to succeed",
        )
    return out


SLOW_POLL = {"ACTA_SAFETY_POLL_INTERVAL": "5"}
"""A long idle poll, so that a fast pickup proves the NOTIFY path."""
