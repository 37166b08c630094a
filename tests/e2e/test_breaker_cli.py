"""A circuit breaker seen and handled from the command line: `acta definitions ls`,
`acta status`, `acta doctor` show an open breaker and when it changes next; `acta
definitions set` changes it live by the declaration's rule (hostile values refused in one
line); `acta definitions close-breaker` closes it by hand. A real worker opens it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import Sql, Workers, insert_jobs, invoke_acta, one_line_error
from tests.waiting import wait_for

APP = "tests.e2e.app_breaker:acta"
NAMESPACE = "breaker"


def acta(db: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return invoke_acta(db, NAMESPACE, tmp_path, *args)


@pytest.fixture
def opened(db: str, sql: Sql, runs_log: Path, tmp_path: Path) -> Iterator[Workers]:
    """One worker, whose kind's dependency is down, has opened the breaker (for 10 min:
    the test sets open_for live first; an override gives the whole breaker, its fields
    left out taking Breaker's defaults, so window is 60 s here, not the declared 30)."""
    down = tmp_path / "down"
    down.touch()
    env = {"BREAKER_DEPENDENCY_DOWN": str(down), "ACTA_HEARTBEAT_INTERVAL": "0.5"}
    with Workers(APP, db, sql, runs_log, tmp_path, env, ready=True) as workers:
        w = workers()
        out = acta(
            db,
            tmp_path,
            "definitions",
            "set",
            "call_dependency",
            "breaker=open_for=600,min_calls=4",
        )
        assert out.returncode == 0, out.stderr
        wait_for(lambda: "open_for=600" in w.output(), what="the worker to apply the override")
        insert_jobs(sql, NAMESPACE, "call_dependency", 6)
        wait_for(
            lambda: sql("SELECT state FROM acta.breaker") == [("open",)],
            timeout=60,
            what="the breaker to open",
        )
        yield workers


def test_ls_status_and_doctor_show_the_open_breaker_and_close_breaker_closes_it(
    db: str, sql: Sql, opened: Workers, tmp_path: Path
) -> None:
    ls = acta(db, tmp_path, "definitions", "ls")
    assert ls.returncode == 0, ls.stderr
    assert (
        "* breaker            failure_rate=0.5,min_calls=4,window=60,open_for=600,probes=1"
        in ls.stdout
    )
    assert "breaker state" in ls.stdout and "open until" in ls.stdout, ls.stdout

    status = acta(db, tmp_path, "status", "--namespace", NAMESPACE)
    assert status.returncode == 0, status.stderr
    assert "breakers:" in status.stdout and "call_dependency" in status.stdout
    assert "open until" in status.stdout, status.stdout

    doctor = acta(db, tmp_path, "doctor")
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert "circuit breaker of 'call_dependency'" in doctor.stdout, doctor.stdout

    closed = acta(db, tmp_path, "definitions", "close-breaker", "call_dependency")
    assert closed.returncode == 0, closed.stderr
    assert "breaker call_dependency closed (it was open)" in closed.stdout
    assert sql("SELECT state FROM acta.breaker") == [("closed",)]
    assert "breaker call_dependency closed by hand by " in closed.stderr, closed.stderr

    missing = acta(db, tmp_path, "definitions", "close-breaker", "nope")
    assert "'nope' has no breaker state" in one_line_error(missing, "definitions close-breaker")


HOSTILE = [
    ("failure_rate=0", "failure_rate=0.0 must be a number in (0, 1]"),
    ("min_calls=-1", "min_calls=-1 must be an int >= 1"),
    ("window=1e400", "window=inf must be a number, finite"),
    ("open_for=nan", "open_for=nan must be a number, finite"),
    ("probes=2.5", "probes='2.5', which is not an int"),
    ("per=tenant", "per='tenant' must be one of"),
    ("colour=red", "is not a breaker ('colour=red')"),
    ("", "is not a breaker"),
]


def test_definitions_set_refuses_a_hostile_breaker_in_one_line_changing_nothing(
    db: str, sql: Sql, opened: Workers, tmp_path: Path
) -> None:
    before = sql("SELECT overrides FROM acta.definition WHERE kind = 'call_dependency'")
    for value, why in HOSTILE:
        out = acta(db, tmp_path, "definitions", "set", "call_dependency", f"breaker={value}")
        line = one_line_error(out, "definitions set")
        assert "breaker=" in line and why in line, line
    assert sql("SELECT overrides FROM acta.definition WHERE kind = 'call_dependency'") == before
