"""Issue 28, items 2, 8 and 11: every key and name is checked by ONE rule
(``policy.check_key``: a non-empty str, no NUL, no lone surrogate, at most
``MAX_KEY_BYTES`` bytes in UTF-8) on every path that takes one, before the database: a
job's values with ``InvalidJob``, a declaration with ``ConfigurationError``, a signal with
``InvalidSignal``, a lock name with ``ValueError``. Before, a long key was stored and then
jammed every statement that indexed it, and a NUL was a ``DataError`` at the commit or
failed a waiting job for good. (That the longest key works in every table, and the
DuplicateJob mapping, are the db tier's: tests/db/test_keys.py.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from acta_sqla import Acta, Context, Job, WaitForSignal
from acta_sqla.errors import ConfigurationError, InvalidJob, InvalidSignal
from acta_sqla.policy import MAX_KEY_BYTES, Policy, Refused, check_key
from acta_sqla.session import resume_kind, set_policy, signal_payload
from acta_sqla.settings import NAMESPACE_PATTERN
from acta_sqla.worker.inflight import Registry
from acta_sqla.worker.locks import Locker

from .fakes import FakeClock, job
from .test_worker_locks import LockTable

LONGEST = "\U0001f600" * (MAX_KEY_BYTES // 4)
"""A key of exactly MAX_KEY_BYTES bytes (4-byte characters: 512 of them)."""

HOSTILE = {
    "too-long": "a" * (MAX_KEY_BYTES + 1),
    "too-long-in-bytes": LONGEST + "a",  # 513 characters, 2,049 bytes
    "nul": "a\x00b",
    "lone-surrogate": "a\ud800",
    "empty": "",
}
SAYS = {
    "too-long": "is 2,049 bytes long in UTF-8; a key or name is at most 2,048 bytes",
    "too-long-in-bytes": "is 2,049 bytes long in UTF-8",
    "nul": "contains a NUL character",
    "lone-surrogate": "contains a lone surrogate",
    "empty": "must be a non-empty string",
}
CASES = pytest.mark.parametrize("case", sorted(HOSTILE))

acta = Acta(namespace="keys")


@acta.job
async def h(ctx: Context, x: int = 0) -> None: ...


@acta.job(unique_key="u:{u}", lane="l:{l}", concurrency_key="c:{c}", rate="5/s", rate_key="{r}")
async def templated(ctx: Context, u: str, l: str, c: str, r: str) -> None: ...  # noqa: E741


def args(**given: str) -> dict[str, str]:
    """Every argument ``templated`` renders a key from (a default would not be rendered:
    args are stored as given)."""
    return {"u": "u", "l": "l", "c": "c", "r": "r", **given}


def test_the_rule_is_bytes_in_utf8_with_the_longest_key_accepted() -> None:
    assert check_key("a" * MAX_KEY_BYTES) == "a" * MAX_KEY_BYTES
    assert len(LONGEST.encode()) == MAX_KEY_BYTES and check_key(LONGEST) == LONGEST
    for case, value in HOSTILE.items():
        with pytest.raises(Refused, match=SAYS[case]):
            check_key(value)


# ----------------------------------------------------------------------- a job's values


@CASES
@pytest.mark.parametrize(
    "column", ["unique_key", "lane_key", "concurrency_key", "rate_key", "schedule_name"]
)
def test_job_refuses_a_bad_key_column(case: str, column: str) -> None:
    with pytest.raises(InvalidJob, match=f"h: {column}=.* {SAYS[case]}"):
        Job(kind="h", **{column: HOSTILE[case]})


@CASES
def test_job_refuses_a_bad_kind(case: str) -> None:
    with pytest.raises(InvalidJob, match=f"kind=.* {SAYS[case]}"):
        Job(kind=HOSTILE[case])
    job = Job(kind="h")
    with pytest.raises(InvalidJob, match=SAYS[case]):
        job.kind = HOSTILE[case]  # set later: the same rule


@pytest.mark.parametrize("namespace", ["n" * 59, "a\x00", "a\ud800", "", "bad ns", 5])
def test_job_refuses_a_namespace_out_of_its_rule(namespace: Any) -> None:
    with pytest.raises(InvalidJob, match=r"h: namespace=.* must be 1-58 characters"):
        Job(kind="h", namespace=namespace)
    assert Job(kind="h", namespace="n" * 58).namespace == "n" * 58


@CASES
@pytest.mark.parametrize("option", ["unique_key", "lane", "concurrency_key"])
def test_handler_job_refuses_a_bad_per_job_key(case: str, option: str) -> None:
    with pytest.raises(InvalidJob, match=f"h: {option}=.* {SAYS[case]}"):
        h.job(x=1, **{option: HOSTILE[case]})


RENDERED = {"u": "unique_key", "l": "lane_key", "c": "concurrency_key", "r": "rate_key"}


@pytest.mark.parametrize("arg", sorted(RENDERED))
def test_a_rendered_key_is_checked_after_rendering_on_both_paths(arg: str) -> None:
    prefix = "" if arg == "r" else f"{arg}:"  # "u:{u}", "l:{l}", "c:{c}", "{r}"
    room = MAX_KEY_BYTES - len(prefix)
    too_long = {
        "a" * (room + 1): "is 2,049 bytes long in UTF-8",
        "\U0001f600" * (room // 4) + "a" * (room % 4 + 1): "is 2,049 bytes long in UTF-8",
    }
    if arg == "r":
        too_long[""] = "must be a non-empty string"  # "{r}" rendered empty
    for value, says in too_long.items():
        with pytest.raises(InvalidJob, match=f"templated: {RENDERED[arg]}=.* {says}"):
            templated.job(**args(**{arg: value}))
        with pytest.raises(InvalidJob, match=f"templated: job 1: {RENDERED[arg]}=.* {says}"):
            templated.jobs([args(), args(**{arg: value})])
    fits = "a" * room  # rendered: exactly MAX_KEY_BYTES
    assert getattr(templated.job(**args(**{arg: fits})), RENDERED[arg]) == prefix + fits
    batch = templated.jobs([args(**{arg: fits})])
    assert batch.rows()[RENDERED[arg]] == [prefix + fits]


@pytest.mark.parametrize("case", ["nul", "lone-surrogate"])
def test_a_bad_character_in_a_rendered_key_is_refused_with_the_args(case: str) -> None:
    # The args themselves cannot be stored: refused as args (InvalidJobArgs is an
    # InvalidJob), whichever comes first.
    with pytest.raises(InvalidJob):
        templated.job(**args(r=HOSTILE[case]))
    with pytest.raises(InvalidJob):
        templated.jobs([args(r=HOSTILE[case])])


def test_enqueue_many_of_jobs_takes_no_bad_key_since_job_refuses_it() -> None:
    # acta.enqueue_many takes Job objects (built, so checked) or a JobBatch (checked by
    # handler.jobs): no path builds its rows from unchecked keys.
    with pytest.raises(InvalidJob):
        [Job(kind="h"), Job(kind="h", unique_key=HOSTILE["too-long"])]


# ----------------------------------------------------------------------- declarations


@pytest.mark.parametrize("case", sorted(set(HOSTILE) - {"empty"}))  # "": the function's name
def test_a_declared_kind_is_checked(case: str) -> None:
    app = Acta(namespace="decl")
    with pytest.raises(ConfigurationError, match=f"handler kind=.* {SAYS[case]}"):

        @app.job(kind=HOSTILE[case])
        async def anything(ctx: Context) -> None: ...

    @app.job(kind=LONGEST)
    async def longest(ctx: Context) -> None: ...

    assert LONGEST in app.handlers


@pytest.mark.parametrize("option", ["unique_key", "lane", "concurrency_key", "rate_key"])
def test_a_template_whose_literal_text_is_too_long_is_refused_at_declaration(
    option: str,
) -> None:
    with pytest.raises(ConfigurationError, match=f"{option}=.* 2,049 UTF-8 bytes of literal"):
        Policy(**{option: "a" * MAX_KEY_BYTES + "b{x}"})
    # A template with fields may be long; its rendered keys are what is bounded.
    assert Policy(**{option: "{x}" * 1000})


@CASES
def test_a_schedule_name_is_checked(case: str) -> None:
    app = Acta(namespace="sched")

    @app.job
    async def tick(ctx: Context) -> None: ...

    with pytest.raises(ConfigurationError, match=f"schedule name=.* {SAYS[case]}"):
        app.schedule(HOSTILE[case], "* * * * *", tick)
    with pytest.raises(ConfigurationError, match="must be a non-empty string"):
        app.schedule("   ", "* * * * *", tick)
    assert app.schedule(LONGEST, "* * * * *", tick).name == LONGEST


def test_a_schedules_rendered_keys_are_checked_at_declaration() -> None:
    app = Acta(namespace="sched")

    @app.job(lane="{l}", rate="1/s", rate_key="{r}")
    async def laned(ctx: Context, l: str, r: str = "r") -> None: ...  # noqa: E741

    with pytest.raises(ConfigurationError, match=r"lane_key=.* is 2,049 bytes long"):
        app.schedule("a", "* * * * *", laned, args={"l": HOSTILE["too-long"], "r": "r"})
    with pytest.raises(ConfigurationError, match=r"rate_key=.* is 2,049 bytes long"):
        app.schedule("b", "* * * * *", laned, args={"l": "x", "r": HOSTILE["too-long"]})
    fire = app.schedule("c", "* * * * *", laned, args={"l": LONGEST, "r": LONGEST})
    assert fire.lane_key == fire.rate_key == LONGEST


@CASES
@pytest.mark.parametrize("call", [set_policy, resume_kind])
def test_a_kind_to_change_is_checked_before_the_database(
    case: str, call: Callable[..., Any]
) -> None:
    # No session at all: the kind is refused before any statement.
    more = ({"timeout": 3},) if call is set_policy else ()
    with pytest.raises(ConfigurationError, match=f"kind=.* {SAYS[case]}"):
        call(None, "default", HOSTILE[case], *more)


# ----------------------------------------------------------------------- signals and locks


@CASES
def test_a_signal_name_is_checked_where_it_is_sent_and_where_it_is_awaited(case: str) -> None:
    with pytest.raises(InvalidSignal, match=f"signal name .* {SAYS[case]}"):
        signal_payload(HOSTILE[case], None)
    # Item 8: refused where the handler builds the wait (InvalidJob, under the attempt's
    # budget) instead of by the completion's statement (the job failed for good).
    with pytest.raises(InvalidJob, match=f"WaitForSignal: signal name .* {SAYS[case]}"):
        WaitForSignal(HOSTILE[case])
    assert WaitForSignal(LONGEST).name == LONGEST
    assert signal_payload(LONGEST, {"a": 1}) == '{"a":1}'


@CASES
async def test_a_lock_name_is_checked_before_the_statement(case: str) -> None:
    table = LockTable()
    locker = Locker(table, Registry().add(job(1), 1e9), FakeClock())
    with pytest.raises(ValueError, match=f"lock name .* {SAYS[case]}"):
        async with locker.hold(HOSTILE[case], wait=0):
            pass
    assert table.calls == []
    async with locker.hold(LONGEST, wait=0):
        assert table.holders == {LONGEST: (1, 1001)}


def test_the_namespace_rule_leaves_room_for_the_notify_channel() -> None:
    # "acta." + namespace names the channel each insert notifies: at most 63 bytes.
    assert NAMESPACE_PATTERN.match("n" * 58) and not NAMESPACE_PATTERN.match("n" * 59)
    assert len("acta." + "n" * 58) == 63


def test_a_worker_refuses_a_schema_and_namespace_whose_channel_postgresql_refuses() -> None:
    from acta_sqla.settings import Timings
    from acta_sqla.store import WorkerStore

    timings = Timings.from_heartbeat(45.0)
    assert WorkerStore("postgresql://h/db", "acta", "n" * 58, timings).channel == "acta." + "n" * 58
    with pytest.raises(ConfigurationError, match="64 bytes; PostgreSQL takes at most 63"):
        WorkerStore("postgresql://h/db", "tenant_a", "n" * 55, timings)
