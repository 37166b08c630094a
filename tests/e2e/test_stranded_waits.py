"""Issue 28, items 4 and 10, with real `acta worker` processes: a hand-written DELETE of an
executing child or lane head strands nothing (migration 0014's trigger), and a cycle of
waits across two lanes is broken by the recovery pass, its youngest parent failed with
``DeadlockDetected``, everything else run to the end (docs/waits.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from acta_sqla import DeadlockDetected
from tests.harness import Sql, Workers, insert_jobs
from tests.waiting import wait_for

APP = "tests.e2e.app_waits:acta"
NAMESPACE = "waits"


@pytest.fixture
def workers(db: str, sql: Sql, runs_log: Path, tmp_path: Path) -> Iterator[Workers]:
    # A short heartbeat: the recovery pass runs every lease (2 s).
    with Workers(
        APP, db, sql, runs_log, tmp_path, defaults={"ACTA_HEARTBEAT_INTERVAL": "0.5"}, ready=True
    ) as started:
        yield started


def statuses(sql: Sql) -> dict[int, str]:
    return {int(r[0]): str(r[1]) for r in sql("SELECT id, status FROM acta.job")}


def all_finished(sql: Sql) -> bool:
    return all(s in ("succeeded", "failed", "cancelled") for s in statuses(sql).values())


def test_a_wait_cycle_across_two_lanes_fails_its_youngest_parent_and_the_rest_runs(
    sql: Sql, workers: Workers
) -> None:
    # P1 in lane L1 waits for a leaf queued in L2 behind P2, which waits for a leaf queued
    # in L1 behind P1: neither could ever run again.
    [p1] = insert_jobs(sql, NAMESPACE, "cross_lane", args='{"child_lane": "L2"}', lane_key="L1")
    [p2] = insert_jobs(sql, NAMESPACE, "cross_lane", args='{"child_lane": "L1"}', lane_key="L2")
    workers()
    wait_for(lambda: all_finished(sql), timeout=60, what="every job to finish")
    [(status, error)] = sql("SELECT status, last_error FROM acta.job WHERE id = %s", p2)
    assert status == "failed"
    assert error["type"] == DeadlockDetected.__name__
    assert error["message"].startswith(f"deadlock detected: job {p2} waited for its child")
    # P1 resumed with its child's outcome; both leaves ran.
    assert sql("SELECT status, result FROM acta.job WHERE id = %s", p1) == [
        ("succeeded", [["leaf", "succeeded", 10]])
    ]
    leaves = sql("SELECT status, attempts FROM acta.job WHERE kind = 'leaf'")
    assert sorted(leaves) == [("succeeded", 1), ("succeeded", 1)]


def test_a_hand_written_delete_of_an_executing_child_or_lane_head_strands_nothing(
    sql: Sql, workers: Workers
) -> None:
    workers()
    [parent] = insert_jobs(sql, NAMESPACE, "fan_out", args='{"n": 3, "pause": 30}')
    lane = insert_jobs(sql, NAMESPACE, "leaf", n=3, args='{"i": 1, "pause": 30}', lane_key="L")
    rest = insert_jobs(sql, NAMESPACE, "leaf", n=1, args='{"i": 2}', lane_key="L")

    def executing(where: str) -> list[int]:
        rows = sql(f"SELECT id FROM acta.job WHERE status = 'executing' AND {where} ORDER BY id")
        return [int(r[0]) for r in rows]

    wait_for(lambda: len(executing(f"parent_id = {parent}")) == 3, what="the children to run")
    wait_for(lambda: executing("lane_key = 'L'") == lane[:1], what="the lane's head to run")
    # Each deleted while its handler runs: the parent stops counting it, the lane moves on.
    for job_id in [*executing(f"parent_id = {parent}"), *lane]:
        sql("DELETE FROM acta.job WHERE id = %s", job_id)
    wait_for(lambda: statuses(sql).get(parent) == "succeeded", timeout=60, what="the parent")
    assert sql("SELECT result FROM acta.job WHERE id = %s", parent) == [([],)]
    wait_for(lambda: statuses(sql).get(rest[0]) == "succeeded", timeout=60, what="the lane")
    assert sql("SELECT count(*) FROM acta.job") == [(2,)]
