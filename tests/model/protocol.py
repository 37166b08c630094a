"""The worker protocol as a Hypothesis state machine, run against the real statements.

Each rule is one action of the protocol, executed by the code that runs in production:
the operator enqueues, cancels, retries and signals through the application's session
functions (``Acta.*_sync`` on a SQLAlchemy session); two simulated workers claim, renew,
admit and complete through ``WorkerStore`` and the completion builders of
``worker/completions.py``; recovery is ``worker.recovery.run_recovery``. Time is moved by
hand, as the fault tests do: a lease "runs out" when its row's ``lease_expires_at`` is
moved into the past, a delayed job "comes due" when its ``run_at`` is.

A plain Python model (:class:`MJob`) says what each job's status, attempts, holder and
history must be; after every step :meth:`ProtocolMachine.check` compares it with the
database and checks the invariants of docs/reliability.md as predicates over both. At the
end of every example, :meth:`ProtocolMachine.drain` runs every unfinished job to a
terminal state with the same rules: nothing is stranded.

The machine is built per test run by :func:`machine_for`, bound to one event loop, one
private database and its stores (reused across examples; each example starts from
TRUNCATEd tables and freshly registered workers).
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import asyncpg
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from acta_sqla import Acta, Context
from acta_sqla.policy import Policy
from acta_sqla.store import WorkerStore
from acta_sqla.values import ClaimedJob, Completion, Outcome
from acta_sqla.worker import completions
from acta_sqla.worker.recovery import run_recovery

T = TypeVar("T")

STATS: Counter[str] = Counter()
"""What the examples did (``ACTA_MODEL_STATS=1`` prints it at the end of the run)."""

APP = Acta(namespace="default")


@APP.job(kind="plain")
async def plain(ctx: Context) -> None:
    """Never run: the model's workers decide each attempt's ending themselves."""


RETRY_POLICY = Policy(backoff_base=3600.0, backoff_max=3600.0)
"""The workers' policy for a plain failure: its back-off is an hour, so a retried job is
not due until the model moves time on (the job's own max_attempts is its budget)."""

ERROR = completions.ErrorFields("model.Error", "the model's handler failed", "")

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})

STARTED_SHAPES = ("success", "failure", "retry_now", "retry_later", "timeout", "cancel", "stop")
"""Endings of an attempt whose handler ran."""
UNSTARTED_SHAPES = ("handback", "bounce", "fail_unrun")
"""Endings of an attempt whose handler never ran."""


# ------------------------------------------------------------------------------ the model


@dataclass
class MJob:
    """What one job must be, by the model."""

    id: int
    kind: str
    budget: int
    status: str = "ready"
    attempts: int = 0
    due: bool = True
    execution_id: int | None = None
    holder: int | None = None
    """The worker id whose attempt holds the row (executing), else None."""
    db_started: bool = False
    """The database was told (by a heartbeat) that the current attempt started."""
    alone: bool = False
    """The current attempt was claimed alone (the job was a suspect at its claim)."""
    lease_expired: bool = False
    cancel_requested: bool = False
    suspect: bool = False
    lost_before: bool = False
    executions: int = 0
    """Execution (history) rows the job must have."""
    history: list[str] = field(default_factory=list)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


@dataclass
class Held:
    """One entry of a simulated worker's in-flight registry."""

    job: ClaimedJob
    started: bool = False


@dataclass
class SimWorker:
    name: str
    store: WorkerStore
    held: dict[int, Held] = field(default_factory=dict)
    """Job id → entry; kept after the row is lost (the worker does not know yet), so a
    stale completion or renewal can be tried."""

    @property
    def worker_id(self) -> int:
        assert self.store.worker_id is not None
        return self.store.worker_id


class ModelViolation(AssertionError):
    """The database disagrees with the model, or an invariant does not hold."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise ModelViolation(message)


# ------------------------------------------------------------------------------ the machine


@dataclass
class Bench:
    """What the machine runs on, built once per test: an event loop, the database's URL,
    the reset statement, an asyncpg connection for checks, the workers' stores and the
    operator's engine."""

    loop: asyncio.AbstractEventLoop
    url: str
    reset_sql: str
    conn: asyncpg.Connection
    stores: list[WorkerStore]
    engine: Engine

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)


class ProtocolMachine(RuleBasedStateMachine):
    bench: Bench

    def __init__(self) -> None:
        super().__init__()
        b = self.bench
        b.run(b.conn.execute(b.reset_sql))
        self.workers: list[SimWorker] = []
        for i, store in enumerate(b.stores):
            store.worker_id = None
            b.run(store.register_worker("model", i, 8, ["plain"], "model"))
            self.workers.append(SimWorker(f"W{i}", store))
        self.jobs: dict[int, MJob] = {}
        self.past: list[tuple[SimWorker, ClaimedJob]] = []
        """Every attempt ever claimed, by whom: a late write may come from any of them."""

    # ------------------------------------------------------------------ helpers

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.bench.run(coro)

    def operator(self, action: Callable[[Session], T]) -> T:
        """One operator transaction through the application's session functions."""
        with Session(self.bench.engine) as session:
            result = action(session)
            session.commit()
            return result

    def sql(self, statement: str, *args: Any) -> str:
        return self.run(self.bench.conn.execute(statement, *args))

    def pick(self, ids: list[int], index: int) -> MJob | None:
        return self.jobs[sorted(ids)[index % len(ids)]] if ids else None

    def ids(self, predicate: Callable[[MJob], bool]) -> list[int]:
        return [j.id for j in self.jobs.values() if predicate(j)]

    def live(self, worker: SimWorker, job_id: int) -> bool:
        """The worker's entry still owns the row (its write would apply)."""
        m = self.jobs[job_id]
        entry = worker.held.get(job_id)
        return (
            entry is not None
            and m.status == "executing"
            and m.execution_id == entry.job.execution_id
        )

    # ------------------------------------------------------------------ enqueue

    def enqueue(self, kind: str, budget: int, delay: float | None = None) -> MJob:
        handler = APP.handlers[kind]

        def add(session: Session) -> int:
            job = APP.enqueue_sync(session, handler.job(max_attempts=budget, delay=delay))
            session.flush()
            return int(job.id)

        m = MJob(id=self.operator(add), kind=kind, budget=budget, due=delay is None)
        m.history.append("enqueued")
        self.jobs[m.id] = m
        return m

    @initialize(budgets=st.lists(st.integers(1, 3), min_size=1, max_size=4))
    def some_jobs(self, budgets: list[int]) -> None:
        for budget in budgets:
            self.enqueue("plain", budget)

    @rule(budget=st.integers(1, 3))
    def enqueue_plain(self, budget: int) -> None:
        self.enqueue("plain", budget)

    @rule(budget=st.integers(1, 3))
    def enqueue_delayed(self, budget: int) -> None:
        self.enqueue("plain", budget, delay=3600.0)

    # ------------------------------------------------------------------ claim and start

    def claim(self, w: SimWorker, limit: int) -> list[ClaimedJob]:
        alone = not w.held
        result = self.run(w.store.claim(limit, alone))
        claimable = self.ids(lambda j: j.status == "ready" and j.due and not j.suspect)
        suspects = self.ids(lambda j: j.status == "ready" and j.due and j.suspect)
        got = [j.id for j in result.jobs]
        STATS["claimed"] += len(got)
        expect(len(set(got)) == len(got), f"one claim took a row twice: {got}")
        expect(result.suspect_due == bool(suspects), f"suspect_due {result.suspect_due}")
        if suspects:
            want = 1 if alone else 0
            expect(
                len(got) == want and set(got) <= set(suspects),
                f"{w.name} (alone={alone}) claimed {got} while suspects {suspects} are due",
            )
        else:
            expect(set(got) <= set(claimable), f"{w.name} claimed {got}, claimable {claimable}")
            expect(
                len(got) == min(limit, len(claimable)),
                f"{w.name} claimed {got} of {claimable} (limit {limit}): a due job left",
            )
        for cj in result.jobs:
            m = self.jobs[cj.id]
            expect(cj.attempts == m.attempts + 1, f"job {m.id}: claim counted {cj.attempts}")
            expect(cj.alone == m.suspect, f"job {m.id}: claimed alone={cj.alone}")
            m.status, m.attempts, m.execution_id = "executing", cj.attempts, cj.execution_id
            m.holder, m.db_started, m.alone, m.lease_expired = w.worker_id, False, cj.alone, False
            m.history.append(f"claimed by {w.name} ({cj.execution_id})")
            w.held[cj.id] = Held(cj)
            self.past.append((w, cj))
        return result.jobs

    def runs_alone(self, w: SimWorker) -> bool:
        return any(e.job.alone for e in w.held.values())

    @precondition(lambda self: any(j.status == "ready" for j in self.jobs.values()))
    @rule(worker=st.integers(0, 1), limit=st.integers(1, 3))
    def claim_rule(self, worker: int, limit: int) -> None:
        w = self.workers[worker]
        if self.runs_alone(w):  # a suspect runs with nothing else: its claimer waits
            return
        self.claim(w, limit)

    @precondition(lambda self: any(not e.started for w in self.workers for e in w.held.values()))
    @rule(worker=st.integers(0, 1), index=st.integers(0, 7))
    def start(self, worker: int, index: int) -> None:
        """The handler of one held entry starts (the database learns it at the next beat)."""
        w = self.workers[worker]
        unstarted = [i for i, e in w.held.items() if not e.started]
        if unstarted:
            job_id = sorted(unstarted)[index % len(unstarted)]
            w.held[job_id].started = True

    # ------------------------------------------------------------------ heartbeat

    def heartbeat(self, w: SimWorker) -> None:
        held = [(i, e.job.execution_id, e.started) for i, e in sorted(w.held.items())]
        report = self.run(w.store.heartbeat(held))
        renewed = {job_id for job_id, _ in report.renewed}
        want = {i for i in w.held if self.live(w, i)}
        expect(renewed == want, f"{w.name} renewed {sorted(renewed)}, live {sorted(want)}")
        expect(not report.busy, f"{w.name}: rows busy with nobody else writing: {report.busy}")
        for job_id in renewed:
            m = self.jobs[job_id]
            m.lease_expired = False
            m.db_started = m.db_started or w.held[job_id].started
        cancel = {i for i in w.held if self.live(w, i) and self.jobs[i].cancel_requested}
        expect(
            report.cancel_requested == cancel,
            f"{w.name}: cancel requested {sorted(report.cancel_requested)}, want {sorted(cancel)}",
        )

    @precondition(lambda self: any(w.held for w in self.workers))
    @rule(worker=st.integers(0, 1))
    def heartbeat_rule(self, worker: int) -> None:
        self.heartbeat(self.workers[worker])

    # ------------------------------------------------------------------ completion

    def completion(self, w: SimWorker, entry: Held, shape: str) -> Completion:
        job = entry.job
        if shape == "success":
            return completions.succeeded(job, '{"ok": true}', 0.01)
        if shape == "failure":
            return completions.failed(job, RETRY_POLICY, ERROR, 0.01)
        if shape == "retry_now":
            return completions.retry_at(job, RETRY_POLICY, ERROR, 0.01, 0.0)
        if shape == "retry_later":
            return completions.retry_at(job, RETRY_POLICY, ERROR, 0.01, 3600.0)
        if shape == "timeout":
            return completions.stopped(job, RETRY_POLICY, Outcome.TIMEOUT, 0.01)
        if shape == "cancel":
            return completions.cancelled(job, ERROR, 0.01)
        if shape == "stop":
            return completions.interrupted(job, ERROR, 0.01)
        if shape == "handback":
            return completions.handback(job, 0.0)
        if shape == "bounce":
            return completions.bounce(job, 3600.0)
        if shape == "fail_unrun":
            return completions.fail_now(job, ERROR, None)
        raise AssertionError(shape)

    def expected_after(self, m: MJob, shape: str) -> None:
        """Apply an attempt's ending to the model job ``m`` (its write applied)."""
        charged_fail = shape in ("failure", "retry_now", "retry_later", "timeout")
        refund = shape in ("stop", "handback", "bounce")
        if shape == "success":
            status, due = "succeeded", True
        elif charged_fail:
            spent = m.attempts >= m.budget
            status = "failed" if spent else "ready"
            due = shape == "retry_now"
        elif shape in ("cancel",):
            status, due = "cancelled", True
        elif shape == "fail_unrun":
            status, due = "failed", True
        elif shape in ("stop", "handback"):
            status, due = "ready", True
        elif shape == "bounce":
            status, due = "ready", False
        else:
            raise AssertionError(shape)
        if status == "ready" and m.cancel_requested:
            status = "cancelled"  # an operator's cancel wins over a return to ready
        if refund:
            m.attempts -= 1
        if shape not in ("handback", "bounce"):
            m.executions += 1
        m.status, m.due = status, due
        m.holder = None if status != "executing" else m.holder
        m.history.append(f"{shape} -> {status}")

    def complete(self, w: SimWorker, job_id: int, shape: str) -> None:
        entry = w.held.pop(job_id)
        live = self.live_entry(w, entry)
        m = self.jobs[job_id]
        before = self.run(self.bench.conn.fetchrow("SELECT * FROM acta.job WHERE id=$1", job_id))
        applied = self.run(w.store.complete_executions([self.completion(w, entry, shape)]))
        STATS[f"{'live' if live else 'stale'} completion"] += 1
        if live:
            expect(applied == {job_id}, f"{w.name}: live {shape} of {job_id} not applied")
            self.expected_after(m, shape)
        else:
            expect(applied == set(), f"{w.name}: stale {shape} of job {job_id} applied")
            after = self.run(self.bench.conn.fetchrow("SELECT * FROM acta.job WHERE id=$1", job_id))
            expect(dict(after) == dict(before), f"stale {shape} of job {job_id} changed its row")
            m.history.append(f"stale {shape} by {w.name} refused")

    def live_entry(self, w: SimWorker, entry: Held) -> bool:
        m = self.jobs[entry.job.id]
        return m.status == "executing" and m.execution_id == entry.job.execution_id

    @precondition(lambda self: any(w.held for w in self.workers))
    @rule(worker=st.integers(0, 1), index=st.integers(0, 7), shape=st.integers(0, 20))
    def complete_rule(self, worker: int, index: int, shape: int) -> None:
        w = self.workers[worker]
        if not w.held:
            return
        job_id = sorted(w.held)[index % len(w.held)]
        shapes = STARTED_SHAPES if w.held[job_id].started else UNSTARTED_SHAPES
        self.complete(w, job_id, shapes[shape % len(shapes)])

    def stale_attempts(self) -> list[tuple[SimWorker, ClaimedJob]]:
        return [(w, cj) for w, cj in self.past if not self.live_entry(w, Held(cj))]

    @precondition(lambda self: bool(self.stale_attempts()))
    @rule(index=st.integers(0, 31), shape=st.integers(0, 20))
    def late_write(self, index: int, shape: int) -> None:
        """A write of an attempt that no longer owns its row arrives late (a finalizer's
        repeated write, a stalled worker's completion after its lease was taken over):
        it must change nothing, whatever its shape."""
        stale = self.stale_attempts()
        w, cj = stale[index % len(stale)]
        shapes = STARTED_SHAPES + UNSTARTED_SHAPES
        before = self.run(self.bench.conn.fetchrow("SELECT * FROM acta.job WHERE id=$1", cj.id))
        completion = self.completion(w, Held(cj), shapes[shape % len(shapes)])
        applied = self.run(w.store.complete_executions([completion]))
        after = self.run(self.bench.conn.fetchrow("SELECT * FROM acta.job WHERE id=$1", cj.id))
        STATS["late write"] += 1
        expect(applied == set(), f"a late {completion.outcome} of job {cj.id} applied")
        expect(dict(after) == dict(before), f"a late write of job {cj.id} changed its row")

    # ------------------------------------------------------------------ leases and recovery

    def expire(self, m: MJob) -> None:
        self.sql(
            "UPDATE acta.job SET lease_expires_at = now() - interval '1 second' WHERE id = $1",
            m.id,
        )
        m.lease_expired = True

    @precondition(lambda self: any(j.status == "executing" for j in self.jobs.values()))
    @rule(index=st.integers(0, 7))
    def lease_runs_out(self, index: int) -> None:
        m = self.pick(self.ids(lambda j: j.status == "executing" and not j.lease_expired), index)
        if m is not None:
            self.expire(m)

    def recover(self, w: SimWorker) -> None:
        expired = [j for j in self.jobs.values() if j.status == "executing" and j.lease_expired]
        result = self.run(run_recovery(w.store))
        charged = 0
        STATS["recovered"] += len(expired)
        for m in expired:
            was_charged = m.alone or m.db_started
            charged += was_charged
            isolate = not m.alone and (not m.db_started or m.lost_before)
            if not was_charged:
                m.attempts -= 1
            if m.cancel_requested:
                status = "cancelled"
            elif was_charged and m.attempts >= m.budget:
                status = "failed"
            else:
                status = "ready"
            m.status, m.due, m.holder = status, True, None
            m.suspect = m.suspect or isolate
            m.lost_before = True
            m.executions += 1
            m.history.append(f"recovered by {w.name} -> {status} (charged={was_charged})")
        expect(
            result.recovered == len(expired),
            f"recovery returned {result.recovered}, expired {[m.id for m in expired]}",
        )
        expect(result.charged == charged, f"recovery charged {result.charged}, want {charged}")

    @precondition(
        lambda self: any(j.lease_expired and j.status == "executing" for j in self.jobs.values())
    )
    @rule(worker=st.integers(0, 1))
    def recovery_pass(self, worker: int) -> None:
        self.recover(self.workers[worker])

    @rule(worker=st.integers(0, 1))
    def worker_dies(self, worker: int) -> None:
        """The worker's process dies: its registry is lost, and it comes back as a new
        worker (a new id). Its rows keep their leases until they run out."""
        w = self.workers[worker]
        w.held.clear()
        w.store.worker_id = None
        self.run(w.store.register_worker("model", worker + 10, 8, ["plain"], "model"))

    # ------------------------------------------------------------------ time

    @precondition(lambda self: any(j.status == "ready" and not j.due for j in self.jobs.values()))
    @rule()
    def time_passes(self) -> None:
        """Every ready job comes due (its delay or back-off elapsed)."""
        self.sql(
            "UPDATE acta.job SET run_at = now() - interval '1 millisecond' "
            "WHERE status = 'ready' AND run_at > now()"
        )
        for m in self.jobs.values():
            if m.status == "ready":
                m.due = True

    # ------------------------------------------------------------------ the operator

    @precondition(lambda self: bool(self.jobs))
    @rule(index=st.integers(0, 15))
    def cancel(self, index: int) -> None:
        m = self.pick(list(self.jobs), index)
        if m is None:
            return
        outcome = self.operator(lambda s: APP.cancel_sync(s, m.id))
        if m.status in ("ready", "waiting"):
            want = "cancelled"
            m.status, m.cancel_requested = "cancelled", True
        elif m.status == "executing":
            want = "requested"
            m.cancel_requested = True
        else:
            want = "finished"
        expect(outcome == want, f"cancel of job {m.id} ({m.status}) answered {outcome}")
        m.history.append(f"cancel -> {outcome}")

    @precondition(lambda self: any(j.terminal for j in self.jobs.values()))
    @rule(index=st.integers(0, 15))
    def retry(self, index: int) -> None:
        m = self.pick(list(self.jobs), index)
        if m is None:
            return
        done = self.operator(lambda s: APP.retry_sync(s, m.id))
        expect(done == m.terminal, f"retry of job {m.id} ({m.status}) answered {done}")
        if done:
            m.status, m.attempts, m.due, m.cancel_requested = "ready", 0, True, False
            m.history.append("retried")

    # ------------------------------------------------------------------ the invariants

    @invariant()
    def check(self) -> None:
        STATS["checks"] += 1
        rows = self.run(
            self.bench.conn.fetch(
                "SELECT j.id, j.status, j.attempts, j.execution_id, j.worker_id, "
                "j.cancel_requested, j.suspect, j.started_at IS NOT NULL AS started, "
                "(SELECT count(*) FROM acta.execution e WHERE e.job_id = j.id) AS executions "
                "FROM acta.job j"
            )
        )
        db = {r["id"]: r for r in rows}
        expect(
            set(db) == set(self.jobs),
            f"jobs {sorted(db)} in the database, model {sorted(self.jobs)}",
        )
        for job_id, m in self.jobs.items():
            r = db[job_id]
            where = f"job {job_id} ({'; '.join(m.history)})"
            expect(r["status"] == m.status, f"{where}: status {r['status']}, model {m.status}")
            # Attempts are charged only for attempts that started (or ran alone).
            expect(
                r["attempts"] == m.attempts,
                f"{where}: attempts {r['attempts']}, model {m.attempts}",
            )
            expect(r["suspect"] == m.suspect, f"{where}: suspect {r['suspect']}")
            expect(
                r["executions"] == m.executions,
                f"{where}: {r['executions']} history rows, model {m.executions}",
            )
            if m.status == "executing":
                expect(r["execution_id"] == m.execution_id, f"{where}: execution id")
                expect(r["worker_id"] == m.holder, f"{where}: held by {r['worker_id']}")
                expect(r["started"] == m.db_started, f"{where}: started {r['started']}")
                expect(r["cancel_requested"] == m.cancel_requested, f"{where}: cancel flag")
            # No job held by two live attempts: at most one registry entry owns the row.
            owners = [w.name for w in self.workers if self.live(w, job_id)]
            expect(len(owners) <= 1, f"{where}: held live by {owners}")
            if m.status == "executing" and not m.lease_expired:
                # A live lease is some live worker's (a dead worker's registry is gone).
                pass

    # ------------------------------------------------------------------ nothing stranded

    def drain(self) -> None:
        """Run every unfinished job to a terminal state with the protocol's own actions."""
        w = self.workers[0]
        for _ in range(12):
            if all(m.terminal for m in self.jobs.values()):
                return
            for other in self.workers:
                other.held.clear()
            for m in self.jobs.values():
                if m.status == "executing" and not m.lease_expired:
                    self.expire(m)
            self.recover(w)
            self.time_passes()
            self.check()
            while True:
                claimed = self.claim(w, 10)
                if not claimed:
                    break
                for cj in claimed:
                    w.held[cj.id].started = True
                self.heartbeat(w)
                for cj in claimed:
                    self.complete(w, cj.id, "success")
                self.check()
        stuck = {m.id: m.history for m in self.jobs.values() if not m.terminal}
        expect(not stuck, f"stranded after the drain: {stuck}")

    def teardown(self) -> None:
        STATS["examples"] += 1
        STATS["jobs"] += len(self.jobs)
        # Hypothesis calls teardown in a ``finally``: after a failing step, leave that
        # failure alone (a drain from a broken state would only report it again, worse).
        if sys.exc_info()[1] is None:
            self.drain()
            self.check()


def machine_for(bench: Bench) -> type[ProtocolMachine]:
    return type("Protocol", (ProtocolMachine,), {"bench": bench})


__all__ = ["Bench", "ProtocolMachine", "machine_for"]
