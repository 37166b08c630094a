"""The CLI's shared error handling: a user's mistake is one line on stderr and a non-zero
exit; a bug keeps its traceback. No database needed (nothing here gets that far)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import typer
from sqlalchemy.exc import OperationalError
from typer.testing import CliRunner

from acta_sqla.cli import app
from acta_sqla.cli._common import (
    EXIT_CONFIGURATION,
    EXIT_FAILURE,
    command_path,
    describe_error,
    on_database,
    run_cli,
    shown_url,
)
from acta_sqla.errors import ActaError, ConfigurationError


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("ACTA_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (
            ["db", "current"],
            {"ACTA_DATABASE_URL": "mysql://root@localhost/app"},
            "ACTA_DATABASE_URL",
        ),
        (["db", "upgrade"], {"ACTA_DATABASE_URL": "not a url"}, "is not a database URL"),
        (["db", "current", "--schema", "Bad-Schema"], {}, "--schema='Bad-Schema'"),
        (["db", "downgrade", "--database-url", "sqlite:///x.db"], {}, "needs PostgreSQL"),
    ],
)
def test_configuration_errors_are_one_line(args: list[str], env: dict[str, str], says: str) -> None:
    result = CliRunner().invoke(app, args, env=env)

    assert result.exit_code == EXIT_CONFIGURATION
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"acta {args[0]} {args[1]}: ")
    assert says in lines[0]
    assert result.stdout == ""
    assert "Traceback" not in result.output


def test_run_cli_turns_user_errors_into_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    def upgrade() -> None:
        raise ActaError("the database said no\nDETAIL: over two lines")

    upgrade.__module__ = "acta_sqla.cli.db"

    with pytest.raises(typer.Exit) as caught:
        run_cli(upgrade)()

    assert caught.value.exit_code == EXIT_FAILURE
    assert capsys.readouterr().err == (
        "acta db upgrade: the database said no DETAIL: over two lines\n"
    )


def test_run_cli_exit_codes() -> None:
    @run_cli
    def configure() -> None:
        raise ConfigurationError("bad")

    @run_cli
    def connect() -> None:
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(typer.Exit) as config:
        configure()
    with pytest.raises(typer.Exit) as refused:
        connect()
    assert (config.value.exit_code, refused.value.exit_code) == (2, 1)


def test_run_cli_lets_bugs_through() -> None:
    @run_cli
    def buggy() -> None:
        raise ZeroDivisionError("a bug, not a user mistake")

    with pytest.raises(ZeroDivisionError):
        buggy()


def test_command_path() -> None:
    def upgrade() -> None: ...

    def list_() -> None: ...

    upgrade.__module__ = "acta_sqla.cli.db"
    list_.__module__ = "acta_sqla.cli.jobs"
    assert command_path(upgrade) == "acta db upgrade"
    assert command_path(list_) == "acta jobs list"


def test_describe_error_uses_the_drivers_message() -> None:
    orig = ConnectionRefusedError(111, "Connection refused")
    wrapped = OperationalError("SELECT 1", {}, orig)
    assert describe_error(wrapped) == "ConnectionRefusedError: [Errno 111] Connection refused"


def test_on_database_names_the_database() -> None:
    with pytest.raises(ActaError) as caught, on_database("postgresql://app@db/app"):
        raise ConnectionRefusedError(111, "Connection refused")
    assert str(caught.value) == (
        "postgresql://app@db/app: ConnectionRefusedError: [Errno 111] Connection refused"
    )


def test_shown_url_masks_the_password() -> None:
    assert shown_url("postgresql://app:s3cret@db:5432/app") == "postgresql://app:***@db:5432/app"
    assert shown_url("postgresql://app@db:5432/app") == "postgresql://app@db:5432/app"
