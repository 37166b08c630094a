"""A circuit breaker across three real `acta worker` processes: a kind whose dependency
fails for a while, then recovers. Checked from the handlers' own records of their starts
and from the workers' records of each breaker transition (tests/e2e/app_breaker.py)."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import Sql, Workers, insert_jobs, read_runs
from tests.waiting import wait_for

APP = "tests.e2e.app_breaker:acta"
NAMESPACE = "breaker"
SLACK = 0.25
"""A worker logs an opening after its commit: a job admitted just before the commit may
start just after the line. Starts later than this past an ``open`` line are violations."""


@pytest.fixture
def down(tmp_path: Path) -> Path:
    flag = tmp_path / "dependency-down"
    flag.touch()
    return flag


@pytest.fixture
def changes_log(tmp_path: Path) -> Path:
    return tmp_path / "breaker-transitions.log"


@pytest.fixture
def three_workers(
    db: str, sql: Sql, runs_log: Path, tmp_path: Path, down: Path, changes_log: Path
) -> Iterator[Workers]:
    env = {
        "ACTA_EXECUTORS": "2",
        "BREAKER_DEPENDENCY_DOWN": str(down),
        "BREAKER_TRANSITIONS_LOG": str(changes_log),
    }
    with Workers(APP, db, sql, runs_log, tmp_path, env) as workers:
        for _ in range(3):
            workers()
        wait_for(
            lambda: sql("SELECT count(*) FROM acta.worker WHERE status = 'running'") == [(3,)],
            what="three workers to register",
        )
        yield workers


def transitions(path: Path) -> list[tuple[float, str]]:
    """Every breaker transition the workers logged: (monotonic time, new state)."""
    return sorted((r.t, r.event.removeprefix("breaker_")) for r in read_runs(path))


def test_the_breaker_opens_holds_the_kind_uncharged_probes_one_at_a_time_and_closes(
    sql: Sql, three_workers: Workers, runs_log: Path, down: Path, changes_log: Path
) -> None:
    ids = insert_jobs(sql, NAMESPACE, "call_dependency", 30)

    def reopened() -> bool:
        states = [s for _, s in transitions(changes_log)]
        return states.count("open") >= 2  # a probe failed and opened it again

    wait_for(reopened, timeout=60, what="the breaker to open, probe, and open again")
    down.unlink()  # the dependency is back
    wait_for(
        lambda: sql("SELECT count(*) FROM acta.job WHERE status = 'succeeded'") == [(30,)],
        timeout=120,
        what="every job to succeed",
    )
    for w in three_workers.started:
        w.signal(signal.SIGTERM)
    assert [w.wait(timeout=60) for w in three_workers.started] == [0, 0, 0]

    runs = read_runs(runs_log)
    starts = sorted((r.t, r.job_id) for r in runs if r.event == "start")
    changes = transitions(changes_log)
    states = [s for _, s in changes]
    assert states[0] == "open" and states[-1] == "closed", changes
    assert sql("SELECT state FROM acta.breaker WHERE kind = 'call_dependency'") == [("closed",)]

    # While open (from an opening to the next half-opening), no job of the kind starts.
    for i, (t, state) in enumerate(changes):
        if state != "open":
            continue
        until = next((u for u, s in changes[i + 1 :] if s == "half_open"), None)
        assert until is not None, changes
        inside = [j for at, j in starts if t + SLACK < at < until]
        assert inside == [], f"jobs {inside} started while the breaker was open"
    # Half-open: one probe at a time, until the probe's outcome moves it on.
    for i, (h, state) in enumerate(changes):
        if state != "half_open":
            continue
        end, how = next(((u, s) for u, s in changes[i + 1 :] if s in ("open", "closed")), (0, ""))
        assert how, changes
        # A closing is logged after its commit too: the jobs it let start may start just
        # before its line. An opening lets nothing start.
        until = end - SLACK if how == "closed" else end
        probes = [j for at, j in starts if h <= at < until]
        assert len(probes) <= 1, f"half-open at {h}: {len(probes)} jobs started, not 1 probe"
        assert [j for at, j in starts if h <= at < end][:1], f"half-open at {h}: no probe"

    # No job is charged for the outage: every charged attempt is a run of its handler
    # (the jobs held while the breaker was open bounced, uncharged), and all succeeded.
    ran = Counter(j for _, j in starts)
    attempts = dict(sql("SELECT id, attempts FROM acta.job WHERE kind = 'call_dependency'"))
    assert attempts == {j: ran[j] for j in ids}
    errors = sum(1 for r in runs if r.event == "error")
    assert errors == sum(a - 1 for a in attempts.values())
    # Far fewer failures than an unguarded outage (30 jobs retried every 0.1-0.3 s for the
    # seconds it lasted: hundreds): the threshold's worth before it opened, plus those that
    # started before the first outcomes were counted (a finalizer batch's window: at 6
    # executors and failing at once, up to a few dozen), plus one per failed probe.
    assert errors < 90, errors
