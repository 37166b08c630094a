"""The `acta` Typer app: each command built when it runs (``acta worker`` loads none of the
others), every usage error named after its command, and help that says what is read."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer.main
from typer.testing import CliRunner

from acta_sqla.cli import main
from acta_sqla.cli.commands import COMMANDS, app
from tests.harness import REPO_ROOT


@pytest.mark.parametrize(
    ("args", "line", "status"),
    [
        (
            ["doctor", "--namespace"],
            "acta doctor: option '--namespace' requires an argument; see 'acta doctor --help'",
            3,  # doctor's 1 and 2 are its findings
        ),
        (
            ["db", "upgrade", "--schema"],
            "acta db upgrade: option '--schema' requires an argument; see 'acta db upgrade --help'",
            2,
        ),
        (
            ["worker", "--app"],
            "acta worker: option '--app' requires an argument; see 'acta worker --help'",
            2,
        ),
        (
            ["jobs", "ls", "--namespace"],
            "acta jobs ls: option '--namespace' requires an argument; see 'acta jobs ls --help'",
            2,
        ),
        (
            ["worker", "--burst=yes"],
            "acta worker: option '--burst' does not take a value; see 'acta worker --help'",
            2,
        ),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_an_option_missing_its_value_names_its_command(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    line: str,
    status: int,
) -> None:
    """Click raises it while parsing, without a context: the line named plain ``acta`` and
    ``acta doctor --namespace`` exited 2 (its "problems found") instead of 3."""
    monkeypatch.setattr(sys, "argv", ["acta", *args])
    with pytest.raises(SystemExit) as exited:
        main()

    assert exited.value.code == status
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [line]
    assert captured.out == ""


def test_the_dashboard_help_names_the_url_it_reads_first() -> None:
    result = CliRunner().invoke(app, ["dashboard", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    [line] = [x for x in result.stdout.splitlines() if "--database-url" in x]
    said = " ".join(line.split())
    assert "(default: ACTA_DATABASE_URL, else the embedded PostgreSQL)" in said, said


def test_help_lists_every_command_in_order_and_each_builds() -> None:
    root = typer.main.get_command(app)
    assert list(root.list_commands(None)) == list(COMMANDS)  # type: ignore[attr-defined,arg-type]
    for name in COMMANDS:
        command = root.get_command(None, name)  # type: ignore[attr-defined,arg-type]
        assert command is not None and command.name == name
    shown = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0
    for name in COMMANDS:
        assert f" {name} " in shown.stdout


def run_probe(script: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``script`` run by a fresh interpreter in the checkout, with nothing of this process's
    environment but a PATH (and ``env``): what it imports is its own doing."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        env={"PATH": "/usr/bin:/bin", **env},
    )


PROBE = """
import atexit, sys
from acta_sqla.cli import main

def loaded():
    mine = sorted(m for m in sys.modules if m.startswith("acta_sqla.cli."))
    heavy = sorted(
        {m.split(".")[0] for m in sys.modules}
        & {"sqlalchemy", "alembic", "opentelemetry", "starlette", "jinja2", "uvicorn", "rich"}
    )
    dashboard = sorted(m for m in sys.modules if m.startswith("acta_sqla.dashboard"))
    print("loaded:", mine, heavy, dashboard, "typer" in sys.modules, file=sys.stderr)

atexit.register(loaded)
sys.argv = ["acta", *sys.argv[1:]]
main()
"""


def test_acta_worker_loads_only_its_own_command() -> None:
    """Parsed by Typer, started without the other commands' modules, SQLAlchemy, Alembic,
    OpenTelemetry or the dashboard (here up to importing the app, which does not exist)."""
    done = run_probe(PROBE, "worker", "--app", "no_such_module:acta")
    assert done.returncode == 2, done.stderr
    first, loaded = done.stderr.splitlines()
    assert first.startswith("acta worker: --app 'no_such_module:acta': cannot import")
    assert loaded == (
        "loaded: ['acta_sqla.cli._common', 'acta_sqla.cli.commands', 'acta_sqla.cli.worker']"
        " [] [] True"
    )


def test_a_command_registered_on_the_app_itself_is_kept() -> None:
    extended = typer.Typer(cls=type(typer.main.get_command(app)), add_completion=False)
    extended.callback()(lambda: None)

    @extended.command("hello")
    def hello() -> None:
        typer.echo("hi")

    result = CliRunner().invoke(extended, ["hello"])
    assert (result.exit_code, result.stdout) == (0, "hi\n")
    assert list(typer.main.get_command(extended).list_commands(None))[-1] == "hello"  # type: ignore[attr-defined,arg-type]


HELP_PROBE = """
import atexit, sys
from acta_sqla.cli import main

SETTINGS_AND_DATABASE = ("pydantic_settings", "asyncpg", "sqlalchemy", "alembic", "uvloop")

def loaded():
    top = sorted({m.split(".")[0] for m in sys.modules} & set(SETTINGS_AND_DATABASE))
    print("loaded:", top, "acta_sqla.settings" in sys.modules, file=sys.stderr)

atexit.register(loaded)
sys.argv = ["acta", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("args", [["--help"], ["worker", "--help"], ["jobs", "--help"]])
def test_help_reads_no_settings_and_loads_no_database_library(args: list[str]) -> None:
    """Help is Typer's, from the commands' signatures: it imports neither pydantic-settings
    (the settings module) nor asyncpg, SQLAlchemy or Alembic; the commands import them
    when they run."""
    done = run_probe(HELP_PROBE, *args, COLUMNS="200")
    assert done.returncode == 0, done.stderr
    assert "Usage: acta" in done.stdout
    assert done.stderr.splitlines()[-1] == "loaded: [] False"


CLASSIFY = """
import sys
from acta_sqla.cli._common import _failure

print(_failure(ConnectionRefusedError(111, "Connection refused")))
print(_failure(RuntimeError("a bug")))
print(sorted({m.split(".")[0] for m in sys.modules} & {"sqlalchemy", "alembic", "asyncpg"}))
"""


def test_a_users_error_is_told_from_a_bug_without_importing_sqlalchemy() -> None:
    """A command that fails before it touched the database (a worker whose database is
    down, say) classifies its error without importing SQLAlchemy or Alembic for it: an
    error of a library that was never imported cannot have been raised."""
    done = run_probe(CLASSIFY)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "('ConnectionRefusedError: [Errno 111] Connection refused', 1)",
        "None",
        "[]",
    ]
