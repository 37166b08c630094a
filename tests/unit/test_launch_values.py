"""``acta worker``'s option values: the plain path (``acta_sqla.cli.launch``) reads a number
only where the Typer command would read the same one, and both paths refuse the values a
worker cannot use (a NaN grace, executors out of range) before the app is imported."""

from __future__ import annotations

import math
from collections.abc import Coroutine
from typing import Any

import pytest
from typer.testing import CliRunner

from acta_sqla.cli import launch
from acta_sqla.cli import worker as worker_module
from acta_sqla.cli.launch import WorkerOptions, worker_options
from acta_sqla.errors import ConfigurationError

VALUES = [
    "3",
    "0003",
    "+3",
    " 3",
    "1_0",
    "3.0",
    "1e1",
    "\u0663",
    "\uff13",
    "3\u0663",
    "nan",
    "inf",
    "2.5",
]
"""Numbers as a user may type them: ASCII, Unicode digits (Arabic-Indic, full-width), and
the forms Python's int()/float() and pydantic (Typer's parser) read alike or not."""


def typer_reads(monkeypatch: pytest.MonkeyPatch, *args: str) -> WorkerOptions | None:
    """What the Typer command hands to ``serve`` for ``acta worker ARGS`` (None: refused)."""
    from acta_sqla.cli.commands import app

    seen: list[WorkerOptions] = []
    monkeypatch.setattr(worker_module, "serve", seen.append)
    result = CliRunner().invoke(app, ["worker", *args])
    return seen[0] if result.exit_code == 0 and seen else None


@pytest.mark.parametrize("option", ["--executors", "--grace"])
@pytest.mark.parametrize("value", VALUES)
def test_the_plain_path_reads_a_number_only_as_typer_reads_it(
    option: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ACTA_APP", raising=False)
    plain = worker_options([option, value])
    if plain is None:
        return  # left to Typer: one reading by construction
    via_typer = typer_reads(monkeypatch, option, value)
    assert via_typer is not None, f"{option} {value!r}: the plain path took what Typer refuses"
    assert repr(plain) == repr(via_typer)  # repr: nan == nan is False


@pytest.mark.parametrize("value", ["\u0663", "\uff13", "3\u0663", "\u0663.5"])
@pytest.mark.parametrize("option", ["--executors", "--grace"])
def test_unicode_digits_are_left_to_typer_which_refuses_them(
    option: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert worker_options([option, value]) is None
    assert typer_reads(monkeypatch, option, value) is None


class Served:
    """``serve`` with the app import and the event loop replaced: what it got to."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.imported: list[str | None] = []
        self.ran = 0
        monkeypatch.setattr(launch, "load_app", self.imported.append)
        monkeypatch.setattr(launch, "_runner", lambda: self.run)

    def run(self, coroutine: Coroutine[Any, Any, None]) -> None:
        coroutine.close()
        self.ran += 1


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Served:
    return Served(monkeypatch)


@pytest.mark.parametrize("grace", [math.nan, -math.nan])
def test_a_nan_grace_is_refused_before_the_app_is_imported(grace: float, served: Served) -> None:
    with pytest.raises(ConfigurationError) as caught:
        launch.serve(WorkerOptions(app="m:a", grace=grace))
    assert str(caught.value) == "--grace nan: must be >= 0 seconds"
    assert (served.imported, served.ran) == ([], 0)


@pytest.mark.parametrize("grace", [-1.0, -math.inf])
def test_a_negative_grace_is_refused(grace: float, served: Served) -> None:
    with pytest.raises(ConfigurationError, match=r"must be >= 0 seconds"):
        launch.serve(WorkerOptions(app="m:a", grace=grace))
    assert served.ran == 0


@pytest.mark.parametrize("grace", [0.0, 2.5, math.inf])
def test_zero_a_number_or_no_limit_is_a_grace(grace: float, served: Served) -> None:
    """inf: running handlers may run to their end (each is still bounded by its own
    timeout, and a second signal cancels them), as a large finite grace would."""
    launch.serve(WorkerOptions(app="m:a", grace=grace))
    assert (served.imported, served.ran) == (["m:a"], 1)


@pytest.mark.parametrize("executors", [0, -1, 1025, 5000])
def test_executors_out_of_range_are_refused(executors: int, served: Served) -> None:
    with pytest.raises(ConfigurationError, match=rf"--executors {executors}: must be between 1"):
        launch.serve(WorkerOptions(app="m:a", executors=executors))
    assert served.ran == 0
