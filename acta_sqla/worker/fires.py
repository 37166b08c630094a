"""A schedule's fires, as a worker writes them: which tick each schedule fires next is
decided here (``schedules.plan_fires``, ``schedules.successor_feature``: croniter and the
missed policies), against the database's clock; the store only reads the rows and that
clock and enqueues (``WorkerStore.unfired_schedules``, ``enqueue_fires``).

* start-up stores the code's schedules (dropping those it no longer declares) and, beside
  the start, gives each schedule with no pending fire one (:meth:`Fires.store`);
* every recovery pass does the same (:meth:`Fires.ensure`): a chain broken by a path that
  wrote no completion of a fire (an operator's cancel of a pending fire, a fire failed by
  recovery) starts again;
* a fire's own completion carries its successor (:meth:`Fires.chain`, called by the
  executors): a fire and its successor commit together (I10).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from loguru import logger

from ..schedules import NoTick, Schedule, plan_fires, successor_feature
from ..values import ClaimedJob, Completion

log = logger.bind(stage="worker")

Unfired = tuple[str, datetime | None, str, str, str]
"""A stored schedule with no pending fire: name, its latest fire's tick (None: never
fired), stored cron, timezone, missed policy."""


class FireStore(Protocol):
    async def store_schedules(self, schedules: Sequence[Schedule]) -> list[str]: ...
    async def unfired_schedules(self) -> tuple[datetime, list[Unfired]]: ...
    async def enqueue_fires(
        self, names: Sequence[str], ticks: Sequence[datetime]
    ) -> list[tuple[str, Any]]: ...
    def db_now(self) -> datetime: ...


async def ensure_fires(
    store: FireStore,
    schedules: Mapping[str, Schedule],
    stuck: Callable[[NoTick], None] | None = None,
) -> list[tuple[str, Any]]:
    """Enqueue a fire for each stored schedule of ``schedules`` that has none pending: its
    first tick to come if it never fired, else its last fire's successor (the missed
    policy), at the database's clock. The store enqueues under the schedules' locks,
    re-checked: exactly one chain each. A schedule whose tick cannot be computed is handed
    to ``stuck`` and gets no fire; every other one still does."""
    now, unfired = await store.unfired_schedules()
    planned, failed = plan_fires(unfired, schedules, now)
    for exc in failed:
        if stuck is not None:
            stuck(exc)
    if not planned:
        return []
    return await store.enqueue_fires([n for n, _ in planned], [t for _, t in planned])


def log_no_tick(exc: NoTick) -> None:
    """A schedule that cannot fire: named once per pass that finds it (start-up, each
    recovery pass); it alone stops, every other schedule of the namespace fires."""
    log.bind(event="schedule_no_tick", schedule=exc.name, cron=exc.cron).warning(
        "{}: it does not fire (every other schedule does); fix its cron in the code and "
        "restart the workers, or remove it",
        exc,
    )


class Fires:
    """One worker's schedules: stored at start-up, their fires ensured, a fire's successor
    added to its completion."""

    def __init__(
        self,
        schedules: Mapping[str, Schedule],
        namespace: str,
        spawn: Callable[[Any], None],
    ) -> None:
        self.schedules = schedules
        self.namespace = namespace
        self.spawn = spawn
        """Runs a coroutine beside the caller (the supervisor's background tasks)."""
        self.store: FireStore | None = None

    async def store_declared(self, store: FireStore) -> None:
        """Store this code's schedules (dropping those it no longer declares) and give each
        a pending fire if it has none, beside start-up."""
        self.store = store
        dropped = await store.store_schedules(list(self.schedules.values()))
        if dropped:
            log.bind(event="schedules_dropped", names=dropped).info(
                "schedules no longer declared, stopped: {}", ", ".join(dropped)
            )
        if self.schedules:
            # Beside start-up, like the stages' warm-up: a lock on acta.job must hold up
            # the first fire, not the worker's start.
            self.spawn(self._ensure_logged())

    async def _ensure_logged(self) -> None:
        try:
            await self.ensure()
        except Exception as exc:  # the next recovery pass tries again
            log.bind(event="schedule_fires_failed").warning(
                "could not enqueue the schedules' next fires (the next recovery pass tries "
                "again): {}",
                exc,
            )

    async def ensure(self) -> None:
        """A pending fire for every schedule with none (start-up, each recovery pass)."""
        if not self.schedules:
            return
        assert self.store is not None
        for name, tick in await ensure_fires(self.store, self.schedules, log_no_tick):
            log.bind(event="schedule_fire_enqueued", schedule=name).info(
                "schedule {!r}: next fire at {}", name, tick.isoformat()
            )

    def chain(self, job: ClaimedJob, completion: Completion) -> Completion:
        """A fire's completion carries the schedule's next fire (if this code declares the
        schedule: a worker whose code dropped it ends the chain)."""
        schedule = self.schedules.get(job.schedule_name or "")
        if schedule is None or job.scheduled_at is None:
            return completion
        assert self.store is not None  # a job ran: the worker is started
        now = self.store.db_now()  # the database's clock: a skewed host skips no tick
        try:
            nxt = successor_feature(schedule, self.namespace, job.scheduled_at, now)
        except NoTick as exc:
            # The fire's own completion is still written; the chain stops here (each
            # recovery pass names the schedule again) instead of the executor failing.
            log_no_tick(exc)
            return completion
        return completion._replace(features={**(completion.features or {}), "next": nxt})
