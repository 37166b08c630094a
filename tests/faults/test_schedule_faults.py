"""A 1-second schedule across three real `acta worker` processes, one SIGKILLed in the
middle (short clocks: lease 2 s): every tick fires exactly once, in order, none lost
(the schedule catches missed ticks up one by one: ``missed="all"``). Invariant I10."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.e2e.app_schedules import FIRE_FIELDS
from tests.harness import Sql, Workers, read_runs
from tests.waiting import wait_for

from . import oracle
from .conftest import make_workers

APP = "tests.e2e.app_schedules:acta"


@pytest.fixture
def start(faults_db: str, sql: Sql, runs_log: Path, tmp_path: Path) -> Iterator[Workers]:
    with make_workers(faults_db, sql, runs_log, tmp_path, app=APP) as workers:
        yield workers


def fired(sql: Sql) -> list[tuple[int, str]]:
    rows = sql(
        "SELECT extract(epoch FROM scheduled_at)::bigint, status FROM acta.job "
        "WHERE schedule_name = 'every-second' ORDER BY scheduled_at"
    )
    return [(int(r[0]), str(r[1])) for r in rows]


def one_job_per_tick_run(r: oracle.Report, want: oracle.Expected) -> Iterator[str]:
    """I10 from the handlers' side: each tick a run saw belongs to one job only."""
    owner: dict[str, int] = {}
    for run in r.runs:
        if run.event == "start" and run.key != "none":
            first = owner.setdefault(run.key, run.job_id)
            if first != run.job_id:
                yield f"tick {run.key} ran as jobs {first} and {run.job_id}"


def test_three_workers_fire_each_tick_once_through_a_sigkill(
    sql: Sql, start: Workers, runs_log: Path
) -> None:
    workers = start.together(3)
    wait_for(lambda: len(fired(sql)) >= 4, timeout=30, what="the first fires")
    # Kill the worker running a fire, if one is caught running; else any.
    victim = workers[0]
    running = sql(
        "SELECT w.pid FROM acta.job j JOIN acta.worker w ON w.id = j.worker_id "
        "WHERE j.schedule_name IS NOT NULL AND j.status = 'executing'"
    )
    for w in workers:
        if running and w.pid == running[0][0]:
            victim = w
    killed_at = victim.kill()
    deadline = time.monotonic() + 6
    wait_for(lambda: time.monotonic() > deadline, timeout=10, what="6 more seconds")
    sql("UPDATE acta.schedule SET enabled = false")  # no new fire from here on
    wait_for(
        lambda: all(s != "executing" and s != "ready" for _, s in fired(sql)[:-1]),
        timeout=30,
        what="every fire but the last pending one to end",
    )
    ticks = fired(sql)
    done = [t for t, s in ticks if s == "succeeded"]
    assert len(done) >= 8, ticks
    # Every tick from the first to the last finished one, exactly once, none missing.
    assert done == list(range(done[0], done[0] + len(done))), ticks
    report = oracle.check(
        sql,
        runs_log,
        jobs=[
            int(r[0])
            for r in sql(
                "SELECT id FROM acta.job WHERE schedule_name IS NOT NULL AND status = 'succeeded'"
            )
        ],
        attempts=None,
        killed={victim.pid: killed_at},
        extra={"I10-runs": one_job_per_tick_run},
    )
    # In order: each tick's first run started after the previous tick's.
    first_start: dict[int, float] = {}
    for run in report.runs:
        if run.event == "start" and run.key != "none":
            first_start.setdefault(int(run.key), run.t)
    starts = [first_start[t] for t in done if t in first_start]
    assert starts == sorted(starts)
    assert any(r.event == "start" for r in read_runs(runs_log) if r.pid != victim.pid)
    # Through the kill and recovery, every fire has the kind's priority and its key.
    fields = sql("SELECT DISTINCT priority, concurrency_key FROM acta.job")
    assert [tuple(r) for r in fields] == [FIRE_FIELDS]


def test_a_worker_killed_while_its_fire_s_completion_waits_for_a_pause(
    faults_db: str, sql: Sql, start: Workers, runs_log: Path
) -> None:
    """Issue 28, item 3, with a SIGKILL in the middle: a pause holds the schedule's row
    (its transaction open) while a fire's completion, which reads that row FOR SHARE,
    waits for it; the worker writing the completion is SIGKILLed there, then the pause
    commits. Whatever became of the dead worker's statement (committed after the pause, or
    lost and the fire rescued by recovery and run again by the survivor), no fire is
    pending after the pause and none appears; resumed, the schedule fires on, each tick in
    one row and run by one job (I10)."""
    workers = start.together(2)
    wait_for(lambda: len(fired(sql)) >= 3, timeout=30, what="the first fires")
    by_id = {w.wait_ready(): w for w in workers}
    with psycopg.connect(faults_db) as pause:  # a transaction, held open until commit()
        pause.execute(
            "UPDATE acta.schedule SET enabled = false WHERE namespace = 'sched' "
            "AND name = 'every-second'"
        )

        def blocked_worker() -> int | None:
            rows = sql(
                "SELECT application_name FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND application_name LIKE 'acta:complete:%%' AND datname = current_database()"
            )
            return int(rows[0][0].rsplit(":", 1)[1]) if rows else None

        victim = by_id[wait_for(blocked_worker, timeout=30, what="a completion to wait")]
        killed_at = victim.kill()
        pause.execute(
            "UPDATE acta.job SET status = 'cancelled', finished_at = now() "
            "WHERE namespace = 'sched' AND schedule_name = 'every-second' AND status = 'ready'"
        )
        pause.commit()
    seen = max(t for t, _ in fired(sql))
    # The fire the pause found running ends (its completion, or recovery and a rerun).
    wait_for(
        lambda: all(s not in ("ready", "executing", "waiting") for _, s in fired(sql)),
        timeout=60,
        what="the running fire to end, and nothing pending",
    )
    assert max(t for t, _ in fired(sql)) == seen, fired(sql)
    sql("UPDATE acta.schedule SET enabled = true")
    survivor = next(w for w in workers if w is not victim)
    wait_for(
        lambda: sum(s == "succeeded" for t, s in fired(sql) if t > seen) >= 3,
        timeout=60,
        what="three fires after the resume (a recovery pass gives the schedule its fire)",
    )
    assert survivor.alive()
    report = oracle.check(
        sql,
        runs_log,
        jobs=[
            int(r[0])
            for r in sql(
                "SELECT id FROM acta.job WHERE schedule_name IS NOT NULL AND status = 'succeeded'"
            )
        ],
        attempts=None,
        killed={victim.pid: killed_at},
        extra={"I10-runs": one_job_per_tick_run},
    )
    assert any(r.event == "start" and r.pid == survivor.pid for r in report.runs)
