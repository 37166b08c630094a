"""``acta db`` against scratch databases: run in-process (tests/harness.py's
:func:`~tests.harness.invoke_acta`, the real Typer app and its one-line errors), and as the
real console script in a subprocess where the embedded default server is started (it needs
a process of its own) and in the smoke test of every command group's exit status."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from loguru import logger
from sqlalchemy.engine import make_url

from acta_sqla import embedded, migrate
from tests.harness import acta_command, invoke_acta, one_line_error, worker_env

CLI_TIMEOUT_SECONDS = 60


def _acta(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """In-process (``cwd`` away from the repo, so that no developer's .env is read)."""
    return invoke_acta(None, None, cwd, *args, env=env)


def _acta_process(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The console script in a process of its own."""
    return subprocess.run(
        [*acta_command(), *args],
        env=env,
        cwd=cwd,  # away from the repo, so that no developer's .env is read
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_SECONDS,
    )


@pytest.fixture
def head() -> str:
    [revision] = migrate.heads()
    return revision


def test_upgrade_current_downgrade(
    scratch_database: Callable[[], str],
    acta_env_for: Callable[..., dict[str, str]],
    tmp_path: Path,
    head: str,
) -> None:
    env = acta_env_for(scratch_database())

    before = _acta("db", "current", env=env, cwd=tmp_path)
    assert (before.returncode, before.stdout) == (0, "none\n")

    up = _acta("db", "upgrade", env=env, cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    assert f"upgraded none -> {head} (head)" in up.stdout

    current = _acta("db", "current", env=env, cwd=tmp_path)
    assert (current.returncode, current.stdout) == (0, f"{head} (head)\n")

    again = _acta("db", "upgrade", env=env, cwd=tmp_path)
    assert again.returncode == 0 and f"already at {head} (head)" in again.stdout

    # "-1" reaches alembic as the revision argument, not as an unknown option.
    down = _acta("db", "downgrade", "-1", env=env, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    previous = _acta("db", "current", env=env, cwd=tmp_path).stdout.strip()
    assert previous not in ("none", f"{head} (head)")
    assert f"downgraded {head} (head) -> {previous}" in down.stdout

    base = _acta("db", "downgrade", "base", env=env, cwd=tmp_path)
    assert base.returncode == 0, base.stderr
    assert f"downgraded {previous} -> none" in base.stdout
    assert _acta("db", "current", env=env, cwd=tmp_path).stdout == "none\n"

    # The default is one step back, and there is none left.
    nothing_left = _acta("db", "downgrade", env=env, cwd=tmp_path)
    assert "-1" in one_line_error(nothing_left, "db downgrade")


def test_database_url_option_and_schema(
    scratch_database: Callable[[], str], tmp_path: Path, head: str
) -> None:
    url = scratch_database()
    env = worker_env(None)

    up = _acta("db", "upgrade", "--database-url", url, "--schema", "jobs", env=env, cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    assert "schema 'jobs'" in up.stdout

    assert migrate.current(url, schema="jobs") == head
    assert migrate.current(url) is None  # the default schema was not touched


@pytest.mark.parametrize(
    ("url", "exit_code", "says"),
    [
        ("mysql://root@127.0.0.1/app", 2, "ACTA_DATABASE_URL='mysql://root@127.0.0.1/app'"),
        ("definitely not a url", 2, "is not a database URL"),
        ("postgresql://postgres:pw@127.0.0.1:1/test", 1, "127.0.0.1:1"),
    ],
    ids=["not-postgresql", "unparsable", "nothing-listening"],
)
def test_bad_url_is_one_line_and_a_non_zero_exit(
    acta_env_for: Callable[..., dict[str, str]],
    tmp_path: Path,
    url: str,
    exit_code: int,
    says: str,
) -> None:
    result = _acta("db", "upgrade", env=acta_env_for(url), cwd=tmp_path)

    line = one_line_error(result, "db upgrade")
    assert result.returncode == exit_code
    assert says in line
    assert ":pw@" not in line  # a password is never printed


def test_missing_database_is_one_line(
    database_url: str, acta_env_for: Callable[..., dict[str, str]], tmp_path: Path
) -> None:
    url = make_url(database_url).set(database="acta_no_such_database")
    env = acta_env_for(url.render_as_string(hide_password=False))

    line = one_line_error(_acta("db", "current", env=env, cwd=tmp_path), "db current")
    assert "acta_no_such_database" in line


def test_unknown_revision_is_one_line(
    scratch_database: Callable[[], str],
    acta_env_for: Callable[..., dict[str, str]],
    tmp_path: Path,
) -> None:
    env = acta_env_for(scratch_database())
    line = one_line_error(_acta("db", "upgrade", "zzz", env=env, cwd=tmp_path), "db upgrade")
    assert "'zzz'" in line


def test_a_command_against_a_schema_behind_this_code_says_to_upgrade(
    scratch_database: Callable[[], str],
    acta_env_for: Callable[..., dict[str, str]],
    tmp_path: Path,
    head: str,
) -> None:
    # The package was upgraded, its migrations not run yet: the commands that read what
    # the newer revisions added say what to do instead of a driver's "column does not exist".
    url = scratch_database()
    migrate.upgrade(url, "0010")  # before a schedule's fire fields (0011)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO acta.schedule (namespace, name, cron, kind, enabled) "
            "VALUES ('default', 'nightly', '0 3 * * *', 'report', false)"
        )
    env = acta_env_for(url)
    for args in (("schedules", "run", "nightly"), ("schedules", "resume", "nightly")):
        line = one_line_error(_acta(*args, env=env, cwd=tmp_path), " ".join(args[:2]))
        assert f"is at revision 0010, this acta needs {head}: run `acta db upgrade`" in line
    _acta("db", "upgrade", env=env, cwd=tmp_path).check_returncode()
    assert _acta("schedules", "run", "nightly", env=env, cwd=tmp_path).returncode == 0


def test_embedded_default_when_no_url_is_configured(
    tmp_path: Path, fresh_data_dir: Path, head: str
) -> None:
    data_dir = fresh_data_dir  # a new cluster (tests/conftest.py)
    env = worker_env(None, ACTA_DATA_DIR=str(data_dir))
    try:
        up = _acta_process("db", "upgrade", env=env, cwd=tmp_path)
        assert up.returncode == 0, up.stderr
        assert f"upgraded none -> {head} (head)" in up.stdout
        assert "embedded PostgreSQL" in up.stdout

        # Left running for the next command, which finds it migrated (commands that find
        # it running need no process of their own).
        current = _acta("db", "current", env=env, cwd=tmp_path)
        assert (current.returncode, current.stdout) == (0, f"{head} (head)\n")

        stop = _acta("db", "stop", env=env, cwd=tmp_path)
        assert stop.returncode == 0
        assert stop.stdout == f"stopped the embedded PostgreSQL in {data_dir.resolve()}\n"

        again = _acta("db", "stop", env=env, cwd=tmp_path)
        assert again.returncode == 0
        assert again.stdout.startswith("no embedded PostgreSQL is running")
    finally:
        embedded.stop(data_dir)


def test_control_characters_in_stored_text_reach_the_terminal_escaped(
    scratch_database: Callable[[], str],
    acta_env_for: Callable[..., dict[str, str]],
    tmp_path: Path,
) -> None:
    # A kind or a handler's error message holding an escape sequence must not drive the
    # operator's terminal (set its title, clear the screen) when listed or shown.
    url = scratch_database()
    migrate.upgrade(url)
    with psycopg.connect(url, autocommit=True) as conn:
        job_id = conn.execute(
            "INSERT INTO acta.job (kind, status, finished_at) "
            "VALUES (E'evil\\x1b]0;owned\\x07', 'failed', now()) RETURNING id"
        ).fetchone()[0]  # type: ignore[index]
        conn.execute(
            "INSERT INTO acta.execution (job_id, id, attempt, outcome, error_type, error_message)"
            " VALUES (%s, 1, 1, 'failed', 'E', E'boom\\x1b[2J')",
            (job_id,),
        )
    env = acta_env_for(url)
    listed = _acta("jobs", "ls", env=env, cwd=tmp_path)
    shown = _acta("jobs", "show", str(job_id), env=env, cwd=tmp_path)
    for result in (listed, shown):
        assert result.returncode == 0, result.stderr
        assert "\x1b" not in result.stdout and "\x07" not in result.stdout
        assert "evil\\x1b]0;owned\\x07" in result.stdout
    assert "E: boom\\x1b[2J" in shown.stdout


def test_db_url_prints_the_embedded_servers_url_starting_it(
    tmp_path: Path, fresh_data_dir: Path, head: str
) -> None:
    # No ACTA_DATABASE_URL: `acta db url` starts the embedded server (in a data folder of its
    # own here) and prints the URL every acta command uses, which psql or psycopg can use too.
    data_dir = fresh_data_dir  # a new cluster (tests/conftest.py)
    env = worker_env(None, ACTA_DATA_DIR=str(data_dir))
    try:
        shown = _acta_process("db", "url", env=env, cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        url = shown.stdout.strip()
        assert url == f"postgresql://postgres@/acta?host={data_dir.resolve()}"

        # The same database the commands use: what `acta db upgrade` did is there.
        _acta("db", "upgrade", env=env, cwd=tmp_path).check_returncode()
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT version_num FROM acta.alembic_version").fetchone()
        assert row == (head,)

        # The server is running now: the same URL again (its password is empty).
        again = _acta("db", "url", "--show-password", env=env, cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() in (url, url.replace("postgres@", "postgres:@"))
    finally:
        embedded.stop(data_dir)


def test_db_url_prints_the_configured_url_password_masked(
    database_url: str, tmp_path: Path
) -> None:
    data_dir = tmp_path / "pgdata"
    secret = "postgresql+asyncpg://app:s3cret@db.example:6432/app?sslmode=require"
    env = worker_env(secret, ACTA_DATA_DIR=str(data_dir))

    masked = _acta("db", "url", env=env, cwd=tmp_path)
    assert (masked.returncode, masked.stdout, masked.stderr) == (
        0,
        "postgresql+asyncpg://app:***@db.example:6432/app?sslmode=require\n",
        "",
    )
    shown = _acta("db", "url", "--show-password", env=env, cwd=tmp_path)
    assert (shown.returncode, shown.stdout) == (0, secret + "\n")

    # --database-url wins over ACTA_DATABASE_URL; the URL printed is one that connects.
    real = _acta(
        "db", "url", "--show-password", "--database-url", database_url, env=env, cwd=tmp_path
    )
    assert (real.returncode, real.stdout) == (0, database_url + "\n")
    with psycopg.connect(real.stdout.strip()) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)

    # A URL names the database: the embedded server is never started for it.
    assert not data_dir.exists()

    bad = _acta("db", "url", env=worker_env("mysql://app:s3cret@db/app"), cwd=tmp_path)
    assert bad.returncode == 2
    assert "ACTA_DATABASE_URL" in one_line_error(bad, "db url") and "s3cret" not in bad.stderr


def test_demo_on_the_embedded_default_says_the_server_keeps_running_and_how_to_stop_it(
    tmp_path: Path, fresh_data_dir: Path
) -> None:
    data_dir = fresh_data_dir  # a new cluster (tests/conftest.py)
    env = worker_env(None, ACTA_DATA_DIR=str(data_dir))
    try:
        demo = _acta_process("demo", "--users", "5", env=env, cwd=tmp_path)
        assert demo.returncode == 0, demo.stderr
        last = demo.stdout.splitlines()[-1]
        assert last == (
            f"the embedded PostgreSQL in {data_dir.resolve()} keeps running for the next "
            "command; stop it with `acta db stop`"
        )
        assert embedded._postmaster_info(data_dir.resolve()).is_running()

        # The command it names does stop it.
        stop = _acta("db", "stop", env=env, cwd=tmp_path)
        assert stop.stdout == f"stopped the embedded PostgreSQL in {data_dir.resolve()}\n"
        assert not embedded.stop(data_dir)  # nothing left running
    finally:
        embedded.stop(data_dir)


def test_a_command_run_in_process_sees_its_own_environment_and_leaves_the_process_as_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What tests/harness.py's invoke_acta must set for the call and put back after, or
    # commands would leak into the tests after them: the environment (the caller's ACTA_*
    # unset), the working folder (whose .env the command reads), the streams, Typer's
    # excepthook, loguru's sinks.
    monkeypatch.setenv("ACTA_NAMESPACE", "not a namespace")
    url = "postgresql://app:s3cret@db.example/app"

    def state() -> tuple[object, ...]:
        handlers = len(logger._core.handlers)  # type: ignore[attr-defined]
        return dict(os.environ), Path.cwd(), sys.stdout, sys.stderr, sys.excepthook, handlers

    before = state()
    shown = invoke_acta(url, None, tmp_path, "db", "url")
    assert state() == before
    assert (shown.returncode, shown.stdout) == (0, "postgresql://app:***@db.example/app\n")

    (tmp_path / ".env").write_text("ACTA_NAMESPACE=not a namespace either\n")
    refused = invoke_acta(url, None, tmp_path, "db", "url")
    assert state() == before
    assert "ACTA_NAMESPACE='not a namespace either'" in one_line_error(refused, "db url")


def test_every_command_group_fails_in_one_line_from_a_real_process(
    acta_env_for: Callable[..., dict[str, str]], tmp_path: Path
) -> None:
    # The other tests run the commands in-process (tests/harness.py); this one runs the
    # console script itself, once per command group (worker: tests/e2e/test_startup.py and
    # test_database_url.py): its one line on stderr and its non-zero exit status are the
    # process's, as a shell or a monitor sees them.
    mysql = "mysql://root@127.0.0.1/app"
    nothing_listening = "postgresql://postgres:pw@127.0.0.1:1/test"
    not_postgresql = "ACTA_DATABASE_URL='mysql://"
    cases: dict[tuple[str, ...], tuple[str, int, str, str]] = {
        ("db", "current"): (mysql, 2, "db current", not_postgresql),
        # A usage error, as Click reports it, made one line by the console script.
        ("jobs", "ls", "--bogus"): (mysql, 2, "jobs ls", "no such option: --bogus"),
        ("schedules", "ls"): (mysql, 2, "schedules ls", not_postgresql),
        ("definitions", "ls"): (nothing_listening, 1, "definitions ls", "127.0.0.1:1"),
        ("doctor",): (nothing_listening, 3, "doctor", "127.0.0.1:1"),
        # A command of the top level; an argv byte that is not UTF-8 (0xff) reaches it as a
        # lone surrogate, refused before any connection.
        ("pause", "k\udcff"): (nothing_listening, 1, "pause", r"kind='k\udcff' contains a lone"),
    }
    started = {
        args: subprocess.Popen(
            [*acta_command(), *args],
            env=acta_env_for(url),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args, (url, *_) in cases.items()
    }
    for args, proc in started.items():
        stdout, stderr = proc.communicate(timeout=CLI_TIMEOUT_SECONDS)
        result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        _, code, command, says = cases[args]
        line = one_line_error(result, command)
        assert (result.returncode, says in line) == (code, True), (args, line)
        assert ":pw@" not in line  # a password is never printed
