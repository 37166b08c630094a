"""Admission under faults: a worker SIGKILLed while it holds a concurrency slot. Real
`acta worker` processes with short clocks (lease 2 s), checked by the oracle and the
handlers' own records."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import Run, Sql, Workers, read_runs
from tests.waiting import wait_for

from . import oracle
from .conftest import all_terminal, enqueue, make_workers

APP = "tests.faults.app_admission:acta"


@pytest.fixture
def start(faults_db: str, sql: Sql, runs_log: Path, tmp_path: Path) -> Iterator[Workers]:
    with make_workers(faults_db, sql, runs_log, tmp_path, app=APP) as workers:
        yield workers


def wait_known_started(sql: Sql, job: int) -> None:
    """Until A's heartbeat has recorded that ``job``'s attempt started: a worker killed
    before that loses the attempt uncharged (it was never known to run), and the retry
    would be attempt 1 again, holding on for its whole 60 s."""
    wait_for(
        lambda: sql("SELECT started_at IS NOT NULL FROM acta.job WHERE id = %s", job) == [(True,)],
        what=f"job {job}'s start to be recorded by a heartbeat",
    )


def peak_overlap(runs: list[Run], killed: dict[int, float]) -> int:
    """Most handlers running at once; a run cut short by a SIGKILL ends at the kill."""
    events: list[tuple[float, int]] = []
    open_runs: dict[tuple[int, int], Run] = {}
    for r in runs:
        if r.event == "start":
            open_runs[(r.job_id, r.execution_id)] = r
            events.append((r.t, 1))
        else:
            open_runs.pop((r.job_id, r.execution_id), None)
            events.append((r.t, -1))
    for r in open_runs.values():
        events.append((killed[r.pid], -1))
    level = peak = 0
    for _, step in sorted(events):
        level += step
        peak = max(peak, level)
    return peak


def test_sigkill_of_a_slot_holder_frees_the_slot_when_its_lease_runs_out(
    sql: Sql, start: Workers, runs_log: Path
) -> None:
    a = start()
    [holder] = enqueue(
        sql, "keyed_hold", args=json.dumps({"key": "x", "seconds": 60}), concurrency_key="x"
    )
    wait_for(
        lambda: [r for r in read_runs(runs_log) if r.job_id == holder],
        what="the holder to start in worker A",
    )
    wait_known_started(sql, holder)
    b = start()
    # Two waiters: the freed slot must go to one at a time (each refusal bounces it 2 s).
    others = enqueue(sql, "keyed_hold", 2, json.dumps({"key": "x"}), concurrency_key="x")
    # While A holds the slot, the others only bounce (A and B both claim them).
    wait_for(
        lambda: (
            sql("SELECT count(*) FROM acta.job WHERE id = ANY(%s) AND run_at > now()", others)[0][0]
            >= 1
        ),
        what="a bounce",
    )
    killed_at = a.kill()
    wait_for(
        lambda: all_terminal(sql, 1 + len(others)), timeout=60, what="every job of the key to end"
    )

    expected = {holder: 2, **{j: 1 for j in others}}  # bounces charge nothing
    report = oracle.check(sql, runs_log, attempts=expected, killed={a.pid: killed_at})
    assert {report.final[j][0] for j in expected} == {"succeeded"}
    runs = read_runs(runs_log)
    assert peak_overlap(runs, {a.pid: killed_at}) == 1, "two of one key ran at once"
    first_other = min(r.t for r in runs if r.event == "start" and r.job_id in others)
    # Not before the kill (A held the slot), and soon after its lease ran out: lease
    # 2 s, plus one 2 s bounce, plus a claim's sleep.
    assert killed_at < first_other < killed_at + 7.0
    assert sql("SELECT count(*) FROM acta.concurrency_slot") == [(0,)]
    assert b.alive()


def test_sigkill_of_a_lane_head_the_lane_continues_in_order(
    sql: Sql, start: Workers, runs_log: Path
) -> None:
    a = start()
    [head] = enqueue(sql, "laned_hold", args=json.dumps({"line": "q", "seconds": 60}), lane_key="q")
    wait_for(
        lambda: [r for r in read_runs(runs_log) if r.job_id == head],
        what="the lane's head to start in worker A",
    )
    wait_known_started(sql, head)
    rest = [
        enqueue(sql, "laned_hold", args=json.dumps({"line": "q"}), lane_key="q")[0]
        for _ in range(4)
    ]
    assert sql("SELECT DISTINCT status FROM acta.job WHERE id = ANY(%s)", rest) == [("waiting",)]
    b = start()
    killed_at = a.kill()
    wait_for(lambda: all_terminal(sql, 5), timeout=60, what="the whole lane to end")

    expected = {head: 2, **{j: 1 for j in rest}}
    report = oracle.check(sql, runs_log, attempts=expected, killed={a.pid: killed_at})
    assert {report.final[j][0] for j in expected} == {"succeeded"}
    runs = read_runs(runs_log)
    assert peak_overlap(runs, {a.pid: killed_at}) == 1, "two of one lane ran at once"
    # The head again (its retry keeps its place), then the rest in enqueue order.
    order = [r.job_id for r in sorted(runs, key=lambda r: r.t) if r.event == "start"]
    assert order == [head, head, *rest]
    assert b.alive()
