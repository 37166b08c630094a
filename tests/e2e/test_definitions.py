"""Live definitions against real `acta worker` processes: an operator lowers a kind's
timeout and concurrency while workers run (applied within one heartbeat), pauses and
resumes a kind, reads `acta status` over two namespaces; CLI mistakes are one line."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import (
    Run,
    Sql,
    Workers,
    insert_jobs,
    invoke_acta,
    one_line_error,
    read_runs,
)
from tests.waiting import wait_for

APP = "tests.e2e.app_definitions:acta"
NAMESPACE = "defs"


@pytest.fixture
def workers(db: str, sql: Sql, runs_log: Path, tmp_path: Path) -> Iterator[Workers]:
    with Workers(
        APP, db, sql, runs_log, tmp_path, defaults={"ACTA_HEARTBEAT_INTERVAL": "0.5"}, ready=True
    ) as started:
        started.together(2)
        yield started


def acta(db: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return invoke_acta(db, NAMESPACE, tmp_path, *args)


def applied(workers: Workers, text: str) -> bool:
    return all(text in w.output() for w in workers.started)


def peak(runs: list[Run], key: str) -> int:
    events = sorted((r.t, 1 if r.event == "start" else -1) for r in runs if r.key == key)
    level = top = 0
    for _, step in events:
        level += step
        top = max(top, level)
    return top


def test_lowering_timeout_and_concurrency_applies_within_a_heartbeat(
    db: str, sql: Sql, workers: Workers, runs_log: Path, tmp_path: Path
) -> None:
    out = acta(db, tmp_path, "definitions", "set", "held", "timeout=1", "concurrency_limit=1")
    assert out.returncode == 0, out.stderr
    assert '"concurrency_limit": 1' in out.stdout and '"timeout": 1.0' in out.stdout
    # Each worker logs the change once, within a beat or so.
    wait_for(lambda: applied(workers, "kind 'held': policy now"), timeout=10, what="reload")
    ls = acta(db, tmp_path, "definitions", "ls")
    assert "* timeout            1.0" in ls.stdout and "  max_attempts       1" in ls.stdout
    [slow] = insert_jobs(sql, NAMESPACE, "held", args='{"seconds": 5}', concurrency_key="all")
    # Three more of the key: four in all, which the old limit (4) would have run at once.
    # No more than that: each one beyond the running one waits out 2 s bounces.
    fast = insert_jobs(sql, NAMESPACE, "held", 3, concurrency_key="all")
    wait_for(
        lambda: sql("SELECT count(*) FROM acta.job WHERE finished_at IS NOT NULL") == [(4,)],
        timeout=60,
        what="every job to end",
    )
    # The new timeout: the 5 s job was stopped after about 1 s, as a timeout.
    assert sql("SELECT status, last_error->>'type' FROM acta.job WHERE id = %s", slow) == [
        ("failed", "acta.timeout")
    ]
    assert sql("SELECT DISTINCT status FROM acta.job WHERE id = ANY(%s)", fast) == [("succeeded",)]
    assert peak(read_runs(runs_log), "held") == 1  # the new limit, across both workers


def test_a_paused_kind_stays_queued_until_resumed(
    db: str, sql: Sql, workers: Workers, tmp_path: Path
) -> None:
    out = acta(db, tmp_path, "pause", "held")
    assert out.returncode == 0 and "held paused" in out.stdout, out.stderr
    wait_for(lambda: applied(workers, "paused: held"), timeout=10, what="the pause to apply")
    held = insert_jobs(sql, NAMESPACE, "held", 3, args='{"seconds": 0}', concurrency_key="all")
    quick = insert_jobs(sql, NAMESPACE, "quick", 3)
    wait_for(
        lambda: (
            sql("SELECT count(*) FROM acta.job WHERE id = ANY(%s) AND status = 'succeeded'", quick)
            == [(3,)]
        ),
        what="the other kind to drain",
    )
    assert sql("SELECT DISTINCT status, attempts FROM acta.job WHERE id = ANY(%s)", held) == [
        ("ready", 0)
    ]
    assert "[paused]" in acta(db, tmp_path, "definitions", "ls").stdout
    out = acta(db, tmp_path, "resume", "held")
    assert out.returncode == 0, out.stderr
    wait_for(
        lambda: (
            sql("SELECT count(*) FROM acta.job WHERE id = ANY(%s) AND status = 'succeeded'", held)
            == [(3,)]
        ),
        timeout=30,
        what="the resumed kind to drain",
    )


def test_status_lists_every_namespace(db: str, sql: Sql, workers: Workers, tmp_path: Path) -> None:
    sql("INSERT INTO acta.namespace (name) VALUES ('other')")
    insert_jobs(sql, "other", "x", 2)
    out = acta(db, tmp_path, "status")
    assert out.returncode == 0, out.stderr
    lines = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines()[1:]}
    assert lines["other"][0] == "2" and lines["other"][-1] == "0"  # 2 ready, no worker
    assert lines[NAMESPACE][-1] == "2"  # two workers alive
    one = acta(db, tmp_path, "status", "--namespace", "other")
    assert "namespace 'other'" in one.stdout


def test_definitions_cli_mistakes_are_one_line_errors(
    db: str, sql: Sql, workers: Workers, tmp_path: Path
) -> None:
    cases = {
        ("definitions", "set", "held", "colour=red"): "colour='red' is not a field an operator",
        ("definitions", "set", "held", "timeout=soon"): "timeout='soon' must be a number",
        ("definitions", "set", "held", "priority=5"): "is applied by the application's code",
        ("definitions", "set", "held", "timeout"): "'timeout' is not field=value",
        ("definitions", "set", "nope", "timeout=3"): "no kind 'nope' in namespace 'defs'",
        ("definitions", "reset", "held", "colour"): "'colour' is not a field an operator",
        ("pause", "nope"): "no kind 'nope'",
    }
    before = sql("SELECT definitions_version FROM acta.namespace WHERE name = %s", NAMESPACE)
    for args, expected in cases.items():
        out = acta(db, tmp_path, *args)
        assert out.returncode != 0, args
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], (args, out.stderr)
    after = sql("SELECT definitions_version FROM acta.namespace WHERE name = %s", NAMESPACE)
    assert before == after  # nothing changed


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("k" * 2049, "kind='kkk"),  # over the bound of every name (policy.MAX_KEY_BYTES)
        ("k\udcff", r"kind='k\udcff' contains a lone surrogate"),  # argv byte 0xff
    ],
    ids=["too-long", "not-utf8"],
)
def test_a_kind_no_table_can_hold_is_refused_by_the_cli_in_one_line(
    db: str, sql: Sql, tmp_path: Path, kind: str, expected: str
) -> None:
    # Issue 28, item 11: refused before the database (a NUL cannot reach argv at all).
    for args in (
        ("definitions", "set", kind, "timeout=3"),
        ("definitions", "reset", kind),
        ("pause", kind),
        ("resume", kind),
    ):
        out = acta(db, tmp_path, *args)
        line = one_line_error(out, " ".join(args[: 2 if args[0] == "definitions" else 1]))
        assert expected in line, line
    assert "bytes long in UTF-8" in acta(db, tmp_path, "pause", "k" * 2049).stderr
    assert sql("SELECT count(*) FROM acta.definition") == [(0,)]
