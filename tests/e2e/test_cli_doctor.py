"""``acta doctor``, run in-process as the console script runs it (tests/harness.py's
:func:`~tests.harness.invoke_acta`) against real databases broken on purpose: its exit
codes (0 healthy, 1 warnings, 2 problems, 3 could not look), its ``--json`` document,
``--namespace``, and the embedded default (started by a real process)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from acta_sqla import embedded, migrate
from tests.db.test_doctor import (
    dead_rows_without_autovacuum,
    executing_past_lease,
    idle_transaction_holding_xmin,
    ready_jobs,
    sql_revisions_before,
    vacuum,
    worker_row,
)
from tests.harness import acta_command, invoke_acta, worker_env

CLI_TIMEOUT_SECONDS = 60


def doctor(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # cwd away from the repo, so that no developer's .env is read
    return invoke_acta(None, None, cwd, "doctor", *args, env=env)


def as_json(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(result.stdout)
    assert document["exit_code"] == result.returncode
    return document


def checks(document: dict[str, Any], severity: str) -> set[tuple[str, str]]:
    return {(f["check"], f["subject"]) for f in document["findings"] if f["severity"] == severity}


def test_healthy_exits_0_with_a_stable_json_shape(
    db: str, acta_env: dict[str, str], tmp_path: Path
) -> None:
    vacuum(db)

    result = doctor("--json", env=acta_env, cwd=tmp_path)

    assert result.returncode == 0, result.stdout + result.stderr
    document = as_json(result)
    assert set(document) == {
        "version",
        "status",
        "exit_code",
        "namespace",
        "schema",
        "checked_at",
        "schema_revision",
        "server",
        "findings",
        "skipped",
        "tables",
    }
    assert (document["version"], document["status"], document["namespace"]) == (
        1,
        "ok",
        "default",
    )
    [head] = migrate.heads()
    assert document["schema_revision"] == {"current": head, "head": head}
    assert checks(document, "warning") == checks(document, "problem") == set()
    for finding in document["findings"]:
        assert set(finding) == {"check", "severity", "subject", "message", "advice", "details"}
    assert [t["table"] for t in document["tables"]] == ["acta.execution", "acta.job"]
    job = document["tables"][1]
    assert {
        "live_rows",
        "dead_rows",
        "last_vacuum",
        "last_autovacuum",
        "last_analyze",
        "last_autoanalyze",
        "autovacuum_enabled",
        "table_bytes",
        "index_bytes",
        "indexes",
    } <= set(job)
    assert "job_claim_idx" in {i["name"] for i in job["indexes"]}
    assert document["skipped"] == []  # every check ran (the schema is at head)

    text = doctor(env=acta_env, cwd=tmp_path)
    assert text.returncode == 0
    assert text.stdout.splitlines()[-1].startswith("ok: 0 problems, 0 warnings")
    assert text.stderr == ""


def test_dead_rows_without_autovacuum_exit_2(
    db: str, acta_env: dict[str, str], tmp_path: Path
) -> None:
    vacuum(db)
    with dead_rows_without_autovacuum(db):
        result = doctor("--json", env=acta_env, cwd=tmp_path)

    assert result.returncode == 2, result.stdout + result.stderr
    document = as_json(result)
    assert document["status"] == "problem"
    assert {("dead_tuples", "acta.job"), ("autovacuum", "acta.job")} <= checks(document, "problem")
    [dead] = [f for f in document["findings"] if f["check"] == "dead_tuples"]
    assert dead["details"]["dead_ratio"] == 1.0
    assert dead["advice"].startswith("run VACUUM (ANALYZE) acta.job")


def test_an_idle_transaction_holding_xmin_exits_1(
    db: str, acta_env: dict[str, str], tmp_path: Path
) -> None:
    vacuum(db)
    with idle_transaction_holding_xmin(db) as pid:
        result = doctor("--json", env=acta_env, cwd=tmp_path)
        text = doctor(env=acta_env, cwd=tmp_path)

    assert result.returncode == 1, result.stdout + result.stderr
    document = as_json(result)
    assert checks(document, "warning") == {("xmin_horizon", f"pid {pid}")}
    assert text.returncode == 1
    assert f"WARNING  xmin_horizon pid {pid}: idle in transaction for" in text.stdout
    assert "advice: end it (COMMIT/ROLLBACK in the application, or SELECT " in text.stdout

    assert doctor(env=acta_env, cwd=tmp_path).returncode == 0


def test_namespace_option_expired_lease_and_dead_worker(
    db: str, acta_env: dict[str, str], tmp_path: Path
) -> None:
    vacuum(db)
    executing_past_lease(db, "stuck", expired_seconds=3600)
    dead = worker_row(db, "crashed", "dead", silent_seconds=120)

    stuck = doctor("--json", "--namespace", "stuck", env=acta_env, cwd=tmp_path)
    assert stuck.returncode == 2
    assert checks(as_json(stuck), "problem") == {("expired_leases", "namespace 'stuck'")}

    crashed = doctor("--json", "--namespace", "crashed", env=acta_env, cwd=tmp_path)
    assert crashed.returncode == 1
    assert checks(as_json(crashed), "warning") == {("dead_workers", f"worker #{dead}")}

    # ACTA_NAMESPACE is the default, as for every command.
    env = {**acta_env, "ACTA_NAMESPACE": "stuck"}
    assert doctor(env=env, cwd=tmp_path).returncode == 2
    # The default namespace, named by nobody and unknown here: said as info, exit 0.
    assert doctor(env=acta_env, cwd=tmp_path).returncode == 0

    # A mistyped namespace, by option or environment, examines nothing: said, exit 2.
    typo = doctor("--namespace", "stuk", env=acta_env, cwd=tmp_path)
    assert typo.returncode == 2
    assert "namespace 'stuk' has no jobs, no workers and no definitions; known: " in typo.stdout
    typo = doctor("--json", env={**acta_env, "ACTA_NAMESPACE": "stuk"}, cwd=tmp_path)
    assert checks(as_json(typo), "problem") == {("unknown_namespace", "namespace 'stuk'")}


def test_a_schema_behind_head_exits_2(
    scratch_database: Callable[[], str],
    acta_env_for: Callable[..., dict[str, str]],
    tmp_path: Path,
) -> None:
    url = scratch_database()
    [head] = migrate.heads()
    older = sql_revisions_before(head)[-1]
    migrate.upgrade(url, older)

    result = doctor("--json", env=acta_env_for(url), cwd=tmp_path)

    assert result.returncode == 2
    document = as_json(result)
    assert document["schema_revision"] == {"current": older, "head": head}
    assert checks(document, "problem") >= {("schema_revision", "schema 'acta'")}


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        ((), {"ACTA_DATABASE_URL": "mysql://root@127.0.0.1/app"}, "needs PostgreSQL"),
        ((), {"ACTA_DATABASE_URL": "postgresql://postgres:pw@127.0.0.1:1/x"}, "127.0.0.1:1"),
        (("--namespace", "no spaces allowed"), {}, "--namespace='no spaces allowed'"),
    ],
    ids=["not-postgresql", "nothing-listening", "bad-namespace"],
)
def test_a_user_mistake_is_one_line_and_exit_3(
    acta_env: dict[str, str],
    tmp_path: Path,
    args: tuple[str, ...],
    env: dict[str, str],
    says: str,
) -> None:
    result = doctor(*args, "--json", env={**acta_env, **env}, cwd=tmp_path)

    # 3, never 1 or 2: monitoring must not read "could not look" as a finding.
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("acta doctor: ") and says in lines[0]
    assert ":pw@" not in lines[0]


def test_the_embedded_default_when_no_url_is_set(tmp_path: Path, fresh_data_dir: Path) -> None:
    data_dir = fresh_data_dir  # a new cluster (tests/conftest.py)
    env = worker_env(None, ACTA_DATA_DIR=str(data_dir))
    try:
        up = subprocess.run(
            [*acta_command(), "db", "upgrade"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_SECONDS,
        )
        assert up.returncode == 0, up.stderr
        result = doctor(env=env, cwd=tmp_path)
        assert "the embedded PostgreSQL in" in result.stdout.splitlines()[0]
        # A fresh install: nothing vacuumed yet, but the embedded server runs autovacuum.
        assert result.returncode == 0, result.stdout
    finally:
        embedded.stop(data_dir)


def test_a_backlog_no_worker_serves_is_in_status_and_a_doctor_problem(
    db: str, acta_env: dict[str, str], tmp_path: Path
) -> None:
    """The issue's scenario: jobs enqueued before any worker ever started (no namespace
    row, no worker row) and left waiting."""
    vacuum(db)
    ready_jobs(db, "mail", due_seconds_ago=600, n=5)

    status = invoke_acta(None, None, tmp_path, "status", env=acta_env)
    assert status.returncode == 0, status.stderr
    assert "no namespaces yet" not in status.stdout
    [mail] = [line.split() for line in status.stdout.splitlines() if line.startswith("mail")]
    assert mail[1] == "5" and mail[-1] == "0"  # 5 ready, no worker alive

    result = doctor("--json", "--namespace", "mail", env=acta_env, cwd=tmp_path)
    assert result.returncode == 2
    assert checks(as_json(result), "problem") == {("ready_backlog", "namespace 'mail'")}
