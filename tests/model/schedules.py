"""Schedules, dead workers and live limits as a Hypothesis state machine, run against the
real statements (the companion of tests/model/protocol.py, on the same bench).

A schedule's fires are claimed and completed by two simulated workers with the
statements a worker runs: ``WorkerStore.store_schedules`` (start-up: declare, or drop
what the code no longer declares), ``worker.fires.ensure_fires`` (start-up and every
recovery pass: re-plant a schedule with no pending fire), a completion carrying the
schedule's successor (``schedules.successor_feature``, as ``worker.fires.Fires.chain`` builds
it: the ``next_fire`` part of ``complete_executions``); the operator pauses and resumes
it (``schedules.pause`` / ``schedules.resume``; once racing a fire's completion whose
snapshot predates the pause), cancels a pending fire, and enqueues other jobs of the
fires' kind. That kind holds a concurrency key, so each started job is admitted
(``worker.admission.Admission``) and holds a slot; the operator changes the key's limit
live (``set_policy``, then each worker reloads the definitions and admits under
``Policy.merged``, as the supervisor does) and a worker falls silent until the other's
recovery pass marks it dead (its row's last beat moved into the past), which frees its
slots.

Time: the cron fires every minute at second 0; the model's clock (what the completing
worker takes for ``now``) moves on by whole minutes, so ticks are missed and a successor
is the latest missed tick (``missed="latest"``); a fire "comes due" when its ``run_at`` is
moved into the past by SQL, as protocol.py does for delays.

After every step (docs/reliability.md, "Model check"): one fire row per (schedule, tick);
at most one pending fire that never completed (a retried fire and its successor: two);
once a pause (or a drop) has committed, no new fire appears and nothing that was not
running then is pending, until resume; a resumed (or re-declared, or re-planted)
schedule has its pending fire; admission agrees with the limit the admitting worker
loaded, and never more live holders than the highest limit a current holder was admitted
under; a worker marked dead keeps no slot, the live ones keep theirs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any, TypeVar

import asyncpg
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from sqlalchemy.orm import Session

from acta_sqla import Acta, Context
from acta_sqla import schedules as sched
from acta_sqla.database import asyncpg_dsn
from acta_sqla.policy import Policy
from acta_sqla.values import ClaimedJob, Completion
from acta_sqla.worker import admission, completions
from acta_sqla.worker import fires as worker_fires
from acta_sqla.worker.recovery import run_recovery
from tests.model.protocol import ERROR, STATS, Bench, ModelViolation, expect

T = TypeVar("T")

APP = Acta(namespace="default")

KEY = "fires"
LIMITS = (1, 2)
"""The key's limits the operator switches between (the kind declares the first)."""


@APP.job(kind="tick", concurrency_key=KEY, concurrency_limit=LIMITS[0])
async def tick(ctx: Context) -> None:
    """Never run: the model's workers decide each attempt's ending."""


NAME = "every-minute"
SCHEDULE = APP.schedule(NAME, "0 * * * * *", tick)
"""A cron with seconds: minute ticks, at second 0."""
KINDS = tuple(APP.handlers)
LIVE = (
    "JOIN acta.job h ON h.id = sl.job_id AND h.execution_id = sl.execution_id "
    "WHERE h.status = 'executing' AND h.lease_expires_at > now()"
)
"""A slot row held live: its attempt runs and its lease has not run out."""
RETRY = Policy(backoff_base=3600.0, backoff_max=3600.0)
BOUNCE = 3600.0
ACTIVE = ("ready", "executing", "waiting")
SHAPES = ("success", "failure", "retry_now", "cancel", "handback")


@dataclass
class Holding:
    job: ClaimedJob
    started: bool = False


@dataclass
class SimWorker:
    index: int
    store: Any
    declares: bool = True
    """This worker's code declares the schedule (False: a deploy dropped it)."""
    held: dict[int, Holding] = field(default_factory=dict)
    limit: int = LIMITS[0]
    """The key's limit as this worker last loaded the definitions."""
    policy: Policy = field(default_factory=lambda: APP.handlers["tick"].policy)
    """The kind's policy as this worker last loaded it (``worker/definitions.py``:
    the declared policy merged with the stored overrides)."""


class ScheduleMachine(RuleBasedStateMachine):
    bench: Bench

    def __init__(self) -> None:
        super().__init__()
        b = self.bench
        b.run(b.conn.execute(b.reset_sql))
        self.workers: list[SimWorker] = []
        for i, store in enumerate(b.stores):
            store.worker_id = None
            store.paused = []
            b.run(store.register_worker("model", i, 8, list(KINDS), "model"))
            self.workers.append(SimWorker(i, store))
        declared = {k: h.policy.to_json() for k, h in APP.handlers.items()}
        b.run(b.stores[0].store_definitions(declared))
        self.clock: datetime = self.fetchval("SELECT now()")
        """The model's now: what a completing worker takes for the database's clock."""
        self.stored = True
        self.enabled = True
        self.frozen: tuple[set[int], set[int]] | None = None
        """After a pause or a drop committed: (every fire id then, the running ones)."""
        self.limit = LIMITS[0]
        """The key's limit in force (the operator's last committed change)."""
        self.dead: set[int] = set()
        self.admitted_under: dict[int, int] = {}
        """Fire id → the limit its worker admitted it under (its last admission)."""
        self.start_up(self.workers[0])

    # ------------------------------------------------------------------ helpers

    def run(self, coro: Any) -> Any:
        return self.bench.run(coro)

    def fetch(self, sql: str, *args: Any) -> list[Any]:
        return self.run(self.bench.conn.fetch(sql, *args))

    def fetchval(self, sql: str, *args: Any) -> Any:
        return self.run(self.bench.conn.fetchval(sql, *args))

    def fires(self) -> list[Any]:
        return self.fetch(
            "SELECT j.id, j.status, j.scheduled_at, j.attempts, "
            "(SELECT count(*) FROM acta.attempt e WHERE e.job_id = j.id) AS runs "
            "FROM acta.job j WHERE j.schedule_name = $1 ORDER BY j.id",
            NAME,
        )

    def pending(self) -> list[Any]:
        return [f for f in self.fires() if f["status"] in ACTIVE]

    def must_have_pending(self, after: str) -> None:
        if self.stored and self.enabled:
            expect(bool(self.pending()), f"after {after}: the schedule has no pending fire")

    def plant(self, w: SimWorker) -> None:
        """A worker's start-up or recovery pass: ``ensure_fires`` with its code's schedules."""
        found = self.run(worker_fires.ensure_fires(w.store, {NAME: SCHEDULE} if w.declares else {}))
        STATS["sched planted"] += len(found)

    def operator(self, action: Any) -> Any:
        with Session(self.bench.engine) as session:
            result = action(session)
            session.commit()
            return result

    # ------------------------------------------------------------------ the workers

    @rule(worker=st.integers(0, 1))
    def time_passes(self, worker: int) -> None:
        """A minute (or three) passes: every ready fire is due, the clock moves on."""
        self.clock += timedelta(minutes=1 + 2 * worker)
        self.run(
            self.bench.conn.execute(
                "UPDATE acta.job SET run_at = now() - interval '1 millisecond' "
                "WHERE status = 'ready' AND run_at > now()"
            )
        )

    @rule(worker=st.integers(0, 1), limit=st.integers(1, 2))
    def claim_rule(self, worker: int, limit: int) -> None:
        self.claim(worker, limit)

    def claim(self, worker: int, limit: int) -> list[ClaimedJob]:
        w = self.workers[worker]
        got: list[ClaimedJob] = self.run(w.store.claim(limit, not w.held)).jobs
        STATS["sched claimed"] += len(got)
        for cj in got:
            expect(cj.schedule_name in (NAME, None), f"job {cj.id}: a fire of {cj.schedule_name}")
            w.held[cj.id] = Holding(cj)
        return got

    @rule(worker=st.integers(0, 1), shape=st.sampled_from(SHAPES), later=st.booleans())
    def run_a_fire(self, worker: int, shape: str, later: bool) -> None:
        """A fire start to finish in one step (time passing first, or not): the worker
        claims one, admits and starts it, and completes it in ``shape``."""
        if later:
            self.time_passes(worker)
        w = self.workers[worker]
        for cj in self.claim(worker, 1):
            self.admit(w, w.held[cj.id])
            if cj.id in w.held:
                self.finish(w, cj.id, shape)

    @precondition(
        lambda self: (
            self.fetchval(
                "SELECT count(*) FROM acta.job WHERE schedule_name IS NULL "
                "AND status IN ('ready', 'executing', 'waiting')"
            )
            < 3
        )
    )
    @rule(count=st.integers(1, 2))
    def enqueue_ticks(self, count: int) -> None:
        """The application enqueues jobs of the fires' kind (not fires): the key's slots
        are contended, and a limit's change has something to admit."""
        for _ in range(count):
            self.operator(lambda s: APP.enqueue_sync(s, tick.job()))
        STATS["sched extra jobs"] += count

    def hold_one(self, worker: int) -> None:
        """Time passes; the worker claims a fire and admits it: it runs now."""
        self.time_passes(worker)
        w = self.workers[worker]
        for cj in self.claim(worker, 2):
            self.admit(w, w.held[cj.id])

    def otherwise(self, odds: int) -> bool:
        """A rare rule acts when ``odds`` is 0; else a fire is run instead (True): pauses,
        drops and deaths drawn as often as fires would leave little to check."""
        if odds == 0:
            return False
        self.run_a_fire(odds % 2, ("", "success", "retry_now", "failure")[odds], True)
        return True

    def live_slots(self) -> list[int]:
        """The jobs holding a live slot of the key."""
        rows = self.fetch(f"SELECT h.id FROM acta.concurrency_slot sl {LIVE} AND sl.key = $1", KEY)
        return [r["id"] for r in rows]

    @precondition(lambda self: any(not h.started for w in self.workers for h in w.held.values()))
    @rule(worker=st.integers(0, 1), index=st.integers(0, 3))
    def start(self, worker: int, index: int) -> None:
        """The executor admits the fire (its key's slot, under the limit this worker
        loaded), then the handler starts; a refusal is written as the bounce."""
        w = self.workers[worker]
        unstarted = sorted(i for i, h in w.held.items() if not h.started)
        if not unstarted:
            return
        self.admit(w, w.held[unstarted[index % len(unstarted)]])

    def admit(self, w: SimWorker, h: Holding) -> None:
        gate = admission.Admission(w.store, lambda kind: w.policy, "default", BOUNCE)
        before = self.live_slots()
        live = self.fetchval(
            "SELECT count(*) FROM acta.job WHERE id = $1 AND execution_id = $2 "
            "AND status = 'executing'",
            h.job.id,
            h.job.execution_id,
        )
        verdict = self.run(gate(SimpleNamespace(job=h.job)))  # type: ignore[arg-type]
        if live:
            # Admission against the model: a slot while fewer than the limit this worker
            # loaded hold one live, a bounce otherwise.
            expect(
                (verdict is None) == (len(before) < w.limit),
                f"fire {h.job.id}: admitted={verdict is None} with {before} holding live, "
                f"limit {w.limit}",
            )
        if verdict is None:
            STATS["sched admitted"] += 1
            h.started = True
            self.admitted_under[h.job.id] = w.limit
            self.run(w.store.heartbeat([(h.job.id, h.job.execution_id, True)]))
            return
        STATS["sched bounced"] += 1
        w.held.pop(h.job.id)
        self.run(w.store.complete_executions([verdict]))

    def chained(self, w: SimWorker, job: ClaimedJob, completion: Completion) -> Completion:
        """``Fires.chain``: a fire's completion carries its successor, if this
        worker's code declares the schedule; the clock is the model's."""
        if not w.declares or job.scheduled_at is None:
            return completion
        nxt = sched.successor_feature(SCHEDULE, "default", job.scheduled_at, self.clock)
        return completion._replace(features={**(completion.features or {}), "next": nxt})

    @precondition(lambda self: any(w.held for w in self.workers))
    @rule(worker=st.integers(0, 1), index=st.integers(0, 3), shape=st.sampled_from(SHAPES))
    def complete(self, worker: int, index: int, shape: str) -> None:
        w = self.workers[worker]
        if not w.held:
            return
        self.finish(w, sorted(w.held)[index % len(w.held)], shape)

    def finish(self, w: SimWorker, job_id: int, shape: str) -> None:
        completion = self.ending(w, w.held.pop(job_id), shape)
        STATS[f"sched {shape}"] += 1
        self.run(w.store.complete_executions([completion]))

    def ending(self, w: SimWorker, h: Holding, shape: str) -> Completion:
        """The completion the executor writes for ``h`` in ``shape``: a handler that did
        not start hands its fire back; every other ending carries the successor."""
        job = h.job
        if not h.started or shape == "handback":
            completion = completions.handback(job, 0.0)
        elif shape == "success":
            completion = self.chained(w, job, completions.succeeded(job, "{}", 0.01))
        elif shape == "failure":
            completion = self.chained(w, job, completions.failed(job, RETRY, ERROR, 0.01))
        elif shape == "retry_now":
            completion = self.chained(w, job, completions.retry_at(job, RETRY, ERROR, 0.01, 0.0))
        else:
            completion = self.chained(w, job, completions.cancelled(job, ERROR, 0.01))
        return completion

    @rule(index=st.integers(0, 3))
    def lease_runs_out(self, index: int) -> None:
        """A running fire's lease runs out (its worker's, or a dead worker's)."""
        held = [f["id"] for f in self.fires() if f["status"] == "executing"]
        if not held:
            return
        self.run(
            self.bench.conn.execute(
                "UPDATE acta.job SET lease_expires_at = now() - interval '1 second' "
                "WHERE id = $1 AND status = 'executing'",
                held[index % len(held)],
            )
        )

    @rule(worker=st.integers(0, 1))
    def recovery_pass(self, worker: int) -> None:
        """The supervisor's recovery pass: ``run_recovery`` (expired leases, dead workers),
        then ``Fires.ensure``: a chain a path without a fire's completion broke is re-planted."""
        w = self.workers[worker]
        if w.store.worker_id in self.dead:
            return
        result = self.run(run_recovery(w.store))
        STATS["sched recovered"] += result.recovered
        self.plant(w)
        if w.declares:
            self.must_have_pending("a recovery pass")

    @rule(worker=st.integers(0, 1), odds=st.integers(0, 2))
    def worker_dies_rule(self, worker: int, odds: int) -> None:
        if not self.otherwise(odds):
            self.worker_dies(worker)

    def worker_dies(self, worker: int) -> None:
        """The worker's process dies (its registry lost) and starts again as a new worker:
        its start-up stores its code's schedules (a drop, if its code no longer declares
        the schedule) and plants the fires."""
        w = self.workers[worker]
        w.held.clear()
        w.store.worker_id = None
        self.run(w.store.register_worker("model", worker + 10, 8, list(KINDS), "model"))
        self.start_up(w)

    def start_up(self, w: SimWorker) -> None:
        dropped = self.run(w.store.store_schedules([SCHEDULE] if w.declares else []))
        if w.declares:
            expect(dropped == [], f"a start-up declaring the schedule dropped {dropped}")
            if not self.stored:
                self.stored, self.enabled, self.frozen = True, True, None
        else:
            expect(
                dropped == ([NAME] if self.stored else []),
                f"a start-up without the schedule dropped {dropped}",
            )
            if self.stored:
                self.freeze()
            self.stored = False
        self.plant(w)
        self.must_have_pending("a start-up")

    @precondition(lambda self: all(w.declares for w in self.workers) or not self.stored)
    @rule(worker=st.integers(0, 1), odds=st.integers(0, 3))
    def deploy(self, worker: int, odds: int) -> None:
        """The worker is deployed with the other version of the code (declaring the
        schedule, or not): it stops, and starts again."""
        if self.otherwise(odds):
            return
        w = self.workers[worker]
        w.declares = not w.declares
        STATS[f"sched deploy declares={w.declares}"] += 1
        self.worker_dies(worker)

    @precondition(lambda self: len(self.dead) < 4)
    @rule(worker=st.integers(0, 1), odds=st.integers(0, 3))
    def worker_falls_silent(self, worker: int, odds: int) -> None:
        """The worker stops beating (its process hangs) long enough to be judged dead: its
        row's last beat is moved into the past; the next recovery pass marks it dead and
        frees its slots and locks. It comes back as a new worker, its registry lost."""
        if self.otherwise(odds):
            return
        w = self.workers[worker]
        if not any(h.started for h in w.held.values()):
            self.hold_one(worker)  # the telling case: it dies holding its key's slot
        old = w.store.worker_id
        self.run(
            self.bench.conn.execute(
                "UPDATE acta.worker SET heartbeat_at = now() - interval '1 day' WHERE id = $1",
                old,
            )
        )
        other = self.workers[1 - worker]
        holders = "SELECT sl.job_id, sl.worker_id FROM acta.concurrency_slot sl " + LIVE
        before = self.fetch(holders)
        result = self.run(run_recovery(other.store))
        STATS["sched dead workers"] += result.dead_workers
        expect(result.dead_workers == 1, f"recovery marked {result.dead_workers} dead, not 1")
        self.dead.add(old)
        left = [r["worker_id"] for r in self.fetch("SELECT worker_id FROM acta.concurrency_slot")]
        expect(old not in left, f"worker {old} marked dead keeps its slots")
        # The live workers' live slots are kept (an expired lease's slot may go with it).
        kept = sorted(r["job_id"] for r in before if r["worker_id"] != old)
        after = sorted(r["job_id"] for r in self.fetch(holders))
        expect(after == kept, f"marking {old} dead: live holders {kept} -> {after}")
        w.held.clear()
        w.store.worker_id = None
        self.run(w.store.register_worker("model", worker + 20, 8, list(KINDS), "model"))

    # ------------------------------------------------------------------ the operator

    def freeze(self) -> None:
        fires = self.fires()
        self.frozen = (
            {f["id"] for f in fires},
            {f["id"] for f in fires if f["status"] == "executing"},
        )

    @precondition(lambda self: self.stored and self.enabled)
    @rule(odds=st.integers(0, 2))
    def pause(self, odds: int) -> None:
        if self.otherwise(odds):
            return
        done = self.run(sched.pause(self.bench.conn, "acta", "default", NAME))
        expect(done, "pause of a stored schedule answered False")
        if self.enabled:
            self.freeze()
        self.enabled = False
        STATS["sched paused"] += 1

    @precondition(lambda self: self.stored and not self.enabled)
    @rule(odds=st.integers(0, 1))
    def resume(self, odds: int) -> None:
        if self.otherwise(odds):
            return
        tick_at = self.run(sched.resume(self.bench.conn, "acta", "default", NAME))
        expect(tick_at is not None, "resume of a stored schedule answered None")
        self.enabled, self.frozen = True, None
        STATS["sched resumed"] += 1
        self.must_have_pending("a resume")

    @precondition(lambda self: self.stored and self.enabled)
    @rule(worker=st.integers(0, 1), shape=st.sampled_from(SHAPES[:3]))
    def pause_races_a_completion(self, worker: int, shape: str) -> None:
        """A pause commits while a fire's completion statement runs: the completion took
        its snapshot before the pause, and waits (here: for the fire's row, which a third
        session holds) until the pause is committed, or waits for it (the order depends on
        the plan: where the statement takes the schedule's row). Either way, once both are
        done, no fire is pending that was not running before (issue 28's race: without
        the completion's ``FOR SHARE`` of the schedule row its successor was enqueued after
        the pause)."""
        w = self.workers[worker]
        started = sorted(i for i, h in w.held.items() if h.started)
        if not started:
            self.hold_one(worker)
            started = sorted(i for i, h in w.held.items() if h.started)
        if not started:
            return
        fires = self.fires()
        then = ({f["id"] for f in fires}, {f["id"] for f in fires if f["status"] == "executing"})
        waited = self.run(self.race(w, started[0], shape))
        STATS[f"sched pause raced a completion (pause waited: {waited})"] += 1
        self.enabled, self.frozen = False, then

    async def race(self, w: SimWorker, job_id: int, shape: str) -> bool:
        """The race; True if the pause waited for the completion (the statement took the
        schedule's row before the fire's), False if it committed first."""
        b = self.bench
        while len(b.extra) < 2:  # closed by the bench's fixture
            b.extra.append(await asyncpg.connect(asyncpg_dsn(b.url)))
        blocker, pauser = b.extra
        holder = blocker.get_server_pid()

        async def blocked_by(pid: int) -> bool:
            return bool(
                await b.conn.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
                    pid,
                )
            )

        async def until(done: Callable[[], Awaitable[bool]], what: str) -> None:
            deadline = time.monotonic() + 10.0
            while not await done():
                if time.monotonic() > deadline:
                    raise ModelViolation(f"the race: {what} did not happen within 10 s")
                await asyncio.sleep(0.002)

        h = w.held.pop(job_id)
        tx = blocker.transaction()
        await tx.start()
        try:
            await blocker.execute("SELECT 1 FROM acta.job WHERE id = $1 FOR UPDATE", job_id)
            completing = asyncio.ensure_future(
                w.store.complete_executions([self.ending(w, h, shape)])
            )

            async def waiting() -> bool:
                # Or done: a stale attempt's completion matches no row, and waits for none.
                return completing.done() or await blocked_by(holder)

            await until(waiting, "the completion waiting for the fire's row")
            pausing = asyncio.ensure_future(sched.pause(pauser, "acta", "default", NAME))
            pause_pid = pauser.get_server_pid()

            async def settled() -> bool:
                if pausing.done():
                    return True
                waits = await b.conn.fetchval("SELECT cardinality(pg_blocking_pids($1))", pause_pid)
                return bool(waits)

            await until(settled, "the pause committing, or waiting for the completion")
        finally:
            await tx.rollback()
        waited = not pausing.done()
        await asyncio.gather(completing, pausing)
        return waited

    @rule(index=st.integers(0, 3), odds=st.integers(0, 2))
    def cancel_a_pending_fire(self, index: int, odds: int) -> None:
        """The operator cancels a pending fire: the chain is broken until a recovery pass
        (or a start-up) re-plants it."""
        if self.otherwise(odds):
            return
        pending = self.pending()
        if not pending:
            return
        fire_id = pending[index % len(pending)]["id"]
        self.operator(lambda s: APP.cancel_sync(s, fire_id))

    @rule(limit=st.sampled_from(LIMITS), worker=st.integers(0, 1))
    def change_limit(self, limit: int, worker: int) -> None:
        """The operator sets the key's limit (``set_policy``); one worker reloads the
        definitions (its heartbeat saw their version move) and admits what it claims
        under the new limit; the other reloads later."""
        self.operator(lambda s: APP.set_policy_sync(s, "tick", concurrency_limit=limit))
        self.limit = limit
        STATS[f"sched limit set to {limit}"] += 1
        self.reload(worker)
        self.hold_one(worker)  # the telling case: that worker admits under the new limit

    @rule(worker=st.integers(0, 1))
    def reload(self, worker: int) -> None:
        w = self.workers[worker]
        defs = self.run(w.store.load_definitions())
        merged = {**defs.declared.get("tick", {}), **defs.overrides.get("tick", {})}
        expect(merged.get("concurrency_limit") == self.limit, f"loaded {merged}")
        w.limit = int(merged["concurrency_limit"])
        w.policy = APP.handlers["tick"].policy.merged(defs.overrides.get("tick", {}))

    # ------------------------------------------------------------------ the invariants

    @invariant()
    def check(self) -> None:
        STATS["sched checks"] += 1
        fires = self.fires()
        ticks = [f["scheduled_at"] for f in fires]
        expect(len(ticks) == len(set(ticks)), f"two fire rows of one tick: {sorted(ticks)}")
        pending = [f for f in fires if f["status"] in ACTIVE]
        unrun = [f["id"] for f in pending if f["runs"] == 0]
        expect(
            len(unrun) <= 1,
            f"{len(unrun)} pending fires that never completed: {self.shown(fires)}",
        )
        if self.frozen is not None:
            then, running = self.frozen
            # A fire cancelled before it started is no fire: a completion that committed
            # its successor while the pause waited for the schedule's row, then the
            # pause's cancel of it.
            new = [
                f["id"]
                for f in fires
                if f["id"] not in then and not (f["status"] == "cancelled" and f["attempts"] == 0)
            ]
            expect(not new, f"fires {new} appeared after a pause or drop: {self.shown(fires)}")
            back = [f["id"] for f in pending if f["id"] not in running]
            expect(
                not back,
                f"fires {back} pending after a pause or drop, not running then: "
                f"{self.shown(fires)}",
            )
        # Never more than k live holders of the key, k the limit in force: each holder was
        # admitted under the limit its worker had loaded; a limit lowered meanwhile lets
        # the holders admitted under the higher one finish (no admission until below).
        holders = self.live_slots()
        k = max([self.admitted_under[i] for i in holders], default=0)
        expect(
            len(holders) <= k or not holders,
            f"key {KEY}: {len(holders)} live slot holders {holders}, admitted under "
            f"{[self.admitted_under[i] for i in holders]}",
        )
        dead = self.fetch(
            "SELECT worker_id FROM acta.concurrency_slot WHERE worker_id = ANY($1::bigint[])",
            sorted(self.dead),
        )
        expect(not dead, f"slots of dead workers: {[r['worker_id'] for r in dead]}")

    @staticmethod
    def shown(fires: list[Any]) -> str:
        return ", ".join(
            f"{f['id']}@{f['scheduled_at']:%H:%M}:{f['status']}/{f['runs']}" for f in fires
        )

    def teardown(self) -> None:
        STATS["sched examples"] += 1


def schedule_machine_for(bench: Bench) -> type[ScheduleMachine]:
    return type("Schedules", (ScheduleMachine,), {"bench": bench})


__all__ = ["ModelViolation", "ScheduleMachine", "schedule_machine_for"]
