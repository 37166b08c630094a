"""A schedule whose next tick cannot be computed (a cron that never matches, such as Feb
30, left stored by an older version of the code, or declared by code that skipped the
check) stops only itself: every other schedule of the namespace still gets its fire,
the worker names it once per pass, ``acta schedules resume`` refuses it in one line, and
``acta doctor`` reports it."""

from __future__ import annotations

import asyncpg
import pytest

from acta_sqla import Acta, Context, schedules
from acta_sqla.errors import ActaError
from acta_sqla.schedules import NoTick, Schedule
from acta_sqla.store import WorkerStore
from acta_sqla.worker.fires import ensure_fires
from tests.db.test_doctor import run_doctor

APP = Acta()


@APP.job()
async def tick(ctx: Context, label: str = "x") -> None: ...


MINUTELY = APP.schedule("minutely", "* * * * *", tick, args={"label": "m"})
FEB30 = Schedule("feb30", "0 0 30 2 *", "tick")
"""As code of a version that did not check its cron declared it (``acta.schedule`` now
refuses it): its tick cannot be computed."""


async def store_feb30(conn: asyncpg.Connection, enabled: bool = True) -> None:
    """The schedule as older code stored it: by SQL, as that code's worker wrote it."""
    await conn.execute(
        "INSERT INTO acta.schedule (namespace, name, cron, timezone, kind, args, missed, "
        "enabled) VALUES ('default', 'feb30', '0 0 30 2 *', 'UTC', 'tick', '{}', 'latest', $1)",
        enabled,
    )


async def test_a_schedule_that_never_matches_stops_only_itself(
    conn: asyncpg.Connection, store: WorkerStore
) -> None:
    await store.store_schedules([MINUTELY])
    await store_feb30(conn)
    stuck: list[NoTick] = []

    # Declared by this code (as older code would): computing its tick raised inside the
    # one loop over every schedule, so `minutely` got no fire either, on every pass.
    fired = await ensure_fires(store, {"minutely": MINUTELY, "feb30": FEB30}, stuck.append)

    assert [name for name, _ in fired] == ["minutely"]
    assert [(e.name, e.cron) for e in stuck] == [("feb30", "0 0 30 2 *")]
    assert "never matches" in str(stuck[0])
    # The next pass names it again, once; `minutely` has its pending fire.
    stuck.clear()
    assert await ensure_fires(store, {"minutely": MINUTELY, "feb30": FEB30}, stuck.append) == []
    assert [e.name for e in stuck] == ["feb30"]
    # Not declared by this code (stored by another version): still named, never enqueued.
    stuck.clear()
    assert await ensure_fires(store, {"minutely": MINUTELY}, stuck.append) == []
    assert [e.name for e in stuck] == ["feb30"]
    count = "SELECT count(*) FROM acta.job WHERE schedule_name = $1"
    assert (await conn.fetchval(count, "minutely"), await conn.fetchval(count, "feb30")) == (1, 0)


@pytest.mark.parametrize("paused", [True, False])
async def test_resuming_a_schedule_that_never_matches_is_a_clear_error(
    conn: asyncpg.Connection, paused: bool
) -> None:
    await store_feb30(conn, enabled=not paused)
    with pytest.raises(ActaError) as raised:
        await schedules.resume(conn, "acta", "default", "feb30")
    message = str(raised.value)
    assert message.startswith("schedule 'feb30' cannot be resumed: cron='0 0 30 2 *' never")
    assert "fix its cron" in message and "\n" not in message
    # Nothing changed: a paused schedule stays paused, and no fire was written.
    assert await conn.fetchval("SELECT enabled FROM acta.schedule") is not paused
    assert await conn.fetchval("SELECT count(*) FROM acta.job") == 0


async def test_the_doctor_reports_a_stored_schedule_that_never_fires(
    db: str, conn: asyncpg.Connection, store: WorkerStore
) -> None:
    await store.store_schedules([MINUTELY])
    assert [f for f in (await run_doctor(db)).findings if f.check == "schedule_no_tick"] == []
    await store_feb30(conn)

    report = await run_doctor(db)

    [found] = [f for f in report.findings if f.check == "schedule_no_tick"]
    assert (found.severity.value, found.subject) == ("problem", "schedule 'feb30'")
    assert "never fires" in found.message and "'0 0 30 2 *' never matches" in found.message
    assert "acta.schedule(" in found.advice
    assert report.exit_code == 2
