"""Recurring schedules: ``acta.schedule(name, cron, handler, ...)`` (docs/schedules.md).

A schedule's fires are jobs of its handler's kind, one per tick, each unique per
(namespace, schedule, tick) in the database. The chain: exactly one fire is pending at a
time; the first completion of a fire enqueues the following one in the same
``complete_executions`` statement (queries/complete.py, part ``next_fire``), and a worker
that finds a schedule with no pending fire (at start-up, and on every recovery pass)
enqueues one under the schedule's advisory lock. The cron arithmetic is here, in Python
(croniter); the statements only apply it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import ActaError, ConfigurationError, InvalidJob

if TYPE_CHECKING:
    from .handler import Handler

Missed = Literal["latest", "skip", "all"]
MISSED_POLICIES: tuple[str, ...] = ("latest", "skip", "all")
"""What a schedule does about ticks that passed without their fire (no worker ran, or a
fire was held up by its worker's crash until recovery): ``latest`` (the default) fires
once for the latest missed tick, at once, then keeps its cadence; ``skip`` fires next at
the first tick still to come; ``all`` fires every missed tick, oldest first, one after
the other (each fire's completion enqueues the next), up to ``MAX_CATCH_UP`` ticks behind
(further behind, it catches up from the latest). Catch-up never enqueues two fires at once."""

MAX_CATCH_UP = 100
"""``missed="all"``: the most ticks a schedule catches up one by one."""

TICK_SEARCH_YEARS = 50
"""How far ahead (and back) a tick is searched for: croniter's own bound. A cron with no
tick within it ("0 0 30 2 *", Feb 30; "0 0 31 4 *") never matches."""


class NoTick(ActaError):
    """A schedule's next tick cannot be computed from its cron and timezone: a cron that
    never matches (Feb 30), or a definition this code cannot read (stored by another
    version). The schedule does not fire; every other schedule does."""

    def __init__(self, name: str, cron: str, timezone: str, reason: str) -> None:
        self.name = name
        self.cron = cron
        self.timezone = timezone
        self.reason = reason
        super().__init__(f"schedule {name!r}: {reason}")


def _no_tick(spec: Schedule, exc: Exception) -> NoTick:
    from croniter import CroniterBadDateError

    if isinstance(exc, CroniterBadDateError):
        reason = (
            f"cron={spec.cron!r} never matches (no tick within {TICK_SEARCH_YEARS} years: "
            "a day the month never has, such as 30 2 for Feb 30 or 31 4 for Apr 31)"
        )
    else:
        reason = (
            f"its next tick cannot be computed from cron={spec.cron!r} in timezone="
            f"{spec.timezone!r} ({type(exc).__name__}: {exc})"
        )
    return NoTick(spec.name, spec.cron, spec.timezone, reason)


def _croniter() -> Any:
    from croniter import croniter  # imported when a schedule is declared or computed

    return croniter


def croniter_expression(cron: str) -> str:
    """acta's cron (5 fields, or 6 with a LEADING seconds field) as croniter takes it
    (seconds as a trailing sixth field)."""
    fields_ = cron.split()
    if len(fields_) == 6:
        return " ".join([*fields_[1:], fields_[0]])
    return " ".join(fields_)


@dataclass(frozen=True, slots=True)
class Schedule:
    """One declared schedule (validated at declaration)."""

    name: str
    cron: str
    kind: str
    timezone: str = "UTC"
    args: dict[str, Any] = field(default_factory=dict)
    missed: str = "latest"
    priority: int = 0
    """The kind's priority: every fire has it (migration 0011)."""
    concurrency_key: str | None = None
    """The kind's templates rendered from ``args`` (None: the kind declares none): every
    fire carries these keys, as ``handler.job(**args)`` would."""
    rate_key: str | None = None
    lane_key: str | None = None

    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def _hourly(self) -> bool:
        """The hour field is a wildcard (``*``, ``*/2``): the schedule runs at wall-clock
        times of every hour (or every n-th), so the hour a fall-back repeats is fired in
        both passes, as cron does; a fixed hour (``30 2 * * *``, ``0 1-3 * * *``) fires its
        time once, in the first pass."""
        fields_ = self.cron.split()
        return fields_[2 if len(fields_) == 6 else 1].startswith("*")

    def _repeat(self, tick: datetime) -> bool:
        """``tick`` (local) is the second pass of a wall-clock time a fall-back repeats,
        and this schedule fires such a time once."""
        first = tick.replace(tzinfo=None).replace(tzinfo=tick.tzinfo, fold=0)
        return first.utcoffset() != tick.utcoffset() and not self._hourly()

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after ``moment``, in UTC (computed in the schedule's
        timezone, so a daily 09:00 stays 09:00 local across DST changes; a fixed-hour tick
        in the hour a fall-back repeats fires once, see :meth:`_hourly`)."""
        local = moment.astimezone(self.zone())
        it = _croniter()(croniter_expression(self.cron), local)
        tick: datetime = it.get_next(datetime)
        while self._repeat(tick):
            tick = it.get_next(datetime)
        return tick.astimezone(UTC)

    def latest_at_or_before(self, moment: datetime) -> datetime:
        """The last tick at or before ``moment``, in UTC."""
        local = moment.astimezone(self.zone())
        it = _croniter()(croniter_expression(self.cron), local)
        tick: datetime = it.get_prev(datetime)
        while self._repeat(tick):
            tick = it.get_prev(datetime)
        following = self.next_after(tick)
        return following if following <= moment else tick.astimezone(UTC)

    def successor(self, tick: datetime, now: datetime) -> datetime:
        """The fire that follows the fire of ``tick``, the time being ``now``: the next tick
        if it is still to come; else (ticks were missed) by the missed policy: ``latest``
        fires once for the latest missed tick (due now), ``skip`` at the next tick to come."""
        following = self.next_after(tick)
        if following > now:
            return following
        if self.missed == "skip":
            return self.next_after(now)
        if self.missed == "all":
            behind, probe = 0, following
            while probe <= now and behind <= MAX_CATCH_UP:
                behind += 1
                probe = self.next_after(probe)
            if behind <= MAX_CATCH_UP:
                return following
        return self.latest_at_or_before(now)

    def first(self, now: datetime) -> datetime:
        """The first fire of a schedule that never fired: its next tick (no catch-up for the
        time before it was declared)."""
        return self.next_after(now)

    def fire_tick(self, last: datetime | None, now: datetime) -> datetime:
        """The tick of the fire to enqueue for this schedule, whose latest fire was ``last``
        (None: it never fired), the time being ``now``. :class:`NoTick` if it cannot be
        computed (a cron that never matches, a timezone or cron this code cannot read, a
        tick past what ``datetime`` holds): raised for this schedule alone, so that a
        caller computing many schedules' ticks stops only this one."""
        try:
            return self.first(now) if last is None else self.successor(last, now)
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            # croniter's errors are ValueErrors; an unknown zone is a KeyError.
            raise _no_tick(self, exc) from None

    def row(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cron": self.cron,
            "timezone": self.timezone,
            "kind": self.kind,
            "args": json.dumps(self.args, separators=(",", ":"), sort_keys=True),
            "missed": self.missed,
            "priority": self.priority,
            "concurrency_key": self.concurrency_key,
            "rate_key": self.rate_key,
            "lane_key": self.lane_key,
        }


def declare(
    name: str,
    cron: str,
    handler: Handler[Any, Any],
    *,
    args: dict[str, Any] | None = None,
    timezone: str = "UTC",
    missed: str = "latest",
) -> Schedule:
    """A validated schedule; ``ConfigurationError`` naming the schedule and the value."""
    from .policy import Refused, check_key, shown

    try:
        check_key(name.strip() and name if isinstance(name, str) else name)
    except Refused as why:
        raise ConfigurationError(f"schedule name={shown(name)} {why}") from None
    where = f"schedule {name!r}"
    if not isinstance(cron, str) or len(cron.split()) not in (5, 6):
        raise ConfigurationError(
            f"{where}: cron={cron!r} must have 5 fields (minute hour day month weekday) or 6 "
            "with a leading seconds field, e.g. '0 9 * * 1-5' or '*/10 * * * * *'"
        )
    if not _croniter().is_valid(croniter_expression(cron)):
        raise ConfigurationError(f"{where}: cron={cron!r} is not a valid cron expression")
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ConfigurationError(
            f"{where}: timezone={timezone!r} is not an IANA time zone (e.g. 'UTC', "
            "'Europe/Berlin', 'America/New_York')"
        ) from None
    if missed not in MISSED_POLICIES:
        raise ConfigurationError(
            f"{where}: missed={missed!r} must be one of {', '.join(MISSED_POLICIES)}"
        )
    spec = Schedule(name, " ".join(cron.split()), "", timezone, {}, missed)
    try:
        # Computed, not just parsed: croniter.is_valid accepts a cron that never matches.
        spec.fire_tick(None, datetime.now(UTC))
    except NoTick as exc:
        raise ConfigurationError(f"{where}: {exc.reason}") from None
    from .handler import Handler

    if not isinstance(handler, Handler):
        raise ConfigurationError(
            f"{where}: handler must be a function registered with @acta.job, got {handler!r}"
        )
    try:
        validated = handler.validate_args(dict(args or {}))
        fire = handler.fire_fields(validated)
    except InvalidJob as exc:
        raise ConfigurationError(f"{where}: args: {exc}") from None
    return Schedule(name, " ".join(cron.split()), handler.kind, timezone, validated, missed, **fire)


def successor_feature(
    schedule: Schedule, namespace: str, tick: datetime, now: datetime
) -> dict[str, Any]:
    """A fire's completion input for the ``next_fire`` part: which schedule, this fire's
    tick, and the following tick (:class:`NoTick` if it cannot be computed)."""
    return {
        "namespace": namespace,
        "schedule": schedule.name,
        "after": tick.isoformat(),
        "tick": schedule.fire_tick(tick, now).isoformat(),
    }


def stored(name: str, cron: str, timezone: str, missed: str, kind: str = "") -> Schedule:
    """A schedule as it is stored (no handler, no args): enough to compute its ticks."""
    return Schedule(name, cron, kind, timezone, {}, missed)


def plan_fires(
    unfired: Iterable[tuple[str, datetime | None, str, str, str]],
    declared: Mapping[str, Schedule],
    now: datetime,
) -> tuple[list[tuple[str, datetime]], list[NoTick]]:
    """The fires to enqueue for the schedules with none pending: ``unfired`` rows (name,
    latest fire's tick or None, stored cron, timezone, missed), computed from this code's
    declaration of each, at ``now`` (the database's clock). A schedule this code does not
    declare is left to the workers whose code does (rolling deploy), but its stored cron is
    still checked. Answers the (name, tick) pairs to enqueue and a :class:`NoTick` for each
    schedule that cannot fire: those stop alone, every other schedule still fires."""
    fires: list[tuple[str, datetime]] = []
    stuck: list[NoTick] = []
    for name, last, cron, timezone, missed in unfired:
        spec = declared.get(name)
        try:
            if spec is None:
                stored(name, cron, timezone, missed).fire_tick(last, now)
                continue
            fires.append((name, spec.fire_tick(last, now)))
        except NoTick as exc:
            stuck.append(exc)
    return fires, stuck


def tick_problem(name: str, cron: str, timezone: str, missed: str, now: datetime) -> str | None:
    """Why the stored schedule ``name`` cannot fire (its next tick from ``now`` cannot be
    computed), or None: for ``acta schedules ls`` and ``acta doctor``."""
    try:
        stored(name, cron, timezone, missed).fire_tick(None, now)
    except NoTick as exc:
        return exc.reason
    return None


# ------------------------------------------------------------------ the operator's side


async def pause(conn: Any, schema: str, namespace: str, name: str) -> bool:
    """Pause a schedule (``acta schedules pause``, the dashboard): no fire from now on; its
    pending fire that has not started is cancelled; a running one finishes and enqueues
    nothing. One transaction on an asyncpg connection: the schedule's row is locked first
    (``UPDATE``), then the pending fires are read and cancelled by a statement of its own,
    so a fire's completion racing the pause either sees it (no successor) or committed its
    successor before that read (cancelled here): once this returns, no new fire is
    enqueued. False if the schedule does not exist."""
    from .queries import schedules as q

    async with conn.transaction():
        if not await conn.fetch(q.pause_schedule(schema), namespace, name):
            return False
        await conn.execute(q.cancel_unstarted_fires(schema), namespace, [name])
    return True


async def resume(conn: Any, schema: str, namespace: str, name: str) -> datetime | None:
    """Resume a paused schedule and give it its next fire (by its missed policy, from its
    latest fire that started), in one transaction on an asyncpg connection, under the
    schedule's lock; the pending fire's tick, or None if the schedule does not exist. A
    schedule that has a pending fire already (it was not paused) keeps it. The fire a pause
    cancelled is not a fire that happened: when the next tick is that fire's, the fire is
    made ready again. A worker's code is not needed: the stored cron is."""
    from .queries import schedules as q

    async with conn.transaction():
        await conn.fetch(q.lock_schedules(schema), namespace, [name])
        row = await conn.fetchrow(q.schedule_row(schema), namespace, name)
        if row is None:
            return None
        await conn.fetch(q.resume_schedule(schema), namespace, name)
        if row["pending_tick"] is not None:
            pending: datetime = row["pending_tick"]
            return pending
        spec = stored(row["name"], row["cron"], row["timezone"], row["missed"], row["kind"])
        try:
            # The database's clock, not this host's. Raised inside the transaction: a
            # schedule that cannot fire stays paused.
            tick = spec.fire_tick(row["last_tick"], row["now"])
        except NoTick as exc:
            raise ActaError(
                f"schedule {name!r} cannot be resumed: {exc.reason}; fix its cron in the "
                "code and start a worker (or remove it from the code)"
            ) from None
        fired = await conn.fetch(q.enqueue_fires(schema), namespace, [name], [tick])
        if not fired:
            # Only a fire of that tick or later that ran, written by hand or by a clock
            # gone back, can refuse it: say so rather than name a fire that does not exist.
            when = tick.strftime("%Y-%m-%d %H:%M:%S %Z")
            raise ActaError(
                f"schedule {name!r} resumed, but no fire was enqueued for {when}: a fire of "
                "that tick or later has already run; see acta schedules ls"
            )
        enqueued: datetime = fired[0][1]
    return enqueued
