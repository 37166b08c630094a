"""A private PostgreSQL cluster restarted in the middle of a drain, with
``pg_ctl restart -m fast`` (clients are disconnected, a shutdown checkpoint is written) and
``-m immediate`` (every server process is killed at once; crash recovery at start-up).

Every job must end terminal exactly once; claiming must resume within 30 s of the server
being back; and NOTIFY wake-ups must work again (LISTEN re-established): a job enqueued
into the idle worker afterwards is claimed well under the idle poll (5 s here).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.harness import Sql, SqlRunner
from tests.waiting import wait_for

from . import oracle
from .cluster import PrivateCluster
from .conftest import SLOW_POLL, enqueue, make_workers, pickup_latencies


def down_is_false(sql: Sql, query: str, *params: object) -> list[tuple[Any, ...]]:
    try:
        return sql(query, *params)
    except psycopg.OperationalError:
        return []


@pytest.fixture
def private_sql(private_db: str) -> Iterator[SqlRunner]:
    sql = SqlRunner(private_db, reconnect=True)
    yield sql
    sql.close()


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_database_restart_mid_drain(
    mode: str,
    private_cluster: PrivateCluster,
    private_db: str,
    private_sql: SqlRunner,
    runs_log: Path,
    tmp_path: Path,
) -> None:
    sql: Sql = private_sql
    start = make_workers(private_db, sql, runs_log, tmp_path)
    try:
        w = start(env=SLOW_POLL)
        # 500 of them done before the restart, 1,500 left: claiming must resume after it
        # (the wait below asks for a claim after the server is back), so the drain is
        # truly cut in the middle.
        total = 2000
        ids = enqueue(sql, "quick", total, '{"pause": 0.005}')
        wait_for(
            lambda: down_is_false(
                sql, "SELECT 1 FROM acta.job WHERE status = 'succeeded' OFFSET 500 LIMIT 1"
            ),
            60,
            "the drain to be under way",
        )
        private_cluster.restart(mode)
        back = time.monotonic()
        [(server_back,)] = sql("SELECT now()")
        first_claim = wait_for(
            lambda: down_is_false(
                sql,
                f"SELECT 1 FROM {oracle.ORACLE_SCHEMA}.status_change WHERE old_status = 'ready' "
                "AND new_status = 'executing' AND at > %s LIMIT 1",
                server_back,
            ),
            30,
            "claiming to resume",
        )
        assert first_claim
        resumed = time.monotonic() - back
        wait_for(
            lambda: down_is_false(
                sql,
                "SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM acta.job "
                "WHERE status NOT IN ('succeeded', 'failed', 'cancelled'))",
            ),
            90,
            "the drain to finish",
        )
        # LISTEN re-established, once. Under any worker id: a restart slower than the
        # worker-dead limit (3.5 s, on a busy machine) makes the worker register again.
        listen = (
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE starts_with(application_name, 'acta:listen:') AND datname = current_database()"
        )
        wait_for(
            lambda: down_is_false(sql, listen) not in ([], [(0,)]),
            30,
            "LISTEN to be re-established",
        )
        assert sql(listen) == [(1,)], "LISTEN re-established once"
        latencies = pickup_latencies(sql, 5)
        assert max(latencies) < 0.5, f"wake-ups after the restart: {latencies}"
        w.signal(signal.SIGTERM)
        assert w.wait(30) == 0
    finally:
        start.kill_all()
    assert resumed < 30
    report = oracle.check(
        sql,
        runs_log,
        attempts=1,
        # Claims and completions commit durably: even an immediate shutdown, which loses
        # the WAL not yet written out, loses no claim whose handler ran. Every job ran once.
        max_starts=1,
    )
    assert len(report.jobs) == total + 5
    if report.phantoms:
        print(f"{mode}: {len(report.phantoms)} claim(s) lost with the crash, jobs run again")
    assert set(ids) <= report.jobs
