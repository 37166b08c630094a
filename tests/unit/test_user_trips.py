"""What a new user tripped on (issue 14, item 6): only ``ACTA_*`` variables configure acta,
every command's error line names the command as typed, and ``Retry`` takes a time."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from acta_sqla.cli import app, main
from acta_sqla.errors import Retry
from acta_sqla.settings import load_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("ACTA_") or name in ("SCHEMA", "DB_SCHEMA"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no developer's .env


# ---------------------------------------------------------------- ACTA_SCHEMA only


@pytest.mark.parametrize("variable", ["SCHEMA", "DB_SCHEMA", "schema", "db_schema"])
def test_an_unprefixed_variable_does_not_move_acta_s_tables(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "elsewhere")
    assert load_settings().db_schema == "acta"


def test_an_unprefixed_line_in_dotenv_does_not_move_acta_s_tables(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("SCHEMA=elsewhere\nDB_SCHEMA=elsewhere\n")
    assert load_settings().db_schema == "acta"


def test_acta_schema_still_configures_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SCHEMA", "elsewhere")
    monkeypatch.setenv("ACTA_SCHEMA", "jobs")
    assert load_settings().db_schema == "jobs"
    monkeypatch.delenv("ACTA_SCHEMA")
    (tmp_path / ".env").write_text("ACTA_SCHEMA=from_dotenv\n")
    assert load_settings().db_schema == "from_dotenv"
    # The command line's --schema arrives as db_schema= and wins.
    assert load_settings(db_schema="cli").db_schema == "cli"


# ---------------------------------------------------------------- error labels


BAD_URL = {"ACTA_DATABASE_URL": "mysql://root@localhost/app"}


@pytest.mark.parametrize(
    "args",
    [
        ["status"],
        ["demo"],
        ["doctor"],
        ["jobs", "ls"],
        ["jobs", "show", "1"],
        ["jobs", "cancel", "1"],
        ["jobs", "retry", "1"],
        ["db", "upgrade"],
        ["db", "downgrade"],
        ["db", "current"],
        ["db", "url"],
        ["schedules", "ls"],
        ["definitions", "ls"],
    ],
    ids=lambda args: " ".join(args),
)
def test_every_command_s_error_is_labelled_with_its_command_line(args: list[str]) -> None:
    result = CliRunner().invoke(app, args, env=BAD_URL)

    assert result.exit_code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    label = "acta " + " ".join(a for a in args if not a.isdigit())
    assert lines[0].startswith(f"{label}: "), lines[0]
    assert "ACTA_DATABASE_URL" in lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["status"],
        ["jobs", "ls"],
        ["definitions", "ls"],
        ["schedules", "ls"],
        ["pause", "send_mail"],
        ["dashboard"],
    ],
    ids=lambda args: " ".join(args),
)
def test_a_mistyped_namespace_is_one_line_not_an_empty_answer(args: list[str]) -> None:
    # Refused before any database is asked (the URL here could not be reached anyway).
    env = {"ACTA_DATABASE_URL": "postgresql://nobody@127.0.0.1:9/none"}
    result = CliRunner().invoke(app, [*args, "--namespace", "bad ns!"], env=env)

    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0] == (
        f"acta {' '.join(args[:2] if args[0] != 'pause' else args[:1])}: --namespace "
        "'bad ns!': must be 1-58 characters of letters, digits, '_', '.' or '-'"
    )


def test_the_worker_s_error_is_labelled_acta_worker() -> None:
    result = CliRunner().invoke(app, ["worker", "--app", "no_such_module:acta"], env=BAD_URL)

    assert result.exit_code != 0
    assert result.stderr.startswith("acta worker: "), result.stderr


@pytest.mark.parametrize(
    ("args", "line", "status"),
    [
        (
            ["worker", "--bogus"],
            "acta worker: no such option: --bogus (Possible options: --burst); "
            "see 'acta worker --help'",
            2,
        ),
        (
            ["jobs", "ls", "--limit", "abc"],
            "acta jobs ls: invalid value for '--limit': Input should be a valid integer, "
            "unable to parse string as an integer; see 'acta jobs ls --help'",
            2,
        ),
        (
            ["jobs", "show"],
            "acta jobs show: missing argument 'job_id'; see 'acta jobs show --help'",
            2,
        ),
        (["nosuch"], "acta: no such command 'nosuch'; see 'acta --help'", 2),
        # doctor's 1 and 2 are its findings: its mistakes exit 3, as "could not examine"
        (
            ["doctor", "--bogus"],
            "acta doctor: no such option: --bogus; see 'acta doctor --help'",
            3,
        ),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_a_usage_error_is_one_line_and_a_non_zero_exit(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    line: str,
    status: int,
) -> None:
    """The ``acta`` entry point itself (Click's own usage text and boxed error were five
    lines; doctor's mistyped option exited 2, its "problems found")."""
    monkeypatch.setattr(sys, "argv", ["acta", *args])
    with pytest.raises(SystemExit) as exited:
        main()

    assert exited.value.code == status
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [line]
    assert captured.out == ""


@pytest.mark.parametrize("args", [["--help"], ["jobs", "ls", "--help"]])
def test_help_still_exits_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["acta", *args])
    with pytest.raises(SystemExit) as exited:
        main()

    assert exited.value.code == 0
    assert "Usage: acta" in capsys.readouterr().out


def test_a_group_without_its_command_shows_its_help(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["acta", "jobs"])
    with pytest.raises(SystemExit) as exited:
        main()

    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert "Usage: acta jobs" in captured.out + captured.err
    assert "retry" in captured.out + captured.err


def test_a_command_s_own_exit_status_comes_through(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not standalone, Click returns an Exit's status instead of exiting: run_app exits
    with it (here a user error's 2)."""
    monkeypatch.setenv("ACTA_DATABASE_URL", BAD_URL["ACTA_DATABASE_URL"])
    monkeypatch.setattr(sys, "argv", ["acta", "jobs", "ls"])
    with pytest.raises(SystemExit) as exited:
        main()

    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith("acta jobs ls: ")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["db", "current", "--database-url", "foo://bar"], "--database-url='foo://bar'"),
        (["db", "current", "--schema", "Bad Schema"], "--schema='Bad Schema'"),
    ],
)
def test_a_bad_option_value_is_named_as_the_option_not_the_variable(
    args: list[str], named: str
) -> None:
    """It said ``ACTA_DATABASE_URL='foo://bar'`` for a URL given with --database-url."""
    result = CliRunner().invoke(app, args)

    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"acta db current: invalid setting {named}: "), line


def test_the_same_value_from_the_environment_is_named_as_the_variable() -> None:
    result = CliRunner().invoke(app, ["db", "current"], env={"ACTA_DATABASE_URL": "foo://bar"})

    assert result.exit_code == 2
    assert result.stderr.startswith(
        "acta db current: invalid setting ACTA_DATABASE_URL='foo://bar': "
    )


def test_a_bug_in_a_command_keeps_its_own_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception run_app does not handle propagates as itself (its Abort clause named an
    attribute Typer's Click lacks: an AttributeError was chained onto every such error)."""
    from acta_sqla.cli import jobs

    def broken(*args: object, **kwargs: object) -> None:
        raise OverflowError("date value out of range")

    monkeypatch.setattr(jobs, "_database", broken)
    monkeypatch.setattr(sys, "argv", ["acta", "jobs", "ls"])
    with pytest.raises(OverflowError):
        main()


# ---------------------------------------------------------------- Retry at a time


def test_retry_takes_seconds_as_before() -> None:
    assert Retry(after=30).after == 30.0
    assert Retry().after == 0.0
    assert Retry(after=timedelta(minutes=2)).after == 120.0
    assert Retry(after=30).at is None


def test_retry_at_an_aware_datetime_is_the_seconds_until_it() -> None:
    at = datetime.now(UTC) + timedelta(hours=1)
    retry = Retry(after=at, reason="the API's window opens")

    assert 3590 <= retry.after <= 3600
    assert retry.at == at
    assert str(retry) == "the API's window opens"


def test_retry_at_a_datetime_in_another_timezone() -> None:
    plus_five = timezone(timedelta(hours=5))
    at = (datetime.now(UTC) + timedelta(minutes=10)).astimezone(plus_five)
    assert 590 <= Retry(after=at).after <= 600
    assert "retry requested at" in str(Retry(after=at))


def test_retry_at_a_past_time_means_now() -> None:
    assert Retry(after=datetime.now(UTC) - timedelta(days=1)).after == 0.0


def test_retry_at_a_naive_datetime_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no timezone; give an aware one"):
        Retry(after=datetime(2030, 1, 1, 12, 0))


@pytest.mark.parametrize("after", [-1, float("nan"), float("inf"), timedelta(seconds=-5)])
def test_retry_refuses_negative_or_endless_delays(after: object) -> None:
    with pytest.raises(ValueError, match=r"after must be seconds .*, finite, >= 0 and at most"):
        Retry(after=after)  # type: ignore[arg-type]


@pytest.mark.parametrize("after", ["30", None, True])
def test_retry_refuses_what_is_not_a_time(after: object) -> None:
    with pytest.raises(TypeError, match="seconds, a timedelta or a timezone-aware datetime"):
        Retry(after=after)  # type: ignore[arg-type]


# ---------------------------------------------------------------- a malformed URL, a bad pid file


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app:S3cretPw@db:notaport/app",
        "postgresql://app:S3cretPw@[::1/app",
        "postgresql://app:S3cretPw@127.0.0.1:99999/app",
        "postgress://app:S3cretPw@db.internal:5432/app",
    ],
)
@pytest.mark.parametrize(
    "args",
    [["db", "current"], ["jobs", "ls"], ["worker", "--app", "tests.e2e.app:acta"]],
    ids=lambda args: " ".join(args[:2]),
)
def test_a_malformed_database_url_is_one_line_without_the_password(
    url: str, args: list[str]
) -> None:
    result = CliRunner().invoke(app, args, env={"ACTA_DATABASE_URL": url})

    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"acta {args[0]}"), lines[0]
    assert "invalid setting ACTA_DATABASE_URL=" in lines[0]
    assert "S3cretPw" not in result.output + result.stderr


@pytest.mark.parametrize("content", ["garbage\n", "12345\n/some/dir\n", ""])
def test_db_stop_on_an_unreadable_pid_file_is_one_line(tmp_path: Path, content: str) -> None:
    data_dir = tmp_path / "d"
    data_dir.mkdir()
    (data_dir / "postmaster.pid").write_text(content)

    result = CliRunner().invoke(app, ["db", "stop", "--data-dir", str(data_dir)])

    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("acta db stop: the pid file "), lines[0]
    assert "postmaster.pid is unreadable" in lines[0]
