"""The ledger: declarative SQLAlchemy models of acta's tables.

Every table lives in the ``acta`` schema (``SCHEMA``), so that an application's own Alembic
autogenerate, which looks at its default schema, never proposes to drop them. A deployment
that configures another schema (``ACTA_SCHEMA``) maps ``acta`` to it with SQLAlchemy's
``schema_translate_map``: ``create_async_engine(url,
execution_options=acta_sqla.engine_options(schema))``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Double,
    Enum,
    ForeignKey,
    Identity,
    Index,
    Integer,
    MetaData,
    Sequence,
    SmallInteger,
    Table,
    Text,
    event,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, validates
from sqlalchemy.orm.exc import ObjectDeletedError

from .database import install_error_translation
from .errors import InvalidJob, JobActive
from .payload import args_json
from .policy import Refused, check_key, job_column, job_option, shown
from .queries._render import ACTIVE, TERMINAL
from .schema import SCHEMA as SCHEMA
from .settings import NAMESPACE_PATTERN, NAMESPACE_RULE
from .status import ACTIVE_STATUSES as ACTIVE_STATUSES
from .status import TERMINAL_STATUSES as TERMINAL_STATUSES
from .status import JobStatus as JobStatus
from .status import WorkerStatus as WorkerStatus
from .tracing import current_context


class Base(DeclarativeBase):
    metadata = MetaData(
        schema=SCHEMA,
        naming_convention={
            "ix": "%(table_name)s_%(column_0_N_name)s_idx",
            "uq": "%(table_name)s_%(column_0_N_name)s_key",
            "ck": "%(table_name)s_%(constraint_name)s_check",
            "fk": "%(table_name)s_%(column_0_name)s_fkey",
            "pk": "%(table_name)s_pkey",
        },
    )


def _status_type(enum: type[StrEnum], name: str) -> Enum:
    # Stored as text with a CHECK constraint rather than a native enum: adding a status later
    # is then a plain constraint change instead of an ALTER TYPE that cannot run in a
    # transaction.
    return Enum(
        enum,
        name=name,
        native_enum=False,
        create_constraint=True,
        length=16,
        values_callable=lambda e: [m.value for m in e],
        validate_strings=True,
    )


# Rendered from status.py: "status IN ('ready', 'executing', 'waiting')" and
# "status IN ('succeeded', 'failed', 'cancelled')" (the DDL text migrations compare).
_ACTIVE_SQL = f"status IN {ACTIVE}"
_TERMINAL_SQL = f"status IN {TERMINAL}"

execution_id_seq = Sequence("execution_id_seq", metadata=Base.metadata)
"""The low 40 bits of the fencing token the claim mints (see ``WorkerSQL``); the high bits
are the server's start time, so a token never repeats across a crash."""


class Job(Base):
    """One job. ``session.add(Job(kind="send_welcome", args={"user_id": 42}))`` enqueues it
    in the session's transaction; ``delay=`` (seconds or timedelta) makes it due later,
    counted on the database clock."""

    __tablename__ = "job"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    namespace: Mapped[str] = mapped_column(Text, default="default", server_default="default")
    kind: Mapped[str] = mapped_column(Text)
    args: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict, server_default="{}")
    # The database's default alone, read back by the INSERT's RETURNING: a lane's job is
    # made 'waiting' by the lane trigger on insert, and the model must say so after the
    # flush (a Python-side default was sent as 'ready' and believed).
    status: Mapped[JobStatus] = mapped_column(
        _status_type(JobStatus, "status"), server_default="ready"
    )
    priority: Mapped[int] = mapped_column(SmallInteger, default=0, server_default="0")
    """Lower runs first."""
    # The database's default alone (no Python-side ``default=func.now()``): the INSERT
    # leaves the column out and RETURNING brings the value back, where a SQL-expression
    # default made the ORM build and cache-key a new INSERT for every job (~45 us of a
    # one-job transaction's Python time: docs/performance.md).
    run_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    """When the job is due (or, while ``waiting`` for a signal, when the wait times out)."""
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Attempts charged so far: a claim counts one; uncharged hand-backs give it back."""
    max_attempts: Mapped[int | None] = mapped_column(Integer)
    """The failure budget; None follows the kind's current definition."""

    # The running attempt. execution_id is the fencing token: every write about an attempt
    # matches (id, execution_id), so a stale worker's late write changes nothing.
    execution_id: Mapped[int | None] = mapped_column(BigInteger)
    worker_id: Mapped[int | None] = mapped_column(BigInteger)
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    concurrency_key: Mapped[str | None] = mapped_column(Text)
    rate_key: Mapped[str | None] = mapped_column(Text)
    lane_key: Mapped[str | None] = mapped_column(Text)
    unique_key: Mapped[str | None] = mapped_column(Text)

    parent_id: Mapped[int | None] = mapped_column(BigInteger)
    parent_execution_id: Mapped[int | None] = mapped_column(BigInteger)
    """The parent's attempt (execution id) whose wait spawned this child: the child counts
    toward that wait only (migration 0012)."""
    pending_children: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    awaited_signal: Mapped[str | None] = mapped_column(Text)
    signals: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    """Signals received, by name: their payloads."""
    schedule_name: Mapped[str | None] = mapped_column(Text)
    """The schedule this job is a fire of (docs/schedules.md); None for other jobs."""
    scheduled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """A fire's tick (``ctx.scheduled_at``); ``acta schedules run`` sets it to now."""
    trace_context: Mapped[str | None] = mapped_column(Text)
    """The W3C trace context current at enqueue (JSON), None when nothing was traced."""
    resumed: Mapped[str | None] = mapped_column(Text)
    """Why the job last left a durable wait (``signal``, ``timeout``, ``children``): the
    next runs see it as ``ctx.resumed``; a new wait clears it (docs/waits.md)."""

    result: Mapped[Any | None] = mapped_column(JSONB)
    last_error: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    """``{"type": ..., "message": ...}`` of the latest failed attempt."""
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    suspect: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    """An attempt was lost with its worker before it was known to start: the job may be
    the one that kills workers, so the claim runs it alone until it ends (migration 0005)."""

    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    # The attempt that ended the job (migration 0015): its outcome and error sit here, and
    # its id, number, worker and times in the columns above, instead of in an Execution
    # row. None while the job runs, and when no charged attempt ended it. Read a job's
    # whole history through ``acta.attempt`` (``attempt_history``).
    outcome: Mapped[str | None] = mapped_column(Text)
    attempt_error: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    """``{"type", "message", "traceback"}`` of the final attempt, None if it raised none."""

    __table_args__ = (
        # The claim reads only this index: ready rows of one namespace in claim order. With
        # millions of finished rows in the table it stays the size of the backlog.
        Index(
            "job_claim_idx",
            "namespace",
            "priority",
            "run_at",
            "id",
            postgresql_where=text("status = 'ready'"),
        ),
        # Due suspects, normally none: the claim asks whether one is due with one probe.
        Index(
            "job_suspect_idx",
            "namespace",
            "priority",
            "run_at",
            "id",
            postgresql_where=text("status = 'ready' AND suspect"),
        ),
        # When the claim finds nothing, the claimer sleeps until the next ready row is due.
        Index("job_due_idx", "namespace", "run_at", postgresql_where=text("status = 'ready'")),
        Index(
            "job_unique_key_idx",
            "namespace",
            "unique_key",
            unique=True,
            postgresql_where=text(f"unique_key IS NOT NULL AND {_ACTIVE_SQL}"),
        ),
        # Recovery finds expired leases here. Partial on the lease, not on the status: a
        # statement that fences rows by status (completion, heartbeat) must look them up
        # by primary key, never scan the executing set (migration 0002 says why).
        Index(
            "job_lease_idx",
            "namespace",
            "lease_expires_at",
            postgresql_where=text("lease_expires_at IS NOT NULL"),
        ),
        # Recovery's prune: each kind keeps its jobs for its own retention, so the rows due
        # are a prefix of each kind's range here (cutoff per kind), never of the namespace's.
        # Without it the prune read every finished row of history to delete nothing
        # (migration 0004 says why). The dashboard's windows of recent finished jobs read
        # it too, each kind's range from the window's start (since migration 0017 the only
        # index of every finished row: a job that succeeds gets one entry, not two).
        Index(
            "job_prune_idx",
            "namespace",
            "kind",
            "finished_at",
            postgresql_where=text(_TERMINAL_SQL),
        ),
        # The failure pages' windows (failure groups, a group's ids): failed rows only, so
        # a job that succeeds writes no entry here (migration 0017).
        Index(
            "job_failed_idx",
            "namespace",
            "finished_at",
            postgresql_where=text("status = 'failed'"),
        ),
        Index("job_parent_idx", "parent_id", postgresql_where=text("parent_id IS NOT NULL")),
        # A lane's unfinished jobs in order: the enqueue's "is the lane busy?" and the
        # hand-on's "oldest waiting job" (the lane triggers of queries/schema.sql).
        Index(
            "job_lane_idx",
            "namespace",
            "lane_key",
            "id",
            postgresql_where=text(f"lane_key IS NOT NULL AND {_ACTIVE_SQL}"),
        ),
        # A concurrency key's unfinished jobs: the dashboard's key page (migration 0010).
        Index(
            "job_key_idx",
            "namespace",
            "concurrency_key",
            "id",
            postgresql_where=text(f"concurrency_key IS NOT NULL AND {_ACTIVE_SQL}"),
        ),
        Index(
            "job_lane_waiting_idx",
            "namespace",
            "lane_key",
            "id",
            postgresql_where=text("status = 'waiting' AND lane_key IS NOT NULL"),
        ),
        # Parents waiting for children: recovery's recount and its walk of the wait-for
        # graph for cycles across lanes (migration 0014).
        Index(
            "job_children_wait_idx",
            "namespace",
            "id",
            postgresql_where=text("status = 'waiting' AND pending_children > 0"),
        ),
        # Signal waits by deadline: every heartbeat wakes those past it (migration 0007).
        Index(
            "job_wait_deadline_idx",
            "namespace",
            "run_at",
            postgresql_where=text("status = 'waiting' AND awaited_signal IS NOT NULL"),
        ),
        # One fire per tick of a schedule, for good (migration 0008).
        Index(
            "job_schedule_tick_key",
            "namespace",
            "schedule_name",
            "scheduled_at",
            unique=True,
            postgresql_where=text("schedule_name IS NOT NULL"),
        ),
        # Half of each page left free (migration 0015): the claim's and the completion's
        # new row versions land on the old one's page, so neither update writes a lock
        # record first nor a whole second page (docs/performance.md, eighth pass).
        {"schema": SCHEMA, "postgresql_with": {"fillfactor": 50}},
    )

    def __init__(
        self,
        *,
        kind: str,
        args: dict[str, Any] | None = None,
        delay: float | timedelta | None = None,
        **fields: Any,
    ) -> None:
        # Every field goes through policy's JOB_OPTION_CHECKS and the args through payload:
        # the same rules, and messages, as handler.job() and handler.jobs().
        _check_kind(kind)
        # One rule for the namespace, whatever path enqueues the job: decided here, when it
        # is built (namespace=, or handler.job()'s app), else 'default'. An Acta of another
        # namespace refuses it rather than move it (Acta._check_kind).
        if fields.get("namespace") is None:
            fields["namespace"] = "default"
        if fields.get("run_at", False) is None:
            del fields["run_at"]  # None reads as "not given": due now, on the database clock
        if delay is not None:
            if "run_at" in fields:
                raise InvalidJob(f"{kind}: give either run_at or delay, not both")
            seconds = job_option(kind, "delay", delay)
            # Due time on the database clock, never this process's.
            fields["run_at"] = func.now() + timedelta(seconds=seconds)
            self._delay_seconds = seconds
        elif "run_at" in fields:
            job_option(kind, "run_at", fields["run_at"])
        if "trace_context" not in fields:
            traced = current_context(kind, fields.get("namespace"))
            if traced is not None:
                fields["trace_context"] = traced
        super().__init__(kind=kind, args={} if args is None else args, **fields)

    @validates("kind")
    def _validate_kind(self, _key: str, value: Any) -> Any:
        return _check_kind(value)

    @validates("namespace")
    def _validate_namespace(self, _key: str, value: Any) -> Any:
        # A namespace names the LISTEN channel the insert's trigger notifies: one out of
        # its rule was a raw error at commit ("channel name too long", or a DataError).
        if value is None or (type(value) is str and value in _NAMESPACES):
            return value
        if not isinstance(value, str) or not NAMESPACE_PATTERN.match(value):
            raise InvalidJob(f"{self._kind_known()}: namespace={shown(value)} {NAMESPACE_RULE}")
        _remember(_NAMESPACES, value)
        return value

    def _kind_known(self) -> str:
        # The kind as this instance already holds it, never loaded: reading ``self.kind`` on
        # an expired instance would run a SELECT (MissingGreenlet under an AsyncSession)
        # just to name it in an error message.
        return self.__dict__.get("kind") or "job"

    @validates("args")
    def _validate_args(self, _key: str, value: Any) -> Any:
        args_json(self._kind_known(), value)
        return value

    @validates("run_at")
    def _validate_run_at(self, _key: str, value: Any) -> Any:
        # A datetime set by hand (``job.run_at = ...``) passes the rule of Job(run_at=...);
        # Job(delay=...) gives a SQL expression on the database clock.
        if isinstance(value, datetime):
            job_option(self._kind_known(), "run_at", value)
        return value

    @validates(
        "priority",
        "max_attempts",
        "unique_key",
        "lane_key",
        "concurrency_key",
        "rate_key",
        "schedule_name",
        "parent_id",
    )
    def _validate_field(self, key: str, value: Any) -> Any:
        if value is None and key != "priority":
            return value
        if key == "parent_id":
            raise InvalidJob(
                f"{self._kind_known()}: parent_id is set by acta when a parent's handler "
                "returns WaitForChildren([...]); a job cannot be given a parent by hand "
                "(see docs/waits.md)"
            )
        return job_column(self._kind_known(), key, value)

    def __repr__(self) -> str:
        return f"<Job id={self.id} kind={self.kind!r} status={self.status}>"


_KINDS: set[str] = set()
_NAMESPACES: set[str] = set()
"""Kinds and namespaces that passed their rule. An application uses a few of each, and
every ``Job`` checks both (its kind twice: before its options' messages name it, and by
its validator): a set lookup instead of the rule's scans keeps that off the enqueue's
cost. Only a plain str that passed is remembered (a str subclass could compare equal to
a checked value and be another one)."""


def _remember(checked: set[str], value: str) -> None:
    if type(value) is str and len(checked) < 1024:
        checked.add(value)


def _check_kind(kind: Any) -> str:
    if type(kind) is str and kind in _KINDS:
        return kind
    try:
        check_key(kind)
    except Refused as why:
        raise InvalidJob(f"kind={shown(kind)} {why}") from None
    _remember(_KINDS, kind)
    return str(kind)


class Execution(Base):
    """One attempt of a job that did NOT end it, written when the attempt ends (completion
    or recovery); the attempt that ends a job is kept on the job row instead (migration
    0015). Read a job's whole history through ``attempt_history`` (the ``acta.attempt``
    view), never this table alone.

    Its id is the fencing token the claim minted; claimed, started and finished times,
    outcome and error tell what happened."""

    __tablename__ = "execution"

    # (job_id, id): one index serves a job's history and the pruning of it.
    job_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    attempt: Mapped[int] = mapped_column(Integer)
    worker_id: Mapped[int | None] = mapped_column(BigInteger)
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    outcome: Mapped[str] = mapped_column(Text)
    error_type: Mapped[str | None] = mapped_column(Text)
    error_message: Mapped[str | None] = mapped_column(Text)
    traceback: Mapped[str | None] = mapped_column(Text)


attempt_history = Table(
    "attempt",
    MetaData(schema=SCHEMA),
    Column("job_id", BigInteger),
    Column("id", BigInteger),
    Column("attempt", Integer),
    Column("worker_id", BigInteger),
    Column("claimed_at", DateTime(timezone=True)),
    Column("started_at", DateTime(timezone=True)),
    Column("finished_at", DateTime(timezone=True)),
    Column("outcome", Text),
    Column("error_type", Text),
    Column("error_message", Text),
    Column("traceback", Text),
)
"""``acta.attempt``, a VIEW (migration 0015): every attempt of every job, the ONE place to
read a job's history. It is the ``execution`` rows (attempts that did not end their job)
and, for each finished job, the attempt that ended it, read from the job row. Kept out of
``Base.metadata`` (it is no table to create)."""


class WorkerRow(Base):
    """A worker process's row in ``acta.worker``: written by the worker itself (registered at
    start, refreshed by each heartbeat, stopped at the end), marked dead by recovery; read
    by the dashboard and ``acta workers``. The process that runs jobs is
    :class:`acta_sqla.worker.Worker`."""

    __tablename__ = "worker"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    namespace: Mapped[str] = mapped_column(Text)
    hostname: Mapped[str] = mapped_column(Text)
    pid: Mapped[int] = mapped_column(Integer)
    status: Mapped[WorkerStatus] = mapped_column(
        _status_type(WorkerStatus, "status"), default=WorkerStatus.RUNNING
    )
    executors: Mapped[int] = mapped_column(Integer)
    heartbeat_seconds: Mapped[float] = mapped_column(Double, server_default="45")
    """This worker's own heartbeat interval: recovery calls it dead after 7 of its beats."""
    kinds: Mapped[list[str]] = mapped_column(JSONB, default=list, server_default="[]")
    version: Mapped[str] = mapped_column(Text, server_default="")
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    heartbeat_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    stopped_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        Index("worker_live_idx", "namespace", postgresql_where=text("status = 'running'")),
        {"schema": SCHEMA},
    )


Worker = WorkerRow
"""The row's older name in this module (``acta_sqla.Worker``, deprecated, warns)."""


class Namespace(Base):
    __tablename__ = "namespace"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    definitions_version: Mapped[int] = mapped_column(BigInteger, server_default="0")
    """Moves on every definition change; workers reload their policies when it moves."""
    depth_due_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=text("'-infinity'::timestamptz")
    )
    recovery_due_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    """The heartbeat that finds this past takes the recovery pass and moves it one lease on."""
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Definition(Base):
    """The policy of one kind in one namespace: declared in code, adjustable by operators."""

    __tablename__ = "definition"

    namespace: Mapped[str] = mapped_column(
        Text, ForeignKey(f"{SCHEMA}.namespace.name", ondelete="CASCADE"), primary_key=True
    )
    kind: Mapped[str] = mapped_column(Text, primary_key=True)
    declared: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default="{}")
    """The policy as the code declares it (written by every worker start)."""
    overrides: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default="{}")
    """Operator changes (``acta definitions set``); they win over ``declared``."""
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Lock(Base):
    """A named lock held by one execution, renewed by its worker's heartbeat."""

    __tablename__ = "lock"

    namespace: Mapped[str] = mapped_column(Text, primary_key=True)
    name: Mapped[str] = mapped_column(Text, primary_key=True)
    job_id: Mapped[int] = mapped_column(BigInteger)
    execution_id: Mapped[int] = mapped_column(BigInteger)
    worker_id: Mapped[int | None] = mapped_column(BigInteger)
    acquired_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    lease_expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Schedule(Base):
    """A recurring schedule: fires ``kind`` with ``args`` on a cron expression in a timezone."""

    __tablename__ = "schedule"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    namespace: Mapped[str] = mapped_column(Text)
    name: Mapped[str] = mapped_column(Text)
    cron: Mapped[str] = mapped_column(Text)
    timezone: Mapped[str] = mapped_column(Text, server_default="UTC")
    kind: Mapped[str] = mapped_column(Text)
    args: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default="{}")
    missed: Mapped[str] = mapped_column(Text, server_default="latest")
    """What to do with ticks missed while no worker ran: 'latest' (fire once), 'skip'."""
    enabled: Mapped[bool] = mapped_column(Boolean, server_default="true")
    # What handler.job(**args) would give a job of the schedule's args, copied into every
    # fire (migration 0011): the kind's priority, its key templates rendered from the args.
    priority: Mapped[int] = mapped_column(SmallInteger, server_default="0")
    concurrency_key: Mapped[str | None] = mapped_column(Text)
    rate_key: Mapped[str | None] = mapped_column(Text)
    lane_key: Mapped[str | None] = mapped_column(Text)
    next_fire_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_fired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        Index("schedule_namespace_name_key", "namespace", "name", unique=True),
        {"schema": SCHEMA},
    )


class RateMeter(Base):
    """A rate limit's shared meter per (namespace, key): GCRA without burst (the
    ``admit`` function of queries/schema.sql), so starts are at least ``period / N`` apart."""

    __tablename__ = "rate_meter"

    namespace: Mapped[str] = mapped_column(Text, primary_key=True)
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    next_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=text("'-infinity'::timestamptz")
    )
    """The earliest time the key admits again."""
    booked: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=text("'-infinity'::timestamptz")
    )
    """The latest time a refused job was told to come back (refusals queue behind it)."""
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class ConcurrencySlot(Base):
    """One running execution's hold on a concurrency key; at most the key's limit exist."""

    __tablename__ = "concurrency_slot"

    namespace: Mapped[str] = mapped_column(Text, primary_key=True)
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    job_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    execution_id: Mapped[int] = mapped_column(BigInteger)
    worker_id: Mapped[int | None] = mapped_column(BigInteger)
    acquired_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )


class BreakerState(Base):
    """A circuit breaker's shared state per (namespace, kind, key) (migration 0016; key
    ``''`` for a breaker per kind): docs/breakers.md."""

    __tablename__ = "breaker"

    namespace: Mapped[str] = mapped_column(Text, primary_key=True)
    kind: Mapped[str] = mapped_column(Text, primary_key=True)
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    state: Mapped[str] = mapped_column(Text, server_default="closed")
    """``closed``, ``open`` or ``half_open``."""
    open_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """When an open breaker lets its probes through."""
    changed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    window_start: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=text("'-infinity'::timestamptz")
    )
    calls: Mapped[int] = mapped_column(Integer, server_default="0")
    failures: Mapped[int] = mapped_column(Integer, server_default="0")
    prev_calls: Mapped[int] = mapped_column(Integer, server_default="0")
    prev_failures: Mapped[int] = mapped_column(Integer, server_default="0")
    probe_jobs: Mapped[list[int]] = mapped_column(
        ARRAY(BigInteger), server_default=text("'{}'::bigint[]")
    )
    probe_executions: Mapped[list[int]] = mapped_column(
        ARRAY(BigInteger), server_default=text("'{}'::bigint[]")
    )

    __table_args__ = (
        CheckConstraint("state IN ('closed', 'open', 'half_open')", name="breaker_state_check"),
        {"schema": SCHEMA},
    )


# A plain ``session.add`` of a duplicate unique job raises DuplicateJob naming the key,
# from the moment the models are in use.
install_error_translation()


def _refuse_deleting_unfinished(session: Session, _context: Any, _instances: Any) -> None:
    """``session.delete(job)`` of a ready, executing or waiting job: refused at the flush,
    before any SQL, with the delete undone (the session is as before it) and
    :class:`JobActive` pointing at ``acta.cancel``. Deleting it would strand its parent
    (counting a child that no longer exists) or its lane (queued behind a head that is
    gone). A hand-written DELETE gets a cancel's effects instead (the ``job_deleted_effects``
    trigger, queries/schema.sql)."""
    refused: list[Job] = []
    for obj in session.deleted:
        if isinstance(obj, Job):
            try:
                status = obj.status  # an expired job reloads it: the stored status
            except ObjectDeletedError:
                continue  # already gone: the flush deletes nothing
            if status in ACTIVE_STATUSES:
                refused.append(obj)
    if refused:
        for obj in refused:
            session.add(obj)  # no longer marked for deletion
        first = refused[0]
        raise JobActive(first.id, str(first.status))


event.listen(Session, "before_flush", _refuse_deleting_unfinished)
