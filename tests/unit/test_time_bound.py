"""The one bound of every delay-like value (``durations.MAX_SECONDS``), on every path.

Hostile values on each entry point: the bound itself is taken, the bound + 1, inf, NaN, a
negative, and an int too large for a float are refused with an error naming the field.
Before, ``delay=10**12 - 1`` was accepted and stored a due time in year 33715 that crashed
every reader, and ``Retry(after=1e13)`` or a back-off of 1e13 s failed the job for good.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from acta_sqla import Acta, ConfigurationError, Context, InvalidJob, Job, Retry, WaitForSignal
from acta_sqla.context import Context as Ctx
from acta_sqla.durations import MAX_SECONDS, SPAN
from acta_sqla.policy import Policy, Refused, override_value

acta = Acta()


@acta.job
async def h(ctx: Context, x: Any = None) -> None: ...


HOSTILE = [MAX_SECONDS + 1, 10**12 - 1, 1e13, math.inf, -math.inf, math.nan, -1, 10**400]
"""Each refused wherever a delay-like value is taken."""


def test_the_bound_keeps_every_due_time_inside_pythons_datetime() -> None:
    # now + 1.25 x the bound (the most a back-off's jitter adds) is far inside year 9999.
    assert datetime.now(UTC) + 1.25 * SPAN < datetime(9000, 1, 1, tzinfo=UTC)
    assert datetime.now(UTC) - SPAN > datetime(1, 1, 2, tzinfo=UTC)


def _paths(options: dict[str, Any]) -> list[Any]:
    return [
        lambda: Job(kind="h", **options),
        lambda: h.job(x=1, **options),
        lambda: h.jobs([{"x": 1}], **options),
    ]


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_a_delay_past_the_bound_is_refused_on_every_enqueue_path(value: Any) -> None:
    for build in _paths({"delay": value}):
        with pytest.raises(InvalidJob, match=r"h: delay=.* at most 1e10 seconds"):
            build()
    if isinstance(value, float) and math.isfinite(value) and value > 0:
        for build in _paths({"delay": timedelta(seconds=value)}):
            with pytest.raises(InvalidJob, match="at most 1e10 seconds"):
                build()


@pytest.mark.parametrize("value", [MAX_SECONDS, int(MAX_SECONDS), timedelta(seconds=MAX_SECONDS)])
def test_the_bound_itself_is_a_valid_delay(value: Any) -> None:
    for build in _paths({"delay": value}):
        build()


@pytest.mark.parametrize(
    "at",
    [
        datetime.now(UTC) + SPAN + timedelta(days=1),
        datetime.now(UTC) - SPAN - timedelta(days=1),
        datetime(9999, 12, 31, 23, 59, tzinfo=UTC),
        datetime.max.replace(tzinfo=UTC),
        datetime.min.replace(tzinfo=UTC),
        datetime(9999, 12, 31, tzinfo=__import__("datetime").timezone(timedelta(hours=-5))),
    ],
    # Ids that do not change with the clock: pytest-xdist's workers must collect the same.
    ids=["now+bound+1d", "now-bound-1d", "9999-12-31T23:59Z", "max", "min", "9999-12-31-05:00"],
)
def test_a_run_at_past_the_bound_is_refused_on_every_enqueue_path(at: datetime) -> None:
    for build in _paths({"run_at": at}):
        with pytest.raises(InvalidJob, match=r"run_at=.* must be within 1e10 seconds"):
            build()
    job = Job(kind="h")
    with pytest.raises(InvalidJob, match="must be within 1e10 seconds"):
        job.run_at = at  # set by hand after construction: the same rule


def test_a_run_at_inside_the_bound_is_taken_past_or_future() -> None:
    for at in (
        datetime.now(UTC) + SPAN - timedelta(days=1),
        datetime(2000, 1, 1, tzinfo=UTC),
    ):
        for build in _paths({"run_at": at}):
            build()


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_retry_after_past_the_bound_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match=r"Retry\(after=.*\): after must be .* at most 1e10"):
        Retry(after=value)


def test_retry_after_the_bound_itself_and_datetimes() -> None:
    assert Retry(after=MAX_SECONDS).after == MAX_SECONDS
    assert Retry(after=timedelta(seconds=MAX_SECONDS)).after == MAX_SECONDS
    with pytest.raises(ValueError, match=r"must be within 1e10 seconds \(about 317 years\) of now"):
        Retry(after=datetime.now(UTC) + SPAN + timedelta(days=1))
    with pytest.raises(ValueError, match=r"must be within 1e10 seconds \(about 317 years\) of now"):
        Retry(after=datetime.max.replace(tzinfo=UTC))
    with pytest.raises(TypeError):
        Retry(after=True)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [*HOSTILE, 0, 0.0], ids=repr)
def test_a_signal_wait_timeout_past_the_bound_is_refused(value: Any) -> None:
    with pytest.raises(InvalidJob, match=r"WaitForSignal\('s'\): timeout must be .* at most 1e10"):
        WaitForSignal("s", timeout=value)


def test_a_signal_wait_timeout_of_the_bound_is_taken() -> None:
    assert WaitForSignal("s", timeout=MAX_SECONDS).timeout == MAX_SECONDS
    assert WaitForSignal("s", timeout=timedelta(days=2)).timeout == 2 * 86400  # type: ignore[arg-type]
    assert WaitForSignal("s").timeout is None


@pytest.mark.parametrize("field", ["timeout", "backoff_base", "backoff_max", "retention"])
@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_every_time_field_of_a_policy_is_bounded_at_declaration(field: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=rf"{field}=.* at most 1e10 seconds"):
        Policy(**{field: value})
    with pytest.raises(ConfigurationError, match=rf"handler 'k': invalid job policy: {field}="):
        acta.job(kind="k", **{field: value})(lambda ctx: None)


@pytest.mark.parametrize("field", ["timeout", "backoff_base", "backoff_max", "retention"])
def test_every_time_field_of_a_policy_takes_the_bound(field: str) -> None:
    fields = {field: MAX_SECONDS}
    if field == "backoff_base":
        fields["backoff_max"] = MAX_SECONDS
    assert getattr(Policy(**fields), field) == MAX_SECONDS  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["timeout", "backoff_base", "backoff_max", "retention"])
@pytest.mark.parametrize("text", ["1e13", "10000000001", "inf", "nan", "-1", "9" * 400])
def test_an_operators_override_past_the_bound_is_refused(field: str, text: str) -> None:
    """``acta definitions set KIND backoff_base=1e13`` (the CLI's text) and the same value
    given as a number: refused before anything is stored."""
    with pytest.raises(Refused, match="at most 1e10 seconds"):
        override_value(field, text)
    assert override_value(field, "1e10") == MAX_SECONDS


def test_the_largest_back_off_stays_in_range_whatever_the_attempt() -> None:
    policy = Policy(backoff_base=MAX_SECONDS, backoff_max=MAX_SECONDS, max_attempts=2**31 - 1)
    for attempts in (1, 2, 1100, 2**31 - 2):
        assert policy.retry_delay(attempts) <= 1.25 * MAX_SECONDS


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_a_lock_wait_past_the_bound_is_refused(value: Any) -> None:
    ctx = Ctx.__new__(Ctx)
    with pytest.raises(ValueError, match=r"ctx.lock\('l', wait=.*\): wait must be .* at most 1e10"):
        ctx.lock("l", wait=value)
