"""``acta worker``'s own path (``acta_sqla.cli.launch``): it takes exactly the command lines
whose options are in a plain form, reads them as the Typer command does, and leaves every
other one to Typer (help, errors, unusual forms)."""

from __future__ import annotations

import inspect

import pytest

from acta_sqla.cli.launch import WorkerOptions, worker_options
from acta_sqla.cli.worker import worker
from acta_sqla.settings import DEFAULT_GRACE_SECONDS


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], WorkerOptions()),
        (["--app", "m:a"], WorkerOptions(app="m:a")),
        (["-a", "m:a"], WorkerOptions(app="m:a")),
        (["--app=m:a", "--executors=64"], WorkerOptions(app="m:a", executors=64)),
        (
            ["--app", "m:a", "--executors", "8", "--namespace", "ns", "--grace", "2.5"],
            WorkerOptions(app="m:a", executors=8, namespace="ns", grace=2.5),
        ),
        (["--burst"], WorkerOptions(burst=True)),
        (["--burst", "--app", "m:a"], WorkerOptions(app="m:a", burst=True)),
        (["--no-burst"], WorkerOptions(burst=False)),
    ],
)
def test_plain_command_lines_are_read_as_typer_reads_them(
    args: list[str], expected: WorkerOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ACTA_APP", raising=False)
    assert worker_options(args) == expected


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--app"],  # no value
        ["--app", "--burst"],  # a value like an option: Click's rules decide
        ["--executors", "x"],  # not a number: Typer says so
        ["--grace", "-1"],
        ["--grace=-1"],
        ["--app", "m:a", "--app", "n:b"],  # a repeat
        ["--burst=yes"],
        ["--unknown"],
        ["extra"],
        ["-am:a"],
        ["-a=m:a"],  # Click reads "=m:a" as the value
    ],
)
def test_anything_else_is_left_to_typer(args: list[str]) -> None:
    assert worker_options(args) is None


def test_the_app_comes_from_acta_app_when_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTA_APP", "env:app")
    assert worker_options([]) == WorkerOptions(app="env:app")
    assert worker_options(["--app", "m:a"]) == WorkerOptions(app="m:a")
    monkeypatch.setenv("ACTA_APP", "")
    assert worker_options([]) == WorkerOptions(app=None)


def test_the_options_are_the_typer_commands_own() -> None:
    """Both paths take the same options with the same defaults: a new option of the Typer
    command that the plain path does not know would be ignored on it, so this fails."""
    typer_side = {
        name: p.default for name, p in inspect.signature(worker.__wrapped__).parameters.items()
    }
    plain_side = {name: getattr(WorkerOptions(), name) for name in typer_side}
    assert set(typer_side) == set(WorkerOptions.__dataclass_fields__)
    assert typer_side == plain_side
    assert plain_side["grace"] == DEFAULT_GRACE_SECONDS
