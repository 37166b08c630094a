"""The public names say what they are: ``acta_sqla.WorkerRow`` is the ORM row of
``acta.worker`` (the process that runs jobs is ``acta_sqla.worker.Worker``); the row's old
name ``acta_sqla.Worker`` still works, with a DeprecationWarning."""

from __future__ import annotations

import pytest

import acta_sqla
from acta_sqla import models
from acta_sqla.values import Outcome


def test_the_worker_row_is_exported_as_worker_row() -> None:
    assert acta_sqla.WorkerRow is models.WorkerRow
    assert "WorkerRow" in acta_sqla.__all__ and "Worker" not in acta_sqla.__all__
    assert "Worker" not in dir(acta_sqla)


def test_the_old_name_warns_and_still_gives_the_row() -> None:
    with pytest.warns(DeprecationWarning, match="acta_sqla.WorkerRow"):
        row = acta_sqla.Worker  # type: ignore[attr-defined]
    assert row is models.WorkerRow
    # Every access warns, not only the first (the name is never cached in the module).
    with pytest.warns(DeprecationWarning):
        acta_sqla.Worker  # type: ignore[attr-defined]  # noqa: B018


def test_each_outcome_is_named_as_stored() -> None:
    assert {o.name.lower() for o in Outcome} == {o.value for o in Outcome}
    assert Outcome.FAILED == "failed" and Outcome.FAIL == "fail"
