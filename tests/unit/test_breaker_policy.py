"""A circuit breaker's declaration: ``Breaker(...)``, its string form, ``@acta.job`` and an
operator's override, all by the one rule (policy.py), hostile input refused naming the field;
which outcomes a breaker counts (worker/breakers.py)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

import pytest

from acta_sqla import Acta, Breaker, ConfigurationError, Context
from acta_sqla.policy import Policy, Refused, override_value
from acta_sqla.values import ClaimedJob, Outcome
from acta_sqla.worker import completions
from acta_sqla.worker.breakers import Admitted, Breakers


def test_the_declared_form_and_the_string_form_are_one_breaker() -> None:
    declared = Breaker(failure_rate=0.5, min_calls=20, window=60, open_for=30, probes=1)
    assert Policy(breaker=declared).breaker == declared
    text = "failure_rate=0.5,min_calls=20,window=60,open_for=30,probes=1"
    assert str(declared) == text
    assert Policy(breaker=text).breaker == declared  # type: ignore[arg-type]
    assert Policy(breaker=declared).to_json()["breaker"] == text
    assert Breaker.parse(" min_calls = 3 , per=rate_key") == Breaker(min_calls=3, per="rate_key")


def test_a_kind_declares_one_and_it_applies_per_the_chosen_key() -> None:
    acta = Acta()

    @acta.job(breaker=Breaker(min_calls=5, per="concurrency_key"), concurrency_key="c:{x}")
    async def call(ctx: Context, x: int) -> None: ...

    breaker = acta.handlers["call"].policy.breaker
    assert breaker is not None
    assert breaker.key_of("call", "c:1", None) == "c:1"
    assert Breaker().key_of("call", "c:1", "r") == ""
    assert Breaker(per="rate_key").key_of("call", None, "r") == "r"
    # A long key is stored as its digest: with a kind of up to 2,048 bytes it must still
    # fit one index entry of the breaker table.
    long = Breaker(per="rate_key").key_of("call", None, "é" * 1000)
    assert long.startswith("sha256:") and len(long) == 71


HOSTILE: list[tuple[Any, str]] = [
    ("nonsense", "is not a breaker"),
    ("failure_rate=0", "failure_rate=0.0 must be a number in (0, 1]"),
    ("failure_rate=1.5", "must be a number in (0, 1]"),
    ("failure_rate=nan", "must be a number in (0, 1]"),
    ("failure_rate=-inf", "must be a number in (0, 1]"),
    ("min_calls=0", "min_calls=0 must be an int >= 1"),
    ("min_calls=2.5", "min_calls='2.5', which is not an int"),
    ("min_calls=99999999999", "must be an int >= 1"),
    ("window=0", "window=0.0 must be a number, finite, > 0 and at most 1e10"),
    ("window=1e11", "at most 1e10 seconds"),
    ("open_for=inf", "at most 1e10 seconds"),
    ("open_for=-1", "> 0"),
    ("probes=0", "probes=0 must be an int in 1..10000"),
    ("probes=10001", "must be an int in 1..10000"),
    ("per=tenant", "per='tenant' must be one of kind, concurrency_key, rate_key"),
    ("window=5,window=6", "gives window twice"),
    ("colour=red", "is not a breaker ('colour=red')"),
    ("x" * 5000, "is not a breaker"),
    (5, "is not a breaker"),
    (True, "is not a breaker"),
    ({"window": "60"}, "window='60' must be a number"),
    ({"probez": 1}, "unknown field(s) ['probez']"),
]


@pytest.mark.parametrize(("value", "why"), HOSTILE)
def test_hostile_declarations_are_refused_naming_the_field(value: Any, why: str) -> None:
    acta = Acta()
    with pytest.raises(ConfigurationError) as raised:

        @acta.job(breaker=value)
        async def call(ctx: Context) -> None: ...

    message = str(raised.value)
    assert "breaker=" in message and why in message, message


@pytest.mark.parametrize(("value", "why"), [(v, w) for v, w in HOSTILE if isinstance(v, str)])
def test_an_operator_s_override_is_checked_by_the_same_rule(value: str, why: str) -> None:
    with pytest.raises(Refused, match=None) as raised:
        override_value("breaker", value)
    assert why in str(raised.value)


def test_an_override_is_stored_as_text_and_none_removes_it() -> None:
    assert override_value("breaker", "min_calls=3") == (
        "failure_rate=0.5,min_calls=3,window=60,open_for=30,probes=1"
    )
    assert override_value("breaker", "none") is None
    merged = Policy().merged({"breaker": "probes=2"})
    assert merged.breaker == Breaker(probes=2)


def test_breaker_built_in_code_with_a_bad_value_says_which() -> None:
    with pytest.raises(ConfigurationError, match=r"invalid breaker: failure_rate=nan"):
        Breaker(failure_rate=math.nan)


class _Store:
    def __init__(self) -> None:
        self.calls: list[list[list[Any]]] = []

    async def breaker_record(
        self, outcomes: Sequence[Sequence[Any]]
    ) -> list[tuple[str, str, str, float | None]]:
        self.calls.append([list(o) for o in outcomes])
        return []


def _job(i: int) -> ClaimedJob:
    return ClaimedJob(i, 100 + i, "k", "{}", 1, None, 0)


async def test_only_successes_failures_and_timeouts_of_admitted_jobs_count() -> None:
    store = _Store()
    breakers = Breakers(store, "default")
    b = Breaker(min_calls=3)
    for i in range(1, 8):
        breakers.note(i, 100 + i, Admitted("k", "", b))
    policy = Policy(max_attempts=5)
    error = completions.ErrorFields("E", "boom", "")
    batch = [
        completions.succeeded(_job(1), None, 0.1),
        completions.failed(_job(2), policy, error, 0.1),
        completions.failed(_job(3), policy, error, 0.1, Outcome.TIMEOUT),
        completions.retry_at(_job(4), policy, error, 0.1, 5.0),  # a Retry: not counted
        completions.bounce(_job(5), 2.0),  # a bounce: not counted
        completions.succeeded(_job(6), None, 0.1),  # fenced out below: not counted
        completions.succeeded(_job(9), None, 0.1),  # a kind without a breaker
    ]
    breakers.written(batch, {1, 2, 3, 4, 5, 7, 9})
    await asyncio.sleep(0)
    await breakers.drain()
    assert [(o[2], o[4]) for o in store.calls[0]] == [(1, False), (2, True), (3, True)]
    assert list(breakers.admitted) == [(7, 107)]  # not yet written
