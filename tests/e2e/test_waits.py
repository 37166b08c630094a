"""Durable waits across real `acta worker` processes: a signal sent from the CLI wakes a
waiting job, a timeout wakes it without one, a parent resumes with its children's
outcomes, a tree of waits adds up, and the CLI shows and refuses what it should."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import Sql, Workers, insert_jobs, invoke_acta, read_runs
from tests.waiting import wait_for

APP = "tests.e2e.app_waits:acta"
NAMESPACE = "waits"


@pytest.fixture
def workers(db: str, sql: Sql, runs_log: Path, tmp_path: Path) -> Iterator[Workers]:
    # A short heartbeat: a timed-out wait wakes within one beat.
    with Workers(
        APP, db, sql, runs_log, tmp_path, defaults={"ACTA_HEARTBEAT_INTERVAL": "0.5"}, ready=True
    ) as started:
        yield started


def acta(db: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return invoke_acta(db, NAMESPACE, tmp_path, *args)


def status(sql: Sql, job_id: int) -> str:
    return str(sql("SELECT status FROM acta.job WHERE id = %s", job_id)[0][0])


def result(sql: Sql, job_id: int) -> object:
    return sql("SELECT result FROM acta.job WHERE id = %s", job_id)[0][0]


def test_a_signal_from_the_cli_wakes_a_waiting_job_with_its_payload(
    db: str, sql: Sql, workers: Workers, runs_log: Path, tmp_path: Path
) -> None:
    workers()
    [job] = insert_jobs(sql, NAMESPACE, "approval", args='{"order": 7}')
    wait_for(lambda: status(sql, job) == "waiting", what="the job to wait")
    # Parked: no worker, no lease, the attempt given back.
    assert sql(
        "SELECT worker_id, lease_expires_at, attempts, awaited_signal FROM acta.job WHERE id = %s",
        job,
    ) == [(None, None, 0, "approved")]
    shown = acta(db, tmp_path, "jobs", "show", str(job))
    assert shown.returncode == 0, shown.stderr
    assert "waits for: signal 'approved' (no timeout)" in shown.stdout
    listed = acta(db, tmp_path, "jobs", "ls", "--status", "waiting")
    assert f"{job:>8}  waiting" in listed.stdout

    sent = acta(db, tmp_path, "signal", str(job), "approved", "--payload", '{"by": "ann"}')
    assert sent.returncode == 0, sent.stderr
    assert f"job {job} received signal 'approved' and is ready to run" in sent.stdout
    wait_for(lambda: status(sql, job) == "succeeded", what="the signalled job to succeed")
    assert result(sql, job) == {
        "order": 7,
        "resumed": "signal",
        "signals": {"approved": {"by": "ann"}},
    }
    # The wait was not charged: the job's one charged attempt is the run that succeeded.
    assert sql("SELECT attempts FROM acta.job WHERE id = %s", job) == [(1,)]
    keys = [r.key for r in read_runs(runs_log) if r.job_id == job and r.event == "start"]
    assert keys == ["first", "signal"]


def test_a_signal_wait_times_out_without_the_signal(
    sql: Sql, workers: Workers, runs_log: Path
) -> None:
    workers()
    [job] = insert_jobs(sql, NAMESPACE, "approval", args='{"order": 1, "timeout": 1}')
    wait_for(lambda: status(sql, job) == "succeeded", timeout=60, what="the timed-out job to run")
    assert result(sql, job) == {"order": 1, "resumed": "timeout", "signals": {}}
    starts = [r for r in read_runs(runs_log) if r.job_id == job and r.event == "start"]
    assert [r.key for r in starts] == ["first", "timeout"]
    assert starts[1].t - starts[0].t >= 1.0  # not before its deadline


def test_a_parent_resumes_once_with_every_childs_outcome(
    sql: Sql, workers: Workers, runs_log: Path
) -> None:
    workers()
    workers()
    [parent] = insert_jobs(sql, NAMESPACE, "fan_out", args='{"n": 3, "fail_index": 1}')
    wait_for(lambda: status(sql, parent) == "succeeded", timeout=60, what="the parent")
    # A child's failure does not fail the parent: the parent sees it and decides.
    assert result(sql, parent) == [
        ["leaf", "succeeded", 0],
        ["leaf", "failed", None],
        ["leaf", "succeeded", 20],
    ]
    runs = read_runs(runs_log)
    parent_starts = [r for r in runs if r.job_id == parent and r.event == "start"]
    assert [r.key for r in parent_starts] == ["first", "children"]
    child_ends = [r.t for r in runs if r.job_id != parent and r.event in ("end", "error")]
    assert len(child_ends) == 3
    assert parent_starts[1].t > max(child_ends)
    assert sql("SELECT pending_children FROM acta.job WHERE id = %s", parent) == [(0,)]


def test_a_tree_of_waits_adds_up(sql: Sql, workers: Workers) -> None:
    workers()
    [root] = insert_jobs(sql, NAMESPACE, "tree", args='{"depth": 3}')
    wait_for(lambda: status(sql, root) == "succeeded", timeout=90, what="the tree's root")
    assert result(sql, root) == 8  # 2 ** 3 leaves
    assert sql("SELECT count(*), count(*) FILTER (WHERE status = 'succeeded') FROM acta.job") == [
        (15, 15)
    ]


def test_cli_signal_mistakes_are_one_line_errors(db: str, sql: Sql, tmp_path: Path) -> None:
    [done] = insert_jobs(sql, NAMESPACE, "approval", args='{"order": 1}', status="succeeded")
    cases = {
        ("signal", "999999", "approved"): "acta signal: no job with id 999999",
        ("signal", str(done), "approved"): f"acta signal: job {done} has already finished",
        ("signal", str(done), "approved", "--payload", "{nope"): "--payload is not valid JSON",
    }
    for args, expected in cases.items():
        out = acta(db, tmp_path, *args)
        assert out.returncode != 0, args
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], (args, out.stderr)
    assert json.loads(json.dumps(sql("SELECT signals FROM acta.job WHERE id = %s", done))) == [
        [None]
    ]
