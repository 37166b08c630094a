"""Schedules through the CLI against a real `acta worker`: ls, pause, resume, run, and
mistakes as one-line errors."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.app_schedules import FIRE_FIELDS
from tests.harness import Sql, Workers, one_line_error, run_acta
from tests.waiting import wait_for

APP = "tests.e2e.app_schedules:acta"
NAMESPACE = "sched"


@pytest.fixture
def worker(db: str, sql: Sql, runs_log: Path, tmp_path: Path) -> Iterator[Workers]:
    with Workers(APP, db, sql, runs_log, tmp_path, ready=True) as started:
        started()
        yield started


def acta(db: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_acta(db, NAMESPACE, tmp_path, *args)


def count(sql: Sql, where: str) -> int:
    return int(sql(f"SELECT count(*) FROM acta.job WHERE {where}")[0][0])


def test_pause_resume_and_run_a_schedule_from_the_cli(
    db: str, sql: Sql, worker: Workers, tmp_path: Path
) -> None:
    wait_for(
        lambda: count(sql, "schedule_name IS NOT NULL AND status = 'succeeded'") >= 2,
        timeout=30,
        what="two fires",
    )
    listed = acta(db, tmp_path, "schedules", "ls")
    assert listed.returncode == 0, listed.stderr
    line = next(x for x in listed.stdout.splitlines() if x.startswith("every-second"))
    assert "* * * * * *" in line and "UTC" in line and "active" in line and "succeeded" in line

    paused = acta(db, tmp_path, "schedules", "pause", "every-second")
    assert paused.returncode == 0 and "paused" in paused.stdout, paused.stderr
    # Nothing pending: the pending fire was cancelled and no successor comes.
    wait_for(
        lambda: count(sql, "schedule_name IS NOT NULL AND status IN ('ready', 'executing')") == 0,
        what="no pending fire",
    )
    before = count(sql, "schedule_name IS NOT NULL")
    assert "paused" in acta(db, tmp_path, "schedules", "ls").stdout

    extra = acta(db, tmp_path, "schedules", "run", "every-second")
    assert extra.returncode == 0 and "extra fire enqueued as job" in extra.stdout, extra.stderr
    job = int(extra.stdout.split()[-1])
    wait_for(lambda: count(sql, f"id = {job} AND status = 'succeeded'") == 1, what="the extra")
    assert count(sql, "schedule_name IS NOT NULL") == before  # the chain is untouched

    resumed = acta(db, tmp_path, "schedules", "resume", "every-second")
    assert resumed.returncode == 0 and "next fire at" in resumed.stdout, resumed.stderr
    wait_for(
        lambda: count(sql, "schedule_name IS NOT NULL AND status = 'succeeded'") >= before + 1,
        timeout=30,
        what="fires again",
    )
    # Every fire, whoever wrote it (start-up, a completion, `run`, `resume`), has the
    # kind's priority and its concurrency key rendered from the schedule's args.
    fields = sql("SELECT DISTINCT priority, concurrency_key FROM acta.job")
    assert [tuple(r) for r in fields] == [FIRE_FIELDS]


def test_schedule_cli_mistakes_are_one_line_errors(db: str, sql: Sql, tmp_path: Path) -> None:
    for args in (
        ("schedules", "pause", "nope"),
        ("schedules", "resume", "nope"),
        ("schedules", "run", "nope"),
    ):
        out = acta(db, tmp_path, *args)
        assert out.returncode != 0, args
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, out.stderr
        assert f"acta schedules {args[1]}: no schedule 'nope' in namespace 'sched'" in lines[0]


FEB30 = (
    "INSERT INTO acta.schedule (namespace, name, cron, timezone, kind, args, missed) "
    "VALUES ('sched', 'feb30', '0 0 30 2 *', 'UTC', 'beat', '{}', 'latest')"
)
"""A schedule that never matches, as a version of the code that did not check its cron
stored it (``acta.schedule`` now refuses it)."""


def test_a_stored_schedule_that_never_matches_stops_only_itself(
    db: str, sql: Sql, runs_log: Path, tmp_path: Path
) -> None:
    """It stopped every schedule of its namespace (0 fires of a 1-second schedule in 12 s,
    "recovery pass failed" on every pass) and `resume` printed a traceback. Now: named in
    the worker's log on each recovery pass, `broken` in `ls`, a problem for `doctor`, a
    one-line error for `resume`, and the 1-second schedule fires on."""
    with Workers(APP, db, sql, runs_log, tmp_path, ready=True) as start:
        worker = start(env={"ACTA_HEARTBEAT_INTERVAL": "0.5"})  # a recovery pass every 2 s
        fires = "schedule_name = 'every-second' AND status = 'succeeded'"
        wait_for(lambda: count(sql, fires) >= 1, timeout=30, what="a first fire")
        sql(FEB30)

        def named() -> int:
            return sum("'feb30'" in line for line in worker.output().splitlines())

        wait_for(lambda: named() >= 2, timeout=30, what="feb30 named on two recovery passes")
        before = count(sql, fires)
        wait_for(lambda: count(sql, fires) >= before + 3, timeout=30, what="3 more fires")
        assert "recovery pass failed" not in worker.output()
        line = next(x for x in worker.output().splitlines() if "'feb30'" in x)
        assert "never matches" in line and "it does not fire" in line, line

    listed = acta(db, tmp_path, "schedules", "ls")
    assert listed.returncode == 0, listed.stderr
    row = next(x for x in listed.stdout.splitlines() if x.startswith("feb30 "))
    assert "broken" in row.split(), row
    note = next(x for x in listed.stdout.splitlines() if x.startswith("broken: feb30:"))
    assert "never matches" in note, listed.stdout
    assert "active" in next(x for x in listed.stdout.splitlines() if x.startswith("every-second"))

    error = one_line_error(acta(db, tmp_path, "schedules", "resume", "feb30"), "schedules resume")
    assert "schedule 'feb30' cannot be resumed: cron='0 0 30 2 *' never matches" in error

    doctor = acta(db, tmp_path, "doctor")
    assert doctor.returncode == 2, doctor.stdout + doctor.stderr
    assert "schedule_no_tick schedule 'feb30'" in doctor.stdout, doctor.stdout
