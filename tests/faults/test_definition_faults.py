"""A paused kind under faults: a worker SIGKILLed while a kind is paused, and a new worker
started meanwhile, never claim it; resumed, it drains. Judged by the oracle's status log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from acta_sqla import Acta
from tests.harness import Sql, Workers, insert_jobs
from tests.waiting import wait_for

from . import oracle
from .conftest import make_workers

APP = "tests.e2e.app_definitions:acta"
NAMESPACE = "defs"
OPERATOR = Acta(namespace=NAMESPACE, allow_unknown_kinds=True)
HELD = 8
"""Twice the kind's concurrency limit (4): resumed, it still queues for its slots."""


@pytest.fixture
def start(faults_db: str, sql: Sql, runs_log: Path, tmp_path: Path) -> Iterator[Workers]:
    with make_workers(faults_db, sql, runs_log, tmp_path, app=APP) as workers:
        yield workers


def succeeded(sql: Sql, ids: list[int]) -> int:
    return int(
        sql("SELECT count(*) FROM acta.job WHERE id = ANY(%s) AND status = 'succeeded'", ids)[0][0]
    )


def test_a_paused_kind_is_never_claimed_through_a_sigkill_and_a_new_worker(
    sql: Sql, start: Workers, runs_log: Path, sync_engine: Engine
) -> None:
    # Two executors each: the SIGKILL loses a few rows of A's, not forty (each lost row is
    # run alone afterwards, as a suspect, one after the other on each worker).
    a, b = start.together(2, "--executors", "2")
    with Session(sync_engine) as session:
        OPERATOR.set_policy_sync(session, "held", paused=True)
        session.commit()
    wait_for(
        lambda: all("paused: held" in w.output() for w in (a, b)), timeout=10, what="the pause"
    )
    held = insert_jobs(sql, NAMESPACE, "held", HELD, args='{"seconds": 0}', concurrency_key="all")
    quick = insert_jobs(sql, NAMESPACE, "quick", 200)
    wait_for(lambda: succeeded(sql, quick) >= 50, timeout=30, what="some quick jobs")
    killed_at = a.kill()
    c = start()  # loads the definitions at start: the kind is paused from its first claim
    wait_for(lambda: succeeded(sql, quick) == 200, timeout=60, what="every quick job")
    claims = [ch for ch in oracle.read_changes(sql) if ch.job_id in held and ch.is_claim]
    assert claims == [], "a paused kind was claimed"
    with Session(sync_engine) as session:
        OPERATOR.reset_policy_sync(session, "held", "paused")
        session.commit()
    wait_for(lambda: succeeded(sql, held) == HELD, timeout=60, what="the resumed kind")
    oracle.check(sql, runs_log, attempts=None, killed={a.pid: killed_at})
    assert b.alive() and c.alive()
