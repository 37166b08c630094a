"""The statements that run on the application's own SQLAlchemy session (enqueue, cancel,
retry): Core/ORM constructs, so they honour ``schema_translate_map`` and any driver."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    Double,
    Integer,
    Select,
    SmallInteger,
    Text,
    bindparam,
    cast,
    func,
    literal_column,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.orm import aliased, attributes

from ..models import ACTIVE_STATUSES, TERMINAL_STATUSES, Definition, Job, JobStatus, Namespace
from ._render import ACTIVE

_ACTIVE = [s.value for s in ACTIVE_STATUSES]
_UNIQUE_WHERE = text(f"unique_key IS NOT NULL AND status IN {ACTIVE}")

# ---------------------------------------------------------------------------- enqueue

BULK_FIELDS: tuple[tuple[str, Any], ...] = (
    ("namespace", Text),
    ("kind", Text),
    ("priority", SmallInteger),
    ("run_at", Text),
    ("delay", Double),
    ("max_attempts", Integer),
    ("concurrency_key", Text),
    ("rate_key", Text),
    ("lane_key", Text),
    ("unique_key", Text),
    ("trace_context", Text),
)
"""The fields of one job in ``insert_jobs_bulk``'s ``:rows``, in order, with their types
(``args`` travels apart, already JSON)."""


def job_insert_values(job: Job) -> dict[str, Any]:
    """The column values set on a transient ``Job`` (SQL expressions included)."""
    state = attributes.instance_state(job)
    return {
        key: value
        for key, value in state.dict.items()
        if key in Job.__table__.c and not key.startswith("_")
    }


def insert_unique_job(values: dict[str, Any]) -> Any:
    """INSERT one job unless a non-terminal job holds its unique key; RETURNING the new Job."""
    return (
        insert(Job)
        .values(values)
        .on_conflict_do_nothing(
            index_elements=["namespace", "unique_key"], index_where=_UNIQUE_WHERE
        )
        .returning(Job)
    )


def select_unique_holder(namespace: str, unique_key: str) -> Select[tuple[Job]]:
    """The non-terminal job holding ``unique_key`` in ``namespace`` (enqueue returns it)."""
    return select(Job).where(
        Job.namespace == namespace,
        Job.unique_key == unique_key,
        Job.status.in_(ACTIVE_STATUSES),
    )


def _bulk_field(position: int, typ: Any) -> Any:
    value = literal_column(f"src.r ->> {position}", Text)
    return value if typ is Text else cast(value, typ)


def insert_jobs_bulk() -> Any:
    """INSERT a batch of jobs from two JSON texts in one statement, in input order.

    ``:rows`` holds one JSON array per job (the fields of ``BULK_FIELDS``, in order) and
    ``:args`` the jobs' args, one JSON value each; ``ROWS FROM`` pairs them by position.
    Two text parameters bind in a fraction of the time of a dozen typed arrays (the driver
    type-checks every element of an array; ``json.dumps`` writes the rows in C), and the
    args, already JSON, are joined into one array without being encoded again.

    Rows whose unique key is held (by an existing job or an earlier row of the batch) are
    skipped. RETURNING gives (id, unique_key) of the inserted rows; ids grow in input order
    because the SELECT is ordered and ids come from one sequence.
    """
    source = text(
        "ROWS FROM (jsonb_array_elements(CAST(:rows AS jsonb)),"
        " jsonb_array_elements(CAST(:args AS jsonb))) WITH ORDINALITY AS src(r, args, ord)"
    ).bindparams(bindparam("rows", type_=Text), bindparam("args", type_=Text))
    field = {name: _bulk_field(i, typ) for i, (name, typ) in enumerate(BULK_FIELDS)}
    run_at = func.coalesce(
        cast(field["run_at"], Job.run_at.type),
        func.now() + func.make_interval(0, 0, 0, 0, 0, 0, func.coalesce(field["delay"], 0.0)),
    )
    # Every field is a column of its own name but ``delay``, which only computes ``run_at``.
    columns = {name: value for name, value in field.items() if name != "delay"}
    columns["run_at"] = run_at
    columns["args"] = literal_column("src.args", JSONB)
    values = (
        select(*(value.label(name) for name, value in columns.items()))
        .select_from(source)
        .order_by(literal_column("src.ord"))
    )
    table = Job.__table__
    return (
        insert(table)
        .from_select(list(columns), values)
        .on_conflict_do_nothing(
            index_elements=["namespace", "unique_key"], index_where=_UNIQUE_WHERE
        )
        .returning(table.c.id, table.c.unique_key)
    )


def bulk_params(jobs: Sequence[Job]) -> dict[str, list[Any]]:
    """Jobs as ``Rows``: a list per field of ``BULK_FIELDS``, and ``args`` as JSON texts."""
    params: dict[str, list[Any]] = {name: [] for name, _ in BULK_FIELDS}
    params["args"] = []
    for job in jobs:
        d = job.__dict__
        params["namespace"].append(job.namespace)
        params["kind"].append(job.kind)
        params["args"].append(json.dumps(job.args, separators=(",", ":")))
        params["priority"].append(d.get("priority") or 0)
        run_at = d.get("run_at")
        params["run_at"].append(run_at.isoformat() if isinstance(run_at, datetime) else None)
        params["delay"].append(d.get("_delay_seconds"))
        params["max_attempts"].append(d.get("max_attempts"))
        for name in ("concurrency_key", "rate_key", "lane_key", "unique_key", "trace_context"):
            params[name].append(d.get(name))
    return params


def insert_bulk_params(rows: dict[str, list[Any]]) -> dict[str, str]:
    """``insert_jobs_bulk``'s two parameters from ``Rows``: the fields as one JSON array per
    job, and the args (each already JSON text) joined into one JSON array. Strings go as
    they are (``ensure_ascii=False``), so a string the server cannot store is refused by
    the driver before anything is sent, as with any other statement."""
    fields = zip(*(rows[name] for name, _ in BULK_FIELDS), strict=True)
    return {
        "rows": json.dumps(list(fields), ensure_ascii=False, separators=(",", ":")),
        "args": "[" + ",".join(rows["args"]) + "]",
    }


def select_unique_holders() -> Any:
    """(id, namespace, unique_key) of the non-terminal jobs holding any of the given keys."""
    pairs = select(
        func.unnest(bindparam("namespaces", type_=ARRAY(Text))).label("namespace"),
        func.unnest(bindparam("keys", type_=ARRAY(Text))).label("unique_key"),
    ).subquery("pairs")
    return select(Job.id, Job.namespace, Job.unique_key).join(
        pairs,
        (Job.namespace == pairs.c.namespace)
        & (Job.unique_key == pairs.c.unique_key)
        & Job.status.in_(ACTIVE_STATUSES),
    )


def unique_holders_params(pairs: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    return {"namespaces": [p[0] for p in pairs], "keys": [p[1] for p in pairs]}


def _with_cancel(by: str | None, reason: str | None) -> Any:
    """The job's ``last_error`` with who cancelled it, why and when under its ``cancel``
    key (``{"by": ..., "reason": ..., "at": ...}``, absent fields left out): the error of
    an earlier attempt stays beside it. No column of its own (no migration): the
    completion that ends an executing job keeps the key (queries/complete.py)."""
    record = func.jsonb_strip_nulls(
        func.jsonb_build_object(
            "by",
            cast(bindparam("cancel_by", by), Text),
            "reason",
            cast(bindparam("cancel_reason", reason), Text),
            "at",
            func.now(),
        )
    )
    return func.coalesce(Job.last_error, cast(literal_column("'{}'"), JSONB)).op("||")(
        func.jsonb_build_object("cancel", record)
    )


def cancel_waiting(job_id: int, by: str | None = None, reason: str | None = None) -> Any:
    """A ready or waiting job ends 'cancelled' at once; a durable wait it was parked in is
    over (no awaited signal, no pending children: the terminal-effects trigger reads the
    old values to cancel the children and hand a lane on). Who and why are recorded."""
    return (
        update(Job)
        .where(Job.id == job_id, Job.status.in_((JobStatus.READY, JobStatus.WAITING)))
        .values(
            status=JobStatus.CANCELLED,
            cancel_requested=True,
            finished_at=func.now(),
            awaited_signal=None,
            pending_children=0,
            last_error=_with_cancel(by, reason),
        )
        .returning(Job.id)
    )


def request_cancel(job_id: int, by: str | None = None, reason: str | None = None) -> Any:
    """An executing job is asked to stop: its worker's next heartbeat cancels the handler.
    Who and why are recorded (the completion that ends it keeps them)."""
    return (
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.EXECUTING)
        .values(cancel_requested=True, last_error=_with_cancel(by, reason))
        .returning(Job.id)
    )


def job_status(job_id: int) -> Any:
    """One job's status (signal tells a finished job from a missing one)."""
    return select(Job.status).where(Job.id == job_id)


def lock_job_status(job_id: int) -> Any:
    """One job's status, its row locked until the transaction ends: cancel decides on the
    status a concurrent completion committed, never on the one before it."""
    return select(Job.status).where(Job.id == job_id).with_for_update()


def retry_job(job_id: int) -> Any:
    """An operator's retry: a finished job goes back to 'ready' now with a fresh budget,
    as a fresh start: no result, no wait it was in, no cancel record, no ``resumed`` (its
    first run is not one that follows a wait). Signals it received stay. Not while another
    job holds its unique key (:func:`unique_key_holder`). The only way out of a terminal
    state."""
    holder = aliased(Job)
    held = (
        select(holder.id)
        .where(
            holder.namespace == Job.namespace,
            holder.unique_key == Job.unique_key,
            holder.status.in_(ACTIVE_STATUSES),
        )
        .exists()
    )
    return (
        update(Job)
        .where(Job.id == job_id, Job.status.in_(TERMINAL_STATUSES), ~held)
        .values(
            status=JobStatus.READY,
            run_at=func.now(),
            attempts=0,
            finished_at=None,
            cancel_requested=False,
            result=None,
            awaited_signal=None,
            pending_children=0,
            resumed=None,
            # A cancel's record (who, why) belongs to the run it ended, not the next one.
            last_error=Job.last_error.op("-")(literal_column("'cancel'::text")),
        )
        .returning(Job.id)
    )


def unique_key_holder(job_id: int) -> Any:
    """(holder id, namespace, unique key) when finished job ``job_id``'s unique key is held
    by another, unfinished job: what keeps an operator's retry from it."""
    holder = aliased(Job)
    return select(holder.id, Job.namespace, Job.unique_key).where(
        Job.id == job_id,
        Job.status.in_(TERMINAL_STATUSES),
        holder.namespace == Job.namespace,
        holder.unique_key == Job.unique_key,
        holder.status.in_(ACTIVE_STATUSES),
    )


def signal_job(job_id: int, name: str, payload_json: str) -> Any:
    """Record signal ``name`` (its payload as JSON text) on a ready, executing or waiting job;
    a job waiting for that name becomes ready now (the NOTIFY trigger wakes a worker) with
    ``resumed = 'signal'``. RETURNING the job's status afterwards (no row: the job is
    finished or missing)."""
    waiting_for_it = (Job.status == JobStatus.WAITING) & (Job.awaited_signal == name)
    from sqlalchemy import case, literal

    return (
        update(Job)
        .where(Job.id == job_id, Job.status.in_(ACTIVE_STATUSES))
        .values(
            signals=func.coalesce(Job.signals, cast(literal("{}"), JSONB)).op("||")(
                func.jsonb_build_object(name, cast(literal(payload_json, Text), JSONB))
            ),
            status=case((waiting_for_it, literal(JobStatus.READY.value)), else_=Job.status),
            run_at=case((waiting_for_it, func.now()), else_=Job.run_at),
            resumed=case((waiting_for_it, literal("signal")), else_=Job.resumed),
            awaited_signal=case((waiting_for_it, None), else_=Job.awaited_signal),
        )
        .returning(Job.status)
    )


def definition_for_update(namespace: str, kind: str) -> Any:
    """A kind's stored definition (declared policy and overrides), locked until commit so
    that two operators' changes apply one after the other."""
    return (
        select(Definition.declared, Definition.overrides)
        .where(Definition.namespace == namespace, Definition.kind == kind)
        .with_for_update()
    )


def stored_kinds(namespace: str) -> Any:
    """The kinds stored in a namespace (an unknown kind's error lists them)."""
    return (
        select(Definition.kind).where(Definition.namespace == namespace).order_by(Definition.kind)
    )


def write_overrides(namespace: str, kind: str, overrides: dict[str, Any]) -> Any:
    """Store a kind's overrides (the whole object, validated by the caller)."""
    return (
        update(Definition)
        .where(Definition.namespace == namespace, Definition.kind == kind)
        .values(overrides=overrides, updated_at=func.now())
    )


def bump_definitions_version(namespace: str) -> Any:
    """Move the namespace's definitions version: every worker reloads within one beat."""
    return (
        update(Namespace)
        .where(Namespace.name == namespace)
        .values(definitions_version=Namespace.definitions_version + 1)
        .returning(Namespace.definitions_version)
    )
