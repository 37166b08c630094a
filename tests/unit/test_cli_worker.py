"""``acta worker``'s options: parsed by its Typer command (there is no other parser), and
the values a worker cannot use (a NaN grace, executors out of range, a forced-stop wait
that is not a finite number of seconds > 0) refused before the app is imported."""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Coroutine
from typing import Any

import pytest
from typer.testing import CliRunner

from acta_sqla.cli import worker as worker_module
from acta_sqla.cli.commands import app
from acta_sqla.errors import ConfigurationError
from acta_sqla.settings import DEFAULT_GRACE_SECONDS


def typer_reads(monkeypatch: pytest.MonkeyPatch, *args: str) -> dict[str, Any] | None:
    """What the Typer command hands to ``serve`` for ``acta worker ARGS`` (None: refused)."""
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(
        worker_module, "serve", lambda app, **options: seen.append({"app": app, **options})
    )
    result = CliRunner().invoke(app, ["worker", *args])
    return seen[0] if result.exit_code == 0 and seen else None


@pytest.fixture(autouse=True)
def no_acta_app(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACTA_APP", raising=False)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], {}),
        (["--app", "m:a"], {"app": "m:a"}),
        (["-a", "m:a"], {"app": "m:a"}),
        (["-am:a"], {"app": "m:a"}),  # Click's attached short option
        (["--app=m:a", "--executors=64"], {"app": "m:a", "executors": 64}),
        (
            ["--app", "m:a", "--executors", "8", "--namespace", "ns", "--grace", "2.5"],
            {"app": "m:a", "executors": 8, "namespace": "ns", "grace": 2.5},
        ),
        (["--burst"], {"burst": True}),
        (["--no-burst", "--burst"], {"burst": True}),  # the last one wins, as Click says
        (["--grace", "inf"], {"grace": math.inf}),
        (["--forced-stop-wait", "2.5"], {"forced_stop_wait": 2.5}),
        (["--forced-stop-wait=0.5", "--grace=0"], {"forced_stop_wait": 0.5, "grace": 0.0}),
    ],
)
def test_the_typer_command_reads_the_options(
    monkeypatch: pytest.MonkeyPatch, args: list[str], expected: dict[str, Any]
) -> None:
    defaults = {
        "app": None,
        "executors": None,
        "namespace": None,
        "grace": 30.0,
        "forced_stop_wait": None,  # not given: ACTA_FORCED_STOP_WAIT, else 10 s
        "burst": False,
    }
    assert typer_reads(monkeypatch, *args) == defaults | expected


def test_the_app_comes_from_acta_app_when_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTA_APP", "env:app")
    assert typer_reads(monkeypatch)["app"] == "env:app"  # type: ignore[index]
    assert typer_reads(monkeypatch, "--app", "m:a")["app"] == "m:a"  # type: ignore[index]


@pytest.mark.parametrize(
    "args",
    [
        ["--app"],  # no value
        ["--executors", "x"],
        ["--executors", "2.5"],
        ["--grace", "soon"],
        ["--forced-stop-wait", "soon"],
        ["--forced-stop-wait"],  # no value
        ["--burst=yes"],
        ["--unknown"],
        ["extra"],
    ],
)
def test_what_typer_refuses_never_reaches_serve(
    monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    assert typer_reads(monkeypatch, *args) is None


@pytest.mark.parametrize("value", ["\u0663", "\uff13", "3\u0663", "\u0663.5"])
@pytest.mark.parametrize("option", ["--executors", "--grace", "--forced-stop-wait"])
def test_unicode_digits_are_refused(
    option: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python's int()/float() read them; pydantic (Typer's parser here) does not."""
    assert typer_reads(monkeypatch, option, value) is None


def test_serve_takes_the_commands_options_with_its_defaults() -> None:
    command = inspect.signature(worker_module.worker.__wrapped__).parameters  # type: ignore[attr-defined]
    served = inspect.signature(worker_module.serve).parameters
    assert list(command) == list(served)
    assert {n: p.default for n, p in command.items() if n != "app"} == {
        n: p.default for n, p in served.items() if n != "app"
    }
    assert served["grace"].default == DEFAULT_GRACE_SECONDS
    assert served["forced_stop_wait"].default is None  # the setting's own default applies


class Served:
    """``serve`` with the app import and the event loop replaced: what it got to."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.imported: list[str | None] = []
        self.ran = 0
        monkeypatch.setattr(worker_module, "load_app", self.imported.append)
        monkeypatch.setattr(worker_module, "_runner", lambda: self.run)

    def run(self, coroutine: Coroutine[Any, Any, None]) -> None:
        coroutine.close()
        self.ran += 1


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Served:
    return Served(monkeypatch)


@pytest.mark.parametrize("grace", [math.nan, -math.nan])
def test_a_nan_grace_is_refused_before_the_app_is_imported(grace: float, served: Served) -> None:
    with pytest.raises(ConfigurationError) as caught:
        worker_module.serve("m:a", grace=grace)
    assert str(caught.value) == "--grace nan: must be >= 0 seconds"
    assert (served.imported, served.ran) == ([], 0)


@pytest.mark.parametrize("grace", [-1.0, -math.inf])
def test_a_negative_grace_is_refused(grace: float, served: Served) -> None:
    with pytest.raises(ConfigurationError, match=r"must be >= 0 seconds"):
        worker_module.serve("m:a", grace=grace)
    assert served.ran == 0


@pytest.mark.parametrize("grace", [0.0, 2.5, math.inf])
def test_zero_a_number_or_no_limit_is_a_grace(grace: float, served: Served) -> None:
    """inf: running handlers may run to their end (each is still bounded by its own
    timeout, and a second signal cancels them), as a large finite grace would."""
    worker_module.serve("m:a", grace=grace)
    assert (served.imported, served.ran) == (["m:a"], 1)


@pytest.mark.parametrize("executors", [0, -1, 1025, 5000])
def test_executors_out_of_range_are_refused(executors: int, served: Served) -> None:
    with pytest.raises(ConfigurationError, match=rf"--executors {executors}: must be between 1"):
        worker_module.serve("m:a", executors=executors)
    assert served.ran == 0


def test_the_app_may_come_from_dotenv(
    served: Served, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("ACTA_APP=from.dotenv:acta\n")
    worker_module.serve(None)
    assert served.imported == ["from.dotenv:acta"]


@pytest.mark.parametrize(
    ("wait", "shown"),
    [
        (math.nan, "nan"),
        (-math.nan, "nan"),
        (-1.0, "-1"),
        (0.0, "0"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
    ],
)
def test_a_forced_stop_wait_that_is_not_a_finite_number_of_seconds_above_0_is_refused(
    wait: float, shown: str, served: Served
) -> None:
    """Before the app is imported, in one line. 0 would name every cancelled handler as
    ignoring its cancel; inf would let one SIGTERM hang past a handler that swallows it."""
    with pytest.raises(ConfigurationError) as caught:
        worker_module.serve("m:a", forced_stop_wait=wait)
    assert str(caught.value) == (
        f"--forced-stop-wait {shown}: must be a finite number of seconds > 0"
    )
    assert (served.imported, served.ran) == ([], 0)


@pytest.mark.parametrize("wait", [None, 0.001, 2.0, 600.0])
def test_a_forced_stop_wait_is_handed_to_the_worker_run(
    wait: float | None, served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed: list[dict[str, Any]] = []

    def run_worker(app: object, **options: Any) -> Coroutine[Any, Any, None]:
        handed.append(options)
        return asyncio.sleep(0)  # what the runner gets (Served closes it)

    monkeypatch.setattr(worker_module, "run_worker", run_worker)
    worker_module.serve("m:a", forced_stop_wait=wait)
    assert served.ran == 1 and handed[0]["forced_stop_wait"] == wait


class _Worker:
    """The worker ``_run`` builds, replaced: the settings it was given."""

    built: list[Any] = []
    crashed = False
    stubborn: list[object] = []

    def __init__(self, app: object, settings: Any, **options: object) -> None:
        self.built.append(settings)

    async def run(self) -> None:
        return None


@pytest.mark.parametrize(
    ("option", "variable", "expected"),
    [(None, None, 10.0), (None, "4", 4.0), (2.5, None, 2.5), (2.5, "4", 2.5)],
    ids=["default", "environment", "option", "option-beats-environment"],
)
async def test_the_worker_gets_the_option_else_acta_forced_stop_wait_else_10_s(
    option: float | None,
    variable: str | None,
    expected: float,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:
    from acta_sqla import Acta

    monkeypatch.chdir(tmp_path)  # no developer's .env
    monkeypatch.delenv("ACTA_FORCED_STOP_WAIT", raising=False)
    if variable is not None:
        monkeypatch.setenv("ACTA_FORCED_STOP_WAIT", variable)
    monkeypatch.setattr("acta_sqla.worker.Worker", _Worker)
    monkeypatch.setattr(_Worker, "built", [])
    await worker_module.run_worker(Acta(), forced_stop_wait=option)
    [settings] = _Worker.built
    assert settings.forced_stop_wait == expected


async def test_a_bad_acta_forced_stop_wait_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from acta_sqla import Acta

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ACTA_FORCED_STOP_WAIT", "nan")
    monkeypatch.setattr("acta_sqla.worker.Worker", _Worker)
    with pytest.raises(ConfigurationError) as caught:
        await worker_module.run_worker(Acta())
    assert str(caught.value) == (
        "invalid setting ACTA_FORCED_STOP_WAIT='nan': must be a finite number of seconds > 0"
    )
