"""``acta_sqla.cli._common.started``: the end of a command's start-up, whose collector
``acta_sqla.cli.main`` paused (acta_sqla/cli/__init__.py)."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator

import pytest

from acta_sqla.cli import main
from acta_sqla.cli._common import started


@pytest.fixture
def collector() -> Iterator[None]:
    """The collector on again after the test (what a test freezes stays frozen: harmless,
    as the test process's own collection is, tests/conftest.py)."""
    try:
        yield
    finally:
        gc.enable()


def test_the_end_of_a_paused_start_up_freezes_its_objects_and_runs_the_collector(
    collector: None,
) -> None:
    gc.disable()
    started_with = gc.get_freeze_count()
    started()
    assert gc.isenabled()
    assert gc.get_freeze_count() > started_with


def test_a_command_run_in_process_leaves_its_processs_collector_alone(collector: None) -> None:
    frozen = gc.get_freeze_count()
    started()
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen


@pytest.mark.parametrize(
    ("args", "status"), [(["--help"], 0), (["jobs", "--bogus"], 2)], ids=["help", "mistake"]
)
def test_main_called_by_a_program_gives_its_collector_back(
    collector: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    status: int,
) -> None:
    """``main`` pauses the collector for the command's start-up; a program (or a test)
    that calls it gets it back on, whether the command ends well or in a usage error."""
    assert gc.isenabled()
    monkeypatch.setattr(sys, "argv", ["acta", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == status
    assert gc.isenabled()
