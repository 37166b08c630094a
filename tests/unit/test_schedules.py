"""Schedules without a database: declaration errors, tick arithmetic across DST in a
non-UTC zone, the leading seconds field, and the missed-tick policies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from acta_sqla import Acta, ConfigurationError, Context

app = Acta(namespace="sched")


@app.job()
async def report(ctx: Context, region: str = "eu") -> None: ...


BERLIN = ZoneInfo("Europe/Berlin")


def at(*parts: int, tz: ZoneInfo | None = None) -> datetime:
    return datetime(*parts, tzinfo=tz or UTC)  # type: ignore[misc]


def test_a_daily_local_time_stays_local_across_both_dst_changes() -> None:
    local = Acta(namespace="dst")
    handler = local.job(kind="r")(report.fn)
    s = local.schedule("daily", "0 9 * * *", handler, timezone="Europe/Berlin")
    # Spring forward (2026-03-29): 09:00 CET -> CEST, UTC 08:00 -> 07:00.
    before = s.next_after(at(2026, 3, 27, 12))
    after = s.next_after(before)
    assert before.astimezone(BERLIN).hour == 9 and after.astimezone(BERLIN).hour == 9
    assert (before.hour, after.hour) == (8, 7)
    assert after - before == timedelta(hours=23)
    # Fall back (2026-10-25): a 25-hour day.
    oct_before = s.next_after(at(2026, 10, 23, 12))
    oct_after = s.next_after(oct_before)
    assert oct_after - oct_before == timedelta(hours=25)
    assert oct_after.astimezone(BERLIN).hour == 9


def test_a_tick_in_the_skipped_hour_fires_once_that_day() -> None:
    local = Acta(namespace="dst2")
    handler = local.job(kind="r")(report.fn)
    s = local.schedule("night", "30 2 * * *", handler, timezone="Europe/Berlin")
    first = s.next_after(at(2026, 3, 28, 12))
    second = s.next_after(first)
    # 02:30 does not exist on 2026-03-29 in Berlin: one fire that day, then 02:30 again.
    assert first.date() != second.date()
    assert second.astimezone(BERLIN).strftime("%H:%M") == "02:30"


def test_a_fixed_hour_in_the_repeated_hour_fires_once_a_wildcard_hour_in_both() -> None:
    local = Acta(namespace="dst3")
    handler = local.job(kind="r")(report.fn)
    # 2026-10-25 in Berlin: 02:00-03:00 local happens twice (CEST, then CET).
    start = at(2026, 10, 24, 23, 50)

    def ticks(cron: str, n: int) -> list[datetime]:
        s = local.schedule(cron, cron, handler, timezone="Europe/Berlin")
        out = [s.next_after(start)]
        while len(out) < n:
            out.append(s.next_after(out[-1]))
        return out

    # A fixed hour: 02:30 CEST (00:30 UTC) only, then 02:30 CET the next day; the same with
    # a seconds field, a list of minutes or a range of hours.
    assert ticks("30 2 * * *", 2) == [at(2026, 10, 25, 0, 30), at(2026, 10, 26, 1, 30)]
    assert ticks("0 30 2 * * *", 2) == [at(2026, 10, 25, 0, 30), at(2026, 10, 26, 1, 30)]
    assert ticks("15,45 2 * * *", 3)[2] == at(2026, 10, 26, 1, 15)
    assert ticks("30 1-3 * * *", 2) == [at(2026, 10, 25, 0, 30), at(2026, 10, 25, 2, 30)]
    # A wildcard hour runs by the hour: in both passes, as cron does.
    assert ticks("30 * * * *", 3) == [at(2026, 10, 25, h, 30) for h in (0, 1, 2)]
    assert at(2026, 10, 25, 1, 20) in ticks("*/20 * * * *", 6)
    # The latest tick before a moment in the second pass is the first pass's.
    daily = local.schedules["30 2 * * *"]
    assert daily.latest_at_or_before(at(2026, 10, 25, 1, 50)) == at(2026, 10, 25, 0, 30)
    assert daily.successor(at(2026, 10, 25, 0, 30), at(2026, 10, 25, 1, 50)) == at(
        2026, 10, 26, 1, 30
    )


def test_six_fields_lead_with_seconds() -> None:
    local = Acta(namespace="secs")
    handler = local.job(kind="r")(report.fn)
    s = local.schedule("fast", "*/10 * * * * *", handler)
    assert s.next_after(at(2026, 1, 1, 0, 0, 3)) == at(2026, 1, 1, 0, 0, 10)
    every_second = local.schedule("each", "* * * * * *", handler)
    assert every_second.next_after(at(2026, 1, 1, 0, 0, 3)) == at(2026, 1, 1, 0, 0, 4)


def test_the_missed_policies_never_burst() -> None:
    local = Acta(namespace="missed")
    handler = local.job(kind="r")(report.fn)
    latest = local.schedule("latest", "0 * * * *", handler)  # hourly
    skip = local.schedule("skip", "0 * * * *", handler, missed="skip")
    tick = at(2026, 1, 1, 0)
    now = at(2026, 1, 1, 5, 30)  # five ticks missed (01:00 .. 05:00)
    assert latest.successor(tick, now) == at(2026, 1, 1, 5)  # once, for the latest, now
    assert skip.successor(tick, now) == at(2026, 1, 1, 6)  # the next one to come
    # Nothing missed: both keep the cadence.
    in_time = at(2026, 1, 1, 0, 0, 1)
    assert latest.successor(tick, in_time) == skip.successor(tick, in_time) == at(2026, 1, 1, 1)
    # A latest catch-up fire's own successor is the next tick, not another catch-up.
    assert latest.successor(at(2026, 1, 1, 5), now) == at(2026, 1, 1, 6)
    # all: every missed tick, oldest first, one at a time; too far behind: from the latest.
    every = local.schedule("every", "0 * * * *", handler, missed="all")
    assert every.successor(tick, now) == at(2026, 1, 1, 1)
    assert every.successor(at(2026, 1, 1, 4), now) == at(2026, 1, 1, 5)
    assert every.successor(tick, at(2026, 2, 1)) == at(2026, 2, 1)  # 744 ticks behind
    # A schedule that never fired starts at its next tick: no catch-up for the past.
    assert latest.first(now) == at(2026, 1, 1, 6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "* * *"}, r"schedule 'bad': cron='\* \* \*' must have 5 fields"),
        ({"cron": "61 * * * *"}, r"schedule 'bad': cron='61 \* \* \* \*' is not a valid cron"),
        ({"timezone": "Mars/Olympus"}, r"timezone='Mars/Olympus' is not an IANA time zone"),
        ({"missed": "some"}, r"missed='some' must be one of latest, skip, all"),
        ({"args": {"region": 5}}, r"schedule 'bad': args: r: argument 'region'=5"),
    ],
)
def test_bad_declarations_name_the_schedule_and_the_value(
    kwargs: dict[str, object], message: str
) -> None:
    local = Acta(namespace="bad")
    handler = local.job(kind="r")(report.fn)
    options: dict[str, object] = {"cron": "* * * * *", **kwargs}
    cron = options.pop("cron")
    with pytest.raises(ConfigurationError, match=message):
        local.schedule("bad", cron, handler, **options)  # type: ignore[arg-type]
    assert "bad" not in local.schedules


def test_a_schedule_is_declared_once_and_on_its_own_acta() -> None:
    local = Acta(namespace="twice")
    handler = local.job(kind="r")(report.fn)
    local.schedule("s", "* * * * *", handler)
    with pytest.raises(ConfigurationError, match="schedule 's' is declared twice"):
        local.schedule("s", "* * * * *", handler)
    with pytest.raises(ConfigurationError, match="must be registered on this Acta"):
        Acta(namespace="other").schedule("s", "* * * * *", handler)


def test_a_fire_takes_the_kinds_priority_and_keys_checked_at_declaration() -> None:
    local = Acta(namespace="keys")
    handler = local.job(kind="r", priority=4, lane="l:{region}", unique_key="u:{region}")(report.fn)
    s = local.schedule("eu", "* * * * *", handler, args={"region": "eu"})
    # As handler.job(region="eu") would give them; not the unique key (the tick is).
    assert (s.priority, s.lane_key, s.concurrency_key, s.rate_key) == (4, "l:eu", None, None)
    assert "unique_key" not in s.row()
    # The template reads the args as given: a default left out renders nothing.
    with pytest.raises(ConfigurationError, match=r"schedule 'x': args: r: the lane template"):
        local.schedule("x", "* * * * *", handler)
    with pytest.raises(ConfigurationError, match=r"schedule 'y': args: r2: lane_key='' must be"):
        local.schedule(
            "y", "* * * * *", local.job(kind="r2", lane="{region}")(report.fn), args={"region": ""}
        )
    assert "x" not in local.schedules and "y" not in local.schedules


@pytest.mark.parametrize(
    "cron",
    [
        "0 0 30 2 *",
        "0 0 31 2 *",
        "0 0 31 4 *",
        "0 0 31 6 *",
        "0 0 31 9 *",
        "0 0 31 11 *",
        "0 0 31 4,6 *",
        "0 0 0 30 2 *",
    ],
)
def test_a_cron_that_never_matches_is_refused_at_declaration(cron: str) -> None:
    """croniter.is_valid accepts them; their tick cannot be computed (a schedule declared so
    stopped every schedule of its namespace)."""
    local = Acta(namespace="never")
    handler = local.job(kind="r")(report.fn)
    with pytest.raises(ConfigurationError) as raised:
        local.schedule("x", cron, handler)
    assert str(raised.value).startswith(f"schedule 'x': cron={cron!r} never matches")
    assert local.schedules == {}


def test_a_cron_that_matches_rarely_is_accepted() -> None:
    local = Acta(namespace="rare")
    handler = local.job(kind="r")(report.fn)
    leap = local.schedule("leap", "0 0 29 2 *", handler)  # every 4 years (8 round 2100)
    assert leap.next_after(at(2026, 1, 1)) == at(2028, 2, 29)
    local.schedule("feb-or-monday", "0 0 30 2 1", handler)  # day OR weekday, as cron


def test_one_schedule_without_a_tick_does_not_stop_the_others() -> None:
    from acta_sqla.schedules import Schedule, plan_fires

    every = app.schedule("every", "* * * * *", report)
    now = at(2026, 5, 1, 12, 0, 30)
    unfired = [
        ("feb30", None, "0 0 30 2 *", "UTC", "latest"),
        ("every", None, "* * * * *", "UTC", "latest"),
        ("zone", None, "* * * * *", "Mars/Olympus", "latest"),  # stored by another version
    ]
    declared = {"every": every, "feb30": Schedule("feb30", "0 0 30 2 *", "report")}
    fires, stuck = plan_fires(unfired, declared, now)
    assert fires == [("every", at(2026, 5, 1, 12, 1))]
    assert [e.name for e in stuck] == ["feb30", "zone"]
    assert "never matches" in stuck[0].reason and "Mars/Olympus" in stuck[1].reason


async def test_storing_schedules_tries_again_after_a_deadlock() -> None:
    """A worker's start-up drops schedules while a completion batch holds two of their rows
    FOR SHARE: PostgreSQL may end the start-up's statement as a deadlock; it tries again
    instead of failing the start."""
    from acta_sqla.errors import StatementRefused
    from acta_sqla.settings import Timings
    from acta_sqla.store import WorkerStore

    store = WorkerStore(
        "postgresql://nobody@localhost/none", "acta", "d", Timings.from_heartbeat(45)
    )
    sent: list[str] = []

    class Admin:
        async def fetch(self, sql: str, *args: object) -> list[tuple[str]]:
            sent.append("store")
            if len(sent) == 1:
                raise StatementRefused("deadlock detected", "40P01")
            return [("gone",)]

        async def execute(self, sql: str, *args: object) -> None:
            sent.append("cancel")

    store.admin_conn = Admin()  # type: ignore[assignment]
    assert await store.store_schedules([]) == ["gone"]
    assert sent == ["store", "store", "cancel"]


def test_a_fire_whose_successor_cannot_be_computed_still_completes() -> None:
    """The worker adds a fire's successor to its completion (``Fires.chain``): a schedule
    whose next tick cannot be computed gets none (the chain stops, the recovery passes name
    it), and the fire's own completion is written unchanged; the executor used to raise
    there, after the handler ran."""
    from types import SimpleNamespace

    from acta_sqla.schedules import Schedule
    from acta_sqla.settings import load_settings
    from acta_sqla.worker import Worker
    from tests.unit.fakes import done, job

    acta = Acta(namespace="default")
    acta.schedules["feb30"] = Schedule("feb30", "0 0 30 2 *", "noop")  # as older code did
    acta.schedules["every"] = Schedule("every", "* * * * *", "noop")
    worker = Worker(acta, load_settings(database_url="postgresql://x@127.0.0.1:1/none"))
    worker.fires.store = SimpleNamespace(db_now=lambda: at(2026, 5, 1, 12, 0, 30))  # type: ignore[assignment]
    tick = at(2026, 5, 1, 12)

    stuck = worker.fires.chain(job(1, schedule_name="feb30", scheduled_at=tick), done(1))
    assert stuck == done(1)
    chained = worker.fires.chain(job(2, schedule_name="every", scheduled_at=tick), done(2))
    assert chained.features is not None
    assert chained.features["next"]["tick"] == at(2026, 5, 1, 12, 1).isoformat()
