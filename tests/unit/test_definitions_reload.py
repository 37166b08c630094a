"""The live definitions' reload as a pure step (``worker/definitions.py``)."""

from __future__ import annotations

from acta_sqla.policy import Policy
from acta_sqla.store import Definitions
from acta_sqla.worker import definitions


def test_overrides_merge_into_the_declared_policy_and_the_change_is_named() -> None:
    declared = {"a": Policy(timeout=10), "b": Policy()}
    first = definitions.reload(declared, Definitions(1, {}, {"a": {"timeout": 20}}), {}, -1)
    assert first.policies["a"].timeout == 20 and first.policies["b"] == Policy()
    assert not first.changed and first.diffs == {} and first.paused == []
    again = definitions.reload(
        declared, Definitions(2, {}, {"a": {"timeout": 30}}), first.policies, first.version
    )
    assert again.changed and again.diffs == {"a": {"timeout": 30}}


def test_paused_kinds_of_the_namespace_the_override_winning() -> None:
    stored = Definitions(
        3,
        {"a": {"paused": True}, "b": {"paused": True}, "elsewhere": {"paused": True}},
        {"b": {"paused": False}},
    )
    new = definitions.reload({"a": Policy()}, stored, {}, -1)
    assert new.paused == ["a", "elsewhere"]


def test_an_override_that_cannot_apply_is_refused_and_the_declared_policy_kept() -> None:
    declared = {"a": Policy(timeout=10)}
    new = definitions.reload(declared, Definitions(1, {}, {"a": {"timeout": -5}}), {}, -1)
    assert new.policies["a"] == declared["a"] and "a" in new.refused
