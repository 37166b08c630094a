"""Building jobs without a database: ``Job(...)`` itself, ``handler.job(...)`` validating
args against the handler's signature (naming the field), and the job options that share
the keyword space with the args."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy.sql.elements import ClauseElement

from acta_sqla import (
    Acta,
    ConfigurationError,
    Context,
    InvalidJob,
    InvalidJobArgs,
    Job,
    PayloadTooLarge,
)
from acta_sqla.app import JOB_OPTIONS
from acta_sqla.settings import MAX_ARGS_BYTES

# ----------------------------------------------------------------------- Job(...)


def test_job_defaults() -> None:
    job = Job(kind="report")
    assert job.kind == "report"
    assert job.args == {}
    assert job.id is None  # assigned by the database


@pytest.mark.parametrize("kind", ["", None, 42])
def test_job_needs_a_kind(kind: Any) -> None:
    with pytest.raises(InvalidJob, match=r"kind=.* must be a non-empty string"):
        Job(kind=kind)


@pytest.mark.parametrize("args", [[1, 2], "user_id=1", 42])
def test_args_must_be_a_dict(args: Any) -> None:
    with pytest.raises(InvalidJobArgs, match="args must be a dict"):
        Job(kind="x", args=args)


@pytest.mark.parametrize(
    "value", [object(), {1, 2}, b"bytes", float("inf"), datetime(2026, 1, 1, tzinfo=UTC)]
)
def test_args_must_be_json(value: Any) -> None:
    with pytest.raises(InvalidJobArgs, match=r"x: args\['value'\]=.* is not JSON-serializable"):
        Job(kind="x", args={"value": value})


def test_oversized_args_are_refused_with_size_and_limit() -> None:
    with pytest.raises(PayloadTooLarge) as caught:
        Job(kind="x", args={"blob": "x" * MAX_ARGS_BYTES})
    assert f"{MAX_ARGS_BYTES:,}" in str(caught.value)
    assert "pass its id" in str(caught.value)


def test_args_just_under_the_limit_are_accepted() -> None:
    overhead = len('{"blob":""}')
    Job(kind="x", args={"blob": "x" * (MAX_ARGS_BYTES - overhead)})


def test_delay_becomes_a_database_clock_expression() -> None:
    job = Job(kind="x", delay=timedelta(seconds=90))
    assert isinstance(job.run_at, ClauseElement)
    assert "now()" in str(job.run_at.compile()).lower()


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"delay": -1}, "x: delay=-1 must be a number of seconds or a timedelta, finite, >= 0"),
        ({"delay": 5, "run_at": datetime(2030, 1, 1, tzinfo=UTC)}, "either run_at or delay"),
        ({"run_at": datetime(2030, 1, 1)}, "x: run_at=.* must be a timezone-aware datetime"),
        ({"priority": 40000}, r"x: priority=40000 must be an int in -32768\.\.32767"),
        ({"priority": "high"}, "x: priority='high' must be an int in"),
        ({"priority": True}, "x: priority=True must be an int in"),
        ({"max_attempts": 0}, "x: max_attempts=0 must be an int >= 1"),
    ],
)
def test_bad_job_fields(fields: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidJob, match=says):
        Job(kind="x", **fields)


def test_aware_run_at_is_kept() -> None:
    when = datetime(2030, 1, 1, tzinfo=UTC)
    assert Job(kind="x", run_at=when).run_at == when


# ----------------------------------------------------------------------- handler.job(...)

acta = Acta(namespace="shop")


@acta.job(unique_key="order:{order_id}", max_attempts=3, priority=4)
async def ship(ctx: Context, order_id: int, express: bool = False, note: str | None = None) -> None:
    return None


@acta.job(kind="images.resize")
def resize(ctx: Context, path: str, **extra: Any) -> None:
    return None


def test_handler_job_builds_a_job_for_its_kind_and_namespace() -> None:
    job = ship.job(order_id=7, express=True)
    assert isinstance(job, Job)
    assert (job.kind, job.namespace, job.args) == ("ship", "shop", {"order_id": 7, "express": True})
    assert job.unique_key == "order:7"  # rendered from the policy's template
    assert job.priority == 4


def test_args_are_coerced_and_stored_as_json() -> None:
    assert ship.job(order_id="42").args == {"order_id": 42}


def test_defaults_are_not_stored() -> None:
    # Left to the handler's signature at run time, so a changed default applies to
    # jobs already queued.
    assert ship.job(order_id=1).args == {"order_id": 1}


def test_missing_argument_names_the_field() -> None:
    with pytest.raises(InvalidJobArgs, match=r"ship: missing required argument 'order_id'"):
        ship.job(express=True)


def test_wrong_type_names_the_field_and_the_value() -> None:
    with pytest.raises(InvalidJobArgs) as caught:
        ship.job(order_id="forty-two")
    assert "argument 'order_id'='forty-two'" in str(caught.value)


def test_unexpected_argument_is_named() -> None:
    with pytest.raises(InvalidJobArgs, match="unexpected argument 'colour'"):
        ship.job(order_id=1, colour="red")


def test_every_problem_is_reported_together() -> None:
    with pytest.raises(InvalidJobArgs) as caught:
        ship.job(express="maybe", colour="red")
    message = str(caught.value)
    assert "'order_id'" in message
    assert "'express'" in message
    assert "'colour'" in message


def test_var_keyword_handler_takes_extra_args() -> None:
    job = resize.job(path="a.png", width=100)
    assert (job.kind, job.args) == ("images.resize", {"path": "a.png", "width": 100})


def test_stored_args_load_back_as_the_handlers_keyword_arguments() -> None:
    # What the worker calls the handler with: every parameter by its name, the
    # signature's defaults for those not stored, coerced by their annotations, and a
    # **kwargs handler's extra args beside them.
    assert ship.load_args('{"order_id": "7"}') == {"order_id": 7, "express": False, "note": None}
    assert resize.load_args('{"path": "a.png", "width": 100}') == {"path": "a.png", "width": 100}
    local = Acta()

    with pytest.warns(UserWarning, match="shadows an attribute"):  # pydantic's own note

        @local.job
        async def shadowing(ctx: Context, copy: int, json: str = "j") -> None: ...

    # Parameter names that are also BaseModel methods still arrive as the values.
    assert shadowing.load_args('{"copy": 2}') == {"copy": 2, "json": "j"}
    with pytest.raises(ValidationError):
        ship.load_args('{"order_id": "seven"}')


def test_args_pydantic_accepts_but_json_cannot_hold_are_refused() -> None:
    local = Acta()

    @local.job
    async def keep(ctx: Context, thing: object) -> None: ...

    with pytest.raises(InvalidJobArgs, match="keep: args cannot be stored as JSON"):
        keep.job(thing=object())


def test_handler_can_still_be_called_directly() -> None:
    assert resize(None, path="x") is None


# ----------------------------------------------------------------------- job options


def test_options_are_taken_beside_the_args() -> None:
    when = datetime(2030, 1, 1, tzinfo=UTC)
    job = ship.job(
        order_id=1, priority=-2, max_attempts=9, unique_key="custom", lane="l", run_at=when
    )
    assert job.args == {"order_id": 1}
    assert (job.priority, job.max_attempts, job.unique_key, job.lane_key, job.run_at) == (
        -2,
        9,
        "custom",
        "l",
        when,
    )


@pytest.mark.parametrize("option", sorted(JOB_OPTIONS))
def test_a_parameter_named_like_a_job_option_is_refused(option: str) -> None:
    local = Acta()
    namespace: dict[str, Any] = {"Context": Context}
    exec(f"def handler(ctx: Context, {option}: int) -> None: ...", namespace)

    with pytest.raises(ConfigurationError) as caught:
        local.job(namespace["handler"])
    assert f"parameter {option!r} has the name of a job option" in str(caught.value)


def test_template_needing_a_missing_arg_is_named() -> None:
    local = Acta()

    @local.job(concurrency_key="customer:{customer_id}")
    async def charge(ctx: Context, amount: int, customer_id: int | None = None) -> None: ...

    with pytest.raises(InvalidJobArgs, match="needs argument 'customer_id'"):
        charge.job(amount=5)


# ----------------------------------------------------------------------- registration


def test_handler_needs_a_context_parameter() -> None:
    local = Acta()
    with pytest.raises(ConfigurationError, match="Context as its first positional parameter"):

        @local.job
        async def nothing() -> None: ...


def test_positional_only_or_star_args_are_refused() -> None:
    local = Acta()
    with pytest.raises(ConfigurationError, match="parameter 'items' must be passable by keyword"):

        @local.job
        async def many(ctx: Context, *items: int) -> None: ...


def test_a_kind_is_registered_once() -> None:
    local = Acta()

    @local.job
    async def twice(ctx: Context) -> None: ...

    with pytest.raises(ConfigurationError, match="registered twice"):
        local.job(twice.fn)


def test_bad_namespace_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="namespace 'has space'"):
        Acta(namespace="has space")
