"""Policies declared with ``@acta.job(...)``: validated once, at declaration, naming the
option and its value."""

from __future__ import annotations

import random

import pytest

from acta_sqla import Acta, ConfigurationError, Context, InvalidJob, InvalidJobArgs, Policy
from acta_sqla.policy import Rate, render_key, template_fields
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


@pytest.mark.parametrize(
    ("option", "column"),
    [("unique_key", "unique_key"), ("lane", "lane_key"), ("concurrency_key", "concurrency_key")],
)
def test_a_rendered_key_is_checked_alike_by_job_and_jobs(option: str, column: str) -> None:
    local = Acta(namespace="keys")

    @local.job(**{option: "{name}"})
    async def greet(ctx: Context, name: str) -> None: ...

    with pytest.raises(InvalidJob, match=rf"greet: {column}='' must be a non-empty string"):
        greet.job(name="")
    with pytest.raises(InvalidJob, match=rf"greet: job 1: {column}='' must be a non-empty"):
        greet.jobs([{"name": "a"}, {"name": ""}])


def test_a_key_template_naming_an_unknown_parameter_fails_at_registration() -> None:
    from acta_sqla import Acta, ConfigurationError

    app = Acta()
    with pytest.raises(ConfigurationError, match=r"concurrency_key='customer:\{custmer_id\}'"):

        @app.job(concurrency_key="customer:{custmer_id}")
        async def bill(ctx: Context, customer_id: int) -> None: ...

    @app.job(unique_key="sync:{account}")
    async def sync(ctx: Context, account: int) -> None: ...

    assert "sync" in app.handlers


# ----------------------------------------------------------------------- one check per field


@pytest.mark.parametrize(
    ("text", "count", "period"),
    [
        ("10/s", 10, 1.0),
        ("100/min", 100, 60.0),
        ("5/h", 5, 3600.0),
        ("1000/d", 1000, 86400.0),
        ("3/10s", 3, 10.0),
        ("50/15min", 50, 900.0),
        ("1/0.5s", 1, 0.5),
        (" 7 / 2 hour ", 7, 7200.0),
    ],
)
def test_rates_parse_into_count_and_period(text: str, count: int, period: float) -> None:
    rate = Policy(rate=text).rate  # type: ignore[arg-type]
    assert rate == Rate(count, period)
    assert rate is not None and rate.per_second == count / period
    assert Rate.parse(str(rate)) == rate  # the stored spelling parses back


@pytest.mark.parametrize(
    "text",
    [
        *("lots", "10", "10/", "/s", "0/s", "-1/s", "1.5/s", "10/0s", "10/ms", "10/week"),
        *("10/s/s", 10),
        # beyond what the database's admission can count or step (every admission call
        # of the worker failed with it)
        *("2147483648/d", "3000000000/d", "1/36501d", "1/100000000000d"),
    ],
)
def test_a_bad_rate_is_refused_at_decoration_naming_it_and_the_syntax(text: object) -> None:
    app = Acta()
    with pytest.raises(ConfigurationError) as caught:

        @app.job(rate=text)
        async def limited(ctx: Context) -> None: ...

    message = str(caught.value)
    assert f"rate={text!r}" in message
    assert "'100/min'" in message and "'3/10s'" in message
    assert app.handlers == {}


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"max_attempts": True}, "max_attempts=True must be an int >= 1"),
        ({"max_attempts": 2**31}, "max_attempts=2147483648"),
        ({"timeout": float("inf")}, "timeout=inf must be a number, finite, > 0 and at most 1e10"),
        ({"timeout": float("nan")}, "timeout=nan"),
        ({"timeout": "60"}, "timeout='60'"),
        ({"timeout": True}, "timeout=True"),
        ({"priority": 32768}, "priority=32768 must be an int in -32768..32767"),
        ({"priority": False}, "priority=False"),
        ({"backoff_max": float("inf")}, "backoff_max=inf"),
        ({"concurrency_limit": True}, "concurrency_limit=True must be an int >= 1"),
        ({"concurrency_limit": 2.0}, "concurrency_limit=2.0"),
        ({"retention": float("nan")}, "retention=nan"),
        ({"lane": ""}, "lane='' must be a non-empty template string"),
        ({"lane": 5}, "lane=5 must be a non-empty template string"),
        ({"unique_key": "x:{"}, "unique_key='x:{' is not a valid template"),
        ({"unique_key": "x:{0}"}, "reads args by position"),
        ({"concurrency_key": "c:{}"}, "reads args by position"),
        ({"rate_key": "r:{customer.id}"}, "reads an attribute ({customer.id})"),
        ({"lane": "l:{a:{b}}"}, "nested field"),
        ({"lane": "l:\x00"}, "NUL"),
    ],
)
def test_every_policy_field_is_checked(options: dict[str, object], names: str) -> None:
    with pytest.raises(ConfigurationError, match="invalid job policy") as caught:
        Policy(**options)  # type: ignore[arg-type]
    assert names in str(caught.value)


def test_a_concurrency_key_without_a_limit_means_one_at_a_time() -> None:
    policy = Policy(concurrency_key="customer:{customer_id}")
    assert policy.concurrency_limit == 1
    assert policy.to_json()["concurrency_limit"] == 1
    assert Policy(concurrency_key="c:{x}", concurrency_limit=4).concurrency_limit == 4
    # A key given per job on a kind that declares neither key nor limit: one at a time too.
    assert Policy().concurrency_limit is None and Policy().concurrency_slots == 1


def test_a_rate_built_in_code_is_checked_and_stored_as_text() -> None:
    assert Policy(rate=Rate(3, 10.0)).to_json()["rate"] == "3/10s"
    assert Rate.parse("3/10s") == Rate(3, 10.0)
    with pytest.raises(ValueError, match="needs N >= 1"):
        Rate(0, 1.0)


def test_to_json_round_trips_with_the_rate_as_text() -> None:
    policy = Policy(rate="3/10s", rate_key="r:{x}", timeout=60)  # type: ignore[arg-type]
    stored = policy.to_json()
    assert stored["rate"] == "3/10s" and stored["timeout"] == 60.0
    assert Policy(**stored) == policy


def test_merged_validates_each_override_naming_it() -> None:
    base = Policy()
    with pytest.raises(ConfigurationError, match=r"invalid policy override: rate='lots' is not"):
        base.merged({"rate": "lots"})
    with pytest.raises(ConfigurationError, match="max_attempts=0 must be an int >= 1"):
        base.merged({"max_attempts": 0, "timeout": 5})
    with pytest.raises(ConfigurationError, match=r"lane='l:\{' is not a valid template"):
        base.merged({"lane": "l:{"})
    with pytest.raises(ConfigurationError, match=r"backoff_max=0\.5"):
        Policy(backoff_base=1.0).merged({"backoff_max": 0.5})
    merged = base.merged({"rate": "100/min", "timeout": 5})
    assert merged.rate == Rate(100, 60.0) and merged.timeout == 5.0


@pytest.mark.parametrize("option", ["unique_key", "lane", "concurrency_key", "rate_key"])
def test_every_key_template_is_checked_against_the_parameters(option: str) -> None:
    app = Acta()
    with pytest.raises(ConfigurationError) as caught:

        @app.job(**{option: "k:{nope}"})
        async def keyed(ctx: Context, yes: int) -> None: ...

    assert f"{option}='k:{{nope}}' names ['nope']" in str(caught.value)
    assert "(yes)" in str(caught.value)


def test_templates_read_keys_of_dict_args_and_refuse_what_they_cannot_render() -> None:
    app = Acta()

    @app.job(lane="l:{customer[id]}")
    async def keyed(ctx: Context, customer: dict[str, int]) -> None: ...

    assert keyed.job(customer={"id": 7}).lane_key == "l:7"
    assert keyed.jobs([{"customer": {"id": 8}}]).lane_keys == ["l:8"]
    with pytest.raises(InvalidJobArgs, match="needs argument 'id'"):
        keyed.job(customer={})

    @app.job(lane="l:{n:d}")
    async def formatted(ctx: Context, n: object) -> None: ...

    with pytest.raises(InvalidJobArgs, match="cannot be rendered from this job's args"):
        formatted.job(n="text")


# ------------------------------------------------------------------ operator overrides


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("timeout", "30", 30.0),
        ("max_attempts", "3", 3),
        ("concurrency_limit", "4", 4),
        ("concurrency_limit", "none", None),
        ("rate", "10/s", "10/s"),
        ("paused", "true", True),
        ("paused", "off", False),
        ("retention", "none", None),
    ],
)
def test_an_override_from_the_command_line_is_read_as_its_field(
    name: str, text: str, expected: object
) -> None:
    from acta_sqla.policy import override_value

    assert override_value(name, text) == expected


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("timeout", "soon", "must be a number of seconds"),
        ("timeout", "-1", "must be"),
        ("max_attempts", "0", "must be an int >= 1"),
        ("rate", "fast", "is not a rate"),
        ("paused", "maybe", "must be true or false"),
        ("colour", "red", "is not a field an operator can set; one of: max_attempts"),
        ("priority", "5", "is applied by the application's code when it enqueues"),
        ("lane", "x", "is applied by the application's code when it enqueues"),
    ],
)
def test_a_bad_override_says_what_is_wrong(name: str, value: str, message: str) -> None:
    from acta_sqla.policy import Refused, override_value

    with pytest.raises(Refused, match=message):
        override_value(name, value)


@pytest.mark.parametrize("retention", [1e10 + 1, 10**12, 3e11])
def test_a_retention_beyond_the_database_s_timestamps_is_refused(retention: float) -> None:
    """Accepted, it failed every recovery pass of the namespace (the prune's now() minus
    it is out of range): no kind was pruned again."""
    with pytest.raises(ConfigurationError, match=r"retention=.* at most 1e10 seconds"):
        Policy(retention=retention)
    assert Policy(retention=1e10).retention == 1e10
