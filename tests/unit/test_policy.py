"""Policies declared with ``@acta.job(...)``: validated once, at declaration, naming the
option and its value."""

from __future__ import annotations

import random

import pytest

from acta_sqla import Acta, ConfigurationError, Context, InvalidJobArgs, Policy
from acta_sqla.policy import render_key, template_fields
from acta_sqla.settings import DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT_SECONDS


def test_defaults() -> None:
    policy = Policy()
    assert policy.max_attempts == DEFAULT_MAX_ATTEMPTS
    assert policy.timeout == DEFAULT_TIMEOUT_SECONDS
    assert policy.priority == 0


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"max_attempts": 0}, "max_attempts=0"),
        ({"max_attempts": 2.5}, "max_attempts=2.5"),
        ({"timeout": 0}, "timeout=0"),
        ({"timeout": -1.0}, "timeout=-1.0"),
        ({"priority": 40000}, "priority=40000"),
        ({"priority": "high"}, "priority='high'"),
        ({"backoff_base": -1.0}, "backoff_base=-1.0"),
        ({"backoff_base": 10.0, "backoff_max": 5.0}, "backoff_max=5.0"),
        ({"concurrency_limit": 0}, "concurrency_limit=0"),
        ({"retention": -5.0}, "retention=-5.0"),
    ],
)
def test_bad_policy_names_the_option_and_value(options: dict[str, object], names: str) -> None:
    with pytest.raises(ConfigurationError, match="invalid job policy") as caught:
        Policy(**options)  # type: ignore[arg-type]
    assert names in str(caught.value)


def test_all_problems_are_reported_at_once() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Policy(max_attempts=0, timeout=0)
    assert "max_attempts=0" in str(caught.value)
    assert "timeout=0" in str(caught.value)


def test_acta_job_validates_its_policy_at_declaration() -> None:
    acta = Acta()
    with pytest.raises(ConfigurationError, match="max_attempts=0"):

        @acta.job(max_attempts=0)
        async def bad(ctx: Context) -> None: ...

    assert acta.handlers == {}


def test_acta_job_rejects_unknown_options_listing_the_known_ones() -> None:
    acta = Acta()
    with pytest.raises(ConfigurationError, match=r"\['retries'\]") as caught:

        @acta.job(retries=3)
        async def bad(ctx: Context) -> None: ...

    assert "max_attempts" in str(caught.value)


def test_handler_carries_its_policy() -> None:
    acta = Acta()

    @acta.job(max_attempts=5, timeout=60, priority=2)
    async def send(ctx: Context) -> None: ...

    assert send.policy == Policy(max_attempts=5, timeout=60, priority=2)


def test_retry_delay_is_exponential_within_25_percent_and_capped() -> None:
    policy = Policy(backoff_base=1.0, backoff_max=100.0)
    rng = random.Random(7)
    for attempts, base in [(1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0), (20, 100.0)]:
        for _ in range(50):
            assert base * 0.75 <= policy.retry_delay(attempts, rng) <= base * 1.25


def test_merged_applies_known_overrides_only() -> None:
    merged = Policy(max_attempts=3).merged({"max_attempts": 7, "not_a_field": 1})
    assert merged.max_attempts == 7
    assert merged.to_json()["max_attempts"] == 7


def test_key_templates() -> None:
    assert template_fields("customer:{customer_id}:{region}") == ["customer_id", "region"]
    assert render_key("customer:{customer_id}", {"customer_id": 42}, "lane", "k") == "customer:42"
    assert render_key(None, {}, "lane", "k") is None
    with pytest.raises(InvalidJobArgs, match="needs argument 'customer_id'"):
        render_key("customer:{customer_id}", {}, "concurrency_key", "charge")


def test_a_key_template_naming_an_unknown_parameter_fails_at_registration() -> None:
    from acta_sqla import Acta, ConfigurationError

    app = Acta()
    with pytest.raises(ConfigurationError, match=r"concurrency_key='customer:\{custmer_id\}'"):

        @app.job(concurrency_key="customer:{custmer_id}")
        async def bill(ctx: Context, customer_id: int) -> None: ...

    @app.job(unique_key="sync:{account}")
    async def sync(ctx: Context, account: int) -> None: ...

    assert "sync" in app.handlers
