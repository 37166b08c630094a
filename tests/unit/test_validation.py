"""One validation, every path: ``Job(...)``, ``handler.job(...)`` and ``handler.jobs([...])``
refuse the same inputs with the same message (the batch's names the job's position after
the kind), and what they refuse is exactly what the worker could not load.

The limits are tied to the worker's own loader (``Handler.load_args``, pydantic's JSON
parser): a test loads the deepest and the longest accepted args and fails to load one more,
so a pydantic upgrade that moves a limit fails here instead of failing jobs.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from acta_sqla import Acta, Context, InvalidJob, InvalidJobArgs, Job, PayloadTooLarge
from acta_sqla.settings import MAX_ARGS_BYTES, MAX_ARGS_DEPTH, MAX_ARGS_INT_DIGITS

acta = Acta()


@acta.job
async def h(ctx: Context, x: Any = None) -> None: ...


def nested(levels: int, leaf: Any = 1) -> Any:
    """``levels`` lists around ``leaf``: as ``{"x": nested(n)}`` the args are n+1 deep."""
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def refusals(args: dict[str, Any]) -> tuple[BaseException, BaseException, BaseException]:
    """What each path raises for the same args."""
    caught = []
    for build in (
        lambda: Job(kind="h", args=args),
        lambda: h.job(**args),
        lambda: h.jobs([{"x": 0}, args]),
    ):
        with pytest.raises(InvalidJob) as error:
            build()
        caught.append(error.value)
    return caught[0], caught[1], caught[2]


def assert_same(args: dict[str, Any]) -> str:
    """The three paths refuse ``args`` with one error type and one message; returns it."""
    single, handler_single, batch = refusals(args)
    assert type(single) is type(handler_single) is type(batch)
    assert str(handler_single) == str(single)
    assert str(batch) == str(single).replace("h: ", "h: job 1: ", 1)
    return str(single)


# ------------------------------------------------------------------------ args


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (math.nan, r"args\['x'\]=nan is not JSON-serializable: JSON has no NaN or Infinity"),
        (math.inf, r"args\['x'\]=inf is not JSON-serializable"),
        ([1.0, -math.inf], r"args\['x'\]\[1\]=-inf is not JSON-serializable"),
        ({"ratio": math.nan}, r"args\['x'\]\['ratio'\]=nan"),
        ("\ud800", r"args\['x'\] contains a lone surrogate \('\\ud800'\)"),
        (["ok", "a\udfffb"], r"args\['x'\]\[1\] contains a lone surrogate"),
        ({"\ud800": 1}, r"args\['x'\] has a key '\\ud800' holding a NUL or a lone surrogate"),
        ("a\x00b", r"args\['x'\] contains a NUL character"),
        ({"k\x00": 1}, r"args\['x'\] has a key 'k\\x00' holding a NUL"),
        (10**5000, rf"args\['x'\] is an integer of more than {MAX_ARGS_INT_DIGITS:,} digits"),
        (-(10**MAX_ARGS_INT_DIGITS), "is an integer of more than"),
        (nested(MAX_ARGS_DEPTH), rf"args\['x'\] is nested deeper than {MAX_ARGS_DEPTH} levels"),
        (nested(300), "is nested deeper than"),  # past pydantic's own serialization limit
        (nested(10_000), "is nested deeper than"),  # past Python's recursion limit
        ({"a": nested(MAX_ARGS_DEPTH - 1)}, r"args\['x'\] is nested deeper than"),
    ],
    ids=[
        "nan",
        "inf",
        "-inf-in-list",
        "nan-in-dict",
        "lone-surrogate",
        "low-surrogate-in-list",
        "surrogate-key",
        "nul",
        "nul-key",
        "10**5000",
        "-10**4300",
        "depth-201",
        "depth-301",
        "depth-10001",
        "dict-depth-201",
    ],
)
def test_every_path_refuses_what_the_worker_cannot_load_with_one_message(
    value: Any, says: str
) -> None:
    message = assert_same({"x": value})
    assert message.startswith("h: args")
    assert re.search(says, message), message


def test_the_messages_say_what_to_do() -> None:
    assert "pass None or a string" in assert_same({"x": math.nan})
    assert "pass it as a string" in assert_same({"x": 10**5000})
    assert "store the data in your own table" in assert_same({"x": nested(250)})
    assert "PostgreSQL's JSONB cannot store" in assert_same({"x": "\x00"})


def test_a_self_containing_value_is_refused_not_a_recursion_error() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert "nested deeper than" in assert_same({"x": loop})


def test_the_deepest_accepted_args_load_in_the_worker_and_one_more_level_does_not() -> None:
    deepest = {"x": nested(MAX_ARGS_DEPTH - 1)}  # the args object is level 1
    stored = [Job(kind="h", args=deepest).args, h.job(**deepest).args]
    [batch_text] = h.jobs([deepest]).args_json
    for text in [json.dumps(a) for a in stored] + [batch_text]:
        assert h.load_args(text)["x"] == deepest["x"]
    with pytest.raises(ValueError, match="recursion limit exceeded"):
        h.load_args(json.dumps({"x": nested(MAX_ARGS_DEPTH)}))


def test_the_longest_accepted_integer_loads_in_the_worker_and_one_more_digit_does_not() -> None:
    longest = 10**MAX_ARGS_INT_DIGITS - 1
    [text] = h.jobs([{"x": longest}]).args_json
    assert Job(kind="h", args={"x": longest}).args == h.job(x=longest).args == {"x": longest}
    assert h.load_args(text)["x"] == longest
    with pytest.raises(ValueError, match="number out of range"):
        h.load_args('{"x": 1' + "0" * MAX_ARGS_INT_DIGITS + "}")


@pytest.mark.parametrize(
    "value",
    [
        "NaN and Infinity are fine words",
        "\\u0000 written out",
        "[" * (MAX_ARGS_DEPTH + 1),
        "9" * (MAX_ARGS_INT_DIGITS + 1),
        "\U0001f600 astral, not a surrogate",
        [[1, 2]] * (MAX_ARGS_DEPTH + 1),  # many brackets, shallow
        1e308,
        -(2**64),
    ],
    ids=[
        "nan-word",
        "escaped-nul-text",
        "brackets-in-text",
        "long-digit-string",
        "emoji",
        "wide",
        "1e308",
        "-2**64",
    ],
)
def test_values_that_only_look_suspect_are_accepted_on_every_path(value: Any) -> None:
    args = {"x": value}
    assert Job(kind="h", args=args).args == args
    assert h.job(**args).args == args
    [text] = h.jobs([args]).args_json
    assert json.loads(text) == args
    assert h.load_args(text)["x"] == value


def test_size_is_the_utf8_json_on_every_path() -> None:
    overhead = len('{"x":""}')
    fits = {"x": "é" * ((MAX_ARGS_BYTES - overhead) // 2)}  # two bytes each in UTF-8
    Job(kind="h", args=fits)
    h.job(**fits)
    h.jobs([fits])
    message = assert_same({"x": "é" * ((MAX_ARGS_BYTES - overhead) // 2 + 1)})
    assert f"the limit is {MAX_ARGS_BYTES:,}" in message
    single, _, _ = refusals({"x": "x" * MAX_ARGS_BYTES})
    assert isinstance(single, PayloadTooLarge)


def test_nothing_is_coerced_to_null() -> None:
    # pydantic writes NaN as null unless told otherwise: the args model is told otherwise.
    @acta.job
    async def typed(ctx: Context, ratio: float) -> None: ...

    with pytest.raises(InvalidJobArgs, match=r"typed: args\['ratio'\]=nan"):
        typed.job(ratio=math.nan)
    with pytest.raises(InvalidJobArgs, match=r"typed: job 0: args\['ratio'\]=inf"):
        typed.jobs([{"ratio": math.inf}])


# ------------------------------------------------------------------------ options


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"priority": 99999}, r"priority=99999 must be an int in -32768\.\.32767"),
        ({"priority": -32769}, "priority=-32769 must be an int in"),
        ({"priority": "high"}, "priority='high' must be an int in"),
        ({"priority": True}, "priority=True must be an int in"),
        ({"priority": 1.0}, "priority=1.0 must be an int in"),
        ({"priority": None}, "priority=None must be an int in"),
        ({"max_attempts": 0}, "max_attempts=0 must be an int >= 1"),
        ({"max_attempts": True}, "max_attempts=True must be an int >= 1"),
        ({"max_attempts": 2.5}, "max_attempts=2.5 must be an int >= 1"),
        ({"max_attempts": 2**31}, "max_attempts=2147483648 must be an int >= 1"),
        ({"delay": -1}, "delay=-1 must be a number of seconds or a timedelta"),
        ({"delay": timedelta(seconds=-1)}, "delay=datetime.timedelta"),
        ({"delay": math.nan}, "delay=nan must be"),
        ({"delay": math.inf}, "delay=inf must be"),
        ({"delay": "5"}, "delay='5' must be"),
        ({"delay": True}, "delay=True must be"),
        ({"delay": 10**400}, "delay=1000"),
        ({"delay": 1e13}, r"delay=10000000000000.0 must be .* at most 1e10 seconds"),
        ({"run_at": datetime(2030, 1, 1)}, "run_at=.* must be a timezone-aware datetime"),
        ({"run_at": "2030-01-01T00:00:00Z"}, "run_at='2030-01-01T00:00:00Z' must be"),
        ({"run_at": date(2030, 1, 1)}, "run_at=datetime.date"),
        (
            {"run_at": datetime(2030, 1, 1, tzinfo=UTC), "delay": 5},
            "give either run_at or delay, not both",
        ),
    ],
)
def test_every_path_refuses_the_same_options_with_the_same_message(
    options: dict[str, Any], says: str
) -> None:
    caught = []
    for build in (
        lambda: Job(kind="h", **options),
        lambda: h.job(x=1, **options),
        lambda: h.jobs([{"x": 1}, {"x": 2}], **options),
    ):
        with pytest.raises(InvalidJob) as error:
            build()
        caught.append(str(error.value))
    assert caught[0] == caught[1] == caught[2], caught
    assert caught[0].startswith("h: ")
    assert re.search(says, caught[0]), caught[0]


@pytest.mark.parametrize("option", ["unique_key", "concurrency_key"])
@pytest.mark.parametrize(
    ("value", "says"),
    [(5, "must be a non-empty string"), ("", "must be a non-empty string"), ("a\x00", "NUL")],
)
def test_per_job_keys_are_checked_the_same_by_job_and_handler_job(
    option: str, value: Any, says: str
) -> None:
    with pytest.raises(InvalidJob) as single:
        Job(kind="h", **{option: value})
    with pytest.raises(InvalidJob) as handler_single:
        h.job(x=1, **{option: value})
    assert str(single.value) == str(handler_single.value)
    assert f"h: {option}={value!r} " in str(single.value) and says in str(single.value)


def test_a_lane_is_a_key_on_both_paths() -> None:
    with pytest.raises(InvalidJob, match="h: lane=5 must be a non-empty string"):
        h.job(x=1, lane=5)
    with pytest.raises(InvalidJob, match="h: lane_key=5 must be a non-empty string"):
        Job(kind="h", lane_key=5)


def test_a_parent_is_never_given_by_hand() -> None:
    # parent_id is acta's own: set when a parent's handler returns WaitForChildren.
    with pytest.raises(InvalidJob, match=r"h: parent_id is set by acta .*WaitForChildren"):
        Job(kind="h", parent_id=7)
    with pytest.raises(InvalidJob, match=r"unknown job option\(s\) \['parent'\]"):
        h.jobs([{"x": 1}], parent=9)


def test_good_options_mean_the_same_on_every_path() -> None:
    when = datetime(2030, 1, 1, tzinfo=UTC)
    batch = h.jobs([{"x": 1}], priority=-5, max_attempts=3, run_at=when)
    job = h.job(x=1, priority=-5, max_attempts=3, run_at=when)
    assert (batch.priority, batch.max_attempts, batch.run_at) == (
        job.priority,
        job.max_attempts,
        job.run_at,
    )
    assert h.jobs([{"x": 1}], delay=timedelta(minutes=2)).delay == 120.0
    assert h.job(x=1, delay=timedelta(minutes=2))._delay_seconds == 120.0
    assert Job(kind="h", delay=0)._delay_seconds == 0.0
    assert h.job(x=1, run_at=None, delay=None).args == {"x": 1}


def test_jobs_refuses_unknown_and_per_job_options() -> None:
    with pytest.raises(InvalidJob, match=r"h: unknown job option\(s\) \['retries'\]; known: "):
        h.jobs([{"x": 1}], retries=3)
    with pytest.raises(InvalidJob, match="differ per job"):
        h.jobs([{"x": 1}], lane="a")
