"""The live definitions' reload: from the namespace's stored definitions (what the code
declared, what an operator overrode, the version) to the policies the executors use and
the kinds the claim skips. The supervisor loads the row (``WorkerStore.load_definitions``)
when the heartbeat reports a new version, calls :func:`reload` (a pure step), logs what it
says and hands the result to the stages; nothing here writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import ConfigurationError
from ..policy import Policy


class StoredDefinitions(Protocol):
    """The namespace's stored definitions (``store.Definitions``)."""

    version: int
    declared: dict[str, dict[str, Any]]
    overrides: dict[str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Reloaded:
    """What the stored definitions mean for this worker."""

    version: int
    policies: dict[str, Policy]
    """Every handled kind's policy: the declared one merged with its stored overrides."""
    paused: list[str]
    """The namespace's paused kinds, sorted (handled here or not)."""
    changed: bool
    """The version moved since the last reload (False at the first)."""
    diffs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per kind whose policy changed (only when ``changed``): the fields that changed, with
    their new values."""
    refused: dict[str, str] = field(default_factory=dict)
    """Per kind whose stored overrides cannot apply: why (its declared policy is used)."""


def reload(
    declared: Mapping[str, Policy],
    stored: StoredDefinitions,
    before: Mapping[str, Policy],
    before_version: int,
) -> Reloaded:
    """The policies and paused kinds ``stored`` gives the kinds this code ``declared``
    (``before`` and ``before_version``: the last reload's; -1 before the first)."""
    policies: dict[str, Policy] = {}
    refused: dict[str, str] = {}
    for kind, policy in declared.items():
        try:
            policies[kind] = policy.merged(stored.overrides.get(kind, {}))
        except ConfigurationError as exc:
            refused[kind] = str(exc)
            policies[kind] = policy
    changed = before_version >= 0 and stored.version != before_version
    # Paused: any kind of the namespace declared paused or paused by an operator (handled
    # here or not), the override winning over the declaration.
    paused = sorted(
        k
        for k in stored.declared.keys() | stored.overrides.keys()
        if {**stored.declared.get(k, {}), **stored.overrides.get(k, {})}.get("paused") is True
    )
    diffs: dict[str, dict[str, Any]] = {}
    if changed:
        for kind, policy in sorted(policies.items()):
            old = before.get(kind)
            if old is not None and old != policy:
                diffs[kind] = {
                    f: getattr(policy, f)
                    for f in Policy.field_names()
                    if getattr(policy, f) != getattr(old, f)
                }
    return Reloaded(stored.version, policies, paused, changed, diffs, refused)
