"""The schedules' statements: the code's schedules stored, the unfired ones read with the
database's clock, fires enqueued under the schedules' locks. A part of
``store.WorkerStore``, run on its admin connection; which tick fires next is decided by
``worker/fires.py``, never here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from .connections import DEADLOCK_DETECTED, RoleConnection
from .errors import StatementRefused
from .queries.catalogue import WorkerSQL
from .queries.schedules import DECLARED


class Declared(Protocol):
    """A declared schedule as the store writes it (``schedules.Schedule``)."""

    def row(self) -> dict[str, Any]: ...


class Admin(Protocol):
    """What the schedules' statements use of the store."""

    admin_conn: RoleConnection
    sql: WorkerSQL
    namespace: str
    clock_offset: float
    wall: Callable[[], float]


class ScheduleStatements:
    """Schedules stored and read, fires enqueued (``worker/fires.py`` calls them)."""

    async def store_schedules(self: Admin, schedules: Sequence[Declared]) -> list[str]:
        """Store the code's schedules; the names of the namespace's schedules it dropped."""
        rows = [s.row() for s in schedules]
        columns = ("name", *DECLARED)
        for attempt in range(1, 4):
            try:
                found = await self.admin_conn.fetch(
                    self.sql.store_schedules,
                    self.namespace,
                    *([r[c] for r in rows] for c in columns),
                )
                break
            except StatementRefused as exc:
                # Its DELETE locks dropped schedules' rows in no set order, and a completion
                # batch with fires of two of them holds their rows FOR SHARE: PostgreSQL
                # may end one of the two as a deadlock; a start-up must not fail on it.
                if exc.sqlstate != DEADLOCK_DETECTED or attempt == 3:
                    raise
        dropped = [r[0] for r in found]
        if dropped:
            await self.admin_conn.execute(self.sql.cancel_unstarted_fires, self.namespace, dropped)
        return dropped

    def db_now(self: Admin) -> datetime:
        """The database's clock, as this host's plus the offset :meth:`unfired_schedules`
        last measured (a round trip's accuracy): which tick a schedule's fire is next must
        not depend on a skewed host clock."""
        return datetime.fromtimestamp(self.wall() + self.clock_offset, UTC)

    async def unfired_schedules(
        self: Admin,
    ) -> tuple[datetime, list[tuple[str, datetime | None, str, str, str]]]:
        """The database's clock, and the namespace's stored schedules with no pending fire
        (name, latest fire's tick or None, cron, timezone, missed); measures the host's
        offset to that clock (:meth:`db_now`). Which tick each fires next is decided by
        ``worker/fires.py``."""
        asked = self.wall()
        rows = await self.admin_conn.fetch(self.sql.unfired_schedules, self.namespace)
        now = rows[0]["now"]  # the database's clock: a skewed host must not skip ticks
        self.clock_offset = now.timestamp() - (asked + self.wall()) / 2
        # A NULL name: no schedule without a pending fire (the row carries now() alone).
        unfired = [
            (r["name"], r["last_tick"], r["cron"], r["timezone"], r["missed"])
            for r in rows
            if r["name"] is not None
        ]
        return now, unfired

    async def enqueue_fires(
        self: Admin, names: Sequence[str], ticks: Sequence[datetime]
    ) -> list[tuple[str, Any]]:
        """Enqueue the fires (schedule name, tick) under the schedules' advisory locks,
        taken in a statement of their own (the insert then re-reads what another worker
        committed): exactly one chain each. The (name, tick) pairs inserted."""
        _, inserted = await self.admin_conn.fetch_together(
            [
                (self.sql.lock_schedules, (self.namespace, list(names))),
                (self.sql.enqueue_fires, (self.namespace, list(names), list(ticks))),
            ]
        )
        return [(r[0], r[1]) for r in inserted]
