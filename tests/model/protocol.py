"""The worker protocol as a Hypothesis state machine, run against the real statements.

Each rule is one action of the protocol, executed by the code that runs in production:
the application enqueues (plain, delayed, keyed, rated, laned, unique, a parent, a signal
wait), cancels, retries, signals, deletes and pauses or resumes a kind through its session
functions (``Acta.*_sync`` on a SQLAlchemy session); two simulated workers claim, admit
(``worker.admission.Admission``), renew, reload the definitions and complete (every shape
of ``worker/completions.py``, through ``WorkerStore.complete_executions``) and die with
their registry lost; recovery is ``worker.recovery.run_recovery``; late writes of earlier
attempts arrive at any time. Time is moved by hand, as the fault tests do: a lease "runs
out" when its row's ``lease_expires_at`` is moved into the past (and its worker's attempt
deadline with it); a delay, back-off or bounce "elapses" when ``run_at`` is, and a rate
window when the meter's ``next_at`` is.

A plain Python model (:class:`MJob`) says what each job's status, attempts, holder, wait
and history must be; after every step :meth:`ProtocolMachine.check` compares it with the
database and checks the invariants of docs/reliability.md as predicates over both (the
"Model check" section there lists them, and the mutations the model catches). At the end
of every example, :meth:`ProtocolMachine.drain` runs every unfinished job to a terminal
state with the same actions: nothing is stranded.

The machine is built per test run by :func:`machine_for`, bound to one event loop, one
private database and its stores (reused across examples; each example starts from
TRUNCATEd tables and freshly registered workers).
"""

from __future__ import annotations

import asyncio
import functools
import sys
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from types import SimpleNamespace
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
from sqlalchemy.orm import Session, defer

from acta_sqla import Acta, Context, Job, JobActive
from acta_sqla.errors import UniqueKeyHeld
from acta_sqla.policy import Policy
from acta_sqla.session import resume_kind
from acta_sqla.store import WorkerStore
from acta_sqla.values import ClaimedJob, Completion, Outcome
from acta_sqla.waits import child_row
from acta_sqla.worker import admission, completions
from acta_sqla.worker.recovery import run_recovery

T = TypeVar("T")

STATS: Counter[str] = Counter()
"""What the examples did (``ACTA_MODEL_STATS=1`` prints it at the end of the run)."""

APP = Acta(namespace="default")


@APP.job(kind="plain")
async def plain(ctx: Context) -> None:
    """Never run: the model's workers decide each attempt's ending themselves."""


KEY_LIMIT = 1


@APP.job(kind="keyed", concurrency_key="key{c}", concurrency_limit=KEY_LIMIT)
async def keyed(ctx: Context, c: int) -> None:
    """At most KEY_LIMIT running per key."""


RATE_COUNT = 1


@APP.job(kind="rated", rate="1/h")
async def rated(ctx: Context) -> None:
    """One start an hour (the model's clock moves the meter on)."""


@APP.job(kind="laned", lane="lane{n}")
async def laned(ctx: Context, n: int) -> None:
    """One at a time per lane, in enqueue order."""


@APP.job(kind="uniq", unique_key="u{u}")
async def uniq(ctx: Context, u: int) -> None:
    """One unfinished job per key."""


KINDS = tuple(APP.handlers)

RETRY_POLICY = Policy(backoff_base=3600.0, backoff_max=3600.0)
"""The workers' policy for a plain failure: its back-off is an hour, so a retried job is
not due until the model moves time on (the job's own max_attempts is its budget)."""

BOUNCE = 3600.0
"""Admission's bounce delay: a bounced job is due again once the model moves time on."""

ERROR = completions.ErrorFields("model.Error", "the model's handler failed", "")

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})

STARTED_SHAPES = (
    "success",
    "failure",
    "retry_now",
    "retry_later",
    "timeout",
    "cancel",
    "stop",
    "signal_wait",
    "children_wait",
)
"""Endings of an attempt whose handler ran."""
UNSTARTED_SHAPES = ("handback", "bounce", "fail_unrun")
"""Endings of an attempt whose handler never ran."""
SIGNALS = ("go", "stop")
MAX_UNFINISHED = 8


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
    admitted: bool = False
    """The current attempt holds its concurrency slot / passed its rate meter."""
    lease_expired: bool = False
    cancel_requested: bool = False
    suspect: bool = False
    lost_before: bool = False
    executions: int = 0
    """Execution (history) rows the job must have."""
    key: str | None = None
    lane: str | None = None
    unique: str | None = None
    wait: str | None = None
    """Why a ``waiting`` job waits: ``lane`` (queued behind its lane's head), ``signal``,
    ``children``."""
    awaited: str | None = None
    signals: set[str] = field(default_factory=set)
    parent: int | None = None
    parent_execution: int | None = None
    pending: int = 0
    resumes: int = 0
    intent: str | None = None
    """What the job's handler does on its first run: ``children_wait`` (a parent) or
    ``signal_wait``; None: whatever the step draws."""
    history: list[str] = field(default_factory=list)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def lane_head(self) -> bool:
        """Holds its lane: unfinished and not queued behind another job."""
        return self.lane is not None and not self.terminal and self.wait != "lane"


@dataclass
class Held:
    """One entry of a simulated worker's in-flight registry."""

    job: ClaimedJob
    started: bool = False
    overdue: bool = False
    """The attempt's deadline passed (its lease ran out): the worker stopped renewing it
    and cancelled its handler; its only write left is the lease-lost completion."""


@dataclass
class SimWorker:
    name: str
    store: WorkerStore
    held: dict[int, Held] = field(default_factory=dict)
    """Job id → entry; kept after the row is lost (the worker does not know yet), so a
    stale completion or renewal can be tried."""
    paused: frozenset[str] = frozenset()
    """The paused kinds as this worker last loaded them."""

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
    extra: list[asyncpg.Connection] = field(default_factory=list)
    """More connections a machine opens when it needs them (tests/model/schedules.py's
    race), closed with the bench."""

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
            store.paused = []
            b.run(store.register_worker("model", i, 8, list(KINDS), "model"))
            self.workers.append(SimWorker(f"W{i}", store))
        declared = {k: h.policy.to_json() for k, h in APP.handlers.items()}
        b.run(b.stores[0].store_definitions(declared))
        self.jobs: dict[int, MJob] = {}
        self.past: list[tuple[SimWorker, ClaimedJob]] = []
        """Every attempt ever claimed, by whom: a late write may come from any of them."""
        self.meter_free: dict[str, bool] = {}
        """Per rate key: the meter would admit now (the model's clock moved on)."""
        self.rate_starts: Counter[str] = Counter()
        """Admissions per rate key since the model's clock last moved (one window)."""
        self.paused: set[str] = set()

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

    def row(self, job_id: int) -> dict[str, Any] | None:
        r = self.run(self.bench.conn.fetchrow("SELECT * FROM acta.job WHERE id=$1", job_id))
        return None if r is None else dict(r)

    def pick(self, ids: list[int], index: int) -> MJob | None:
        return self.jobs[sorted(ids)[index % len(ids)]] if ids else None

    def ids(self, predicate: Callable[[MJob], bool]) -> list[int]:
        return [j.id for j in self.jobs.values() if predicate(j)]

    def live_entry(self, entry: Held) -> bool:
        """The attempt still owns its row (its write would apply)."""
        m = self.jobs.get(entry.job.id)
        return (
            m is not None and m.status == "executing" and m.execution_id == entry.job.execution_id
        )

    def live(self, worker: SimWorker, job_id: int) -> bool:
        entry = worker.held.get(job_id)
        return entry is not None and self.live_entry(entry)

    def note(self, m: MJob, what: str) -> None:
        m.history.append(what)

    # ------------------------------------------------------------------ transitions

    def hand_on(self, lane: str) -> None:
        """The lane's head left: its oldest queued job is the head now."""
        queued = [j for j in self.jobs.values() if j.lane == lane and j.wait == "lane"]
        if queued and not any(j.lane_head for j in self.jobs.values() if j.lane == lane):
            nxt = min(queued, key=lambda j: j.id)
            nxt.status, nxt.wait, nxt.due = "ready", None, True
            self.note(nxt, "lane handed on")

    def child_ended(self, child: MJob) -> None:
        p = self.jobs.get(child.parent) if child.parent is not None else None
        if (
            p is not None
            and p.status == "waiting"
            and p.wait == "children"
            and p.pending > 0
            and p.execution_id == child.parent_execution
        ):
            p.pending -= 1
            self.note(p, f"child {child.id} ended ({p.pending} left)")
            if p.pending == 0:
                p.status, p.wait, p.due = "ready", None, True
                p.resumes += 1
                self.note(p, "resumed by its children")

    def ended(self, m: MJob, status: str, *, deleted: bool = False) -> None:
        """``m`` leaves an unfinished state for ``status`` (or is deleted), with the
        terminal effects of every writer: a lane handed on, a parent told, the children of
        a cancelled (or deleted) wait cancelled."""
        was_head, pending = m.lane_head, m.pending
        m.status, m.holder, m.admitted, m.pending, m.awaited = status, None, False, 0, None
        m.wait = None
        if deleted:
            del self.jobs[m.id]
        if was_head and m.lane is not None:
            self.hand_on(m.lane)
        self.child_ended(m)
        if pending > 0 and (status == "cancelled" or deleted):
            for c in [j for j in self.jobs.values() if j.parent == m.id]:
                if c.status in ("ready", "waiting"):
                    c.cancel_requested = True
                    self.note(c, "cancelled with its parent")
                    self.ended(c, "cancelled")
                elif c.status == "executing":
                    c.cancel_requested = True
                    self.note(c, "cancel requested with its parent")

    def settle(self, m: MJob, status: str, due: bool) -> None:
        """An attempt's write moved ``m`` to ``status`` (from executing)."""
        if status in TERMINAL:
            self.ended(m, status)
        else:
            m.status, m.holder, m.admitted, m.due = status, None, False, due

    # ------------------------------------------------------------------ enqueue

    def enqueue(self, kind: str, budget: int, delay: float | None = None, **args: int) -> MJob:
        handler = APP.handlers[kind]

        def add(session: Session) -> int:
            job = APP.enqueue_sync(session, handler.job(max_attempts=budget, delay=delay, **args))
            session.flush()
            return int(job.id)

        job_id = self.operator(add)
        STATS[f"enqueue {kind}"] += 1
        key = f"key{args['c']}" if kind == "keyed" else None
        lane = f"lane{args['n']}" if kind == "laned" else None
        unique = f"u{args['u']}" if kind == "uniq" else None
        if unique is not None:
            holders = [j for j in self.jobs.values() if j.unique == unique and not j.terminal]
            if holders:
                expect(
                    job_id == holders[0].id, f"unique {unique}: {job_id}, held by {holders[0].id}"
                )
                self.note(holders[0], "its unique key asked again")
                return holders[0]
        expect(job_id not in self.jobs, f"enqueue answered job {job_id} again")
        m = MJob(id=job_id, kind=kind, budget=budget, due=delay is None)
        m.key, m.lane, m.unique = key, lane, unique
        if lane is not None and any(j.lane == lane and not j.terminal for j in self.jobs.values()):
            m.status, m.wait = "waiting", "lane"
        self.note(m, f"enqueued {kind}{args or ''} -> {m.status}")
        self.jobs[m.id] = m
        return m

    @initialize(
        jobs=st.lists(
            st.tuples(st.integers(1, 3), st.sampled_from((None, "children_wait", "signal_wait"))),
            min_size=1,
            max_size=4,
        )
    )
    def some_jobs(self, jobs: list[tuple[int, str | None]]) -> None:
        """A few plain jobs to start from, some of them parents or signal waits."""
        for budget, intent in jobs:
            self.enqueue("plain", budget).intent = intent

    def room(self) -> bool:
        """A bound on the unfinished jobs (a small state, explored in depth)."""
        return sum(1 for j in self.jobs.values() if not j.terminal) < MAX_UNFINISHED

    @precondition(room)
    @rule()
    def enqueue_one(self) -> None:
        """A plain job. (Hypothesis sorts the rules with fewer arguments first and leans on
        the first valid one: this keeps the queue fed rather than, say, cancelling.)"""
        self.enqueue("plain", 2)

    @precondition(room)
    @rule(
        variant=st.sampled_from(
            ("plain", "delayed", "keyed", "rated", "laned", "unique", "parent", "signal_wait")
        ),
        budget=st.integers(1, 3),
        which=st.integers(0, 1),
        count=st.integers(1, 3),
    )
    def enqueue_rule(self, variant: str, budget: int, which: int, count: int) -> None:
        """The application enqueues: a plain job, a delayed one, ``count`` jobs of a
        concurrency key or of a lane, a rated one, a unique one, a parent (its handler
        spawns two children and waits for them on its first run), or a job whose first run
        waits for a signal."""
        if variant == "plain":
            self.enqueue("plain", budget)
        elif variant == "delayed":
            self.enqueue("plain", budget, delay=3600.0)
        elif variant == "keyed":
            for _ in range(count + 1):  # two at least: a key is contended or it is dull
                self.enqueue("keyed", 2, c=which)
        elif variant == "rated":
            self.enqueue("rated", 2)
        elif variant == "laned":
            for _ in range(count):
                self.enqueue("laned", 2, n=which)
        elif variant == "unique":
            self.enqueue("uniq", 2, u=which)
        else:  # a parent, or a signal wait: what its first run does
            self.enqueue("plain", 2).intent = (
                "children_wait" if variant == "parent" else "signal_wait"
            )

    # ------------------------------------------------------------------ claim and start

    def claim(self, w: SimWorker, limit: int) -> list[ClaimedJob]:
        alone = not w.held
        result = self.run(w.store.claim(limit, alone))
        due = [j for j in self.jobs.values() if j.status == "ready" and j.due]
        claimable = [j.id for j in due if not j.suspect and j.kind not in w.paused]
        suspects = [j.id for j in due if j.suspect and j.kind not in w.paused]
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
            m.admitted = False
            self.note(m, f"claimed by {w.name} ({cj.execution_id})")
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

    @precondition(lambda self: any(j.status == "ready" and j.due for j in self.jobs.values()))
    @rule(worker=st.integers(0, 1))
    def run_one(self, worker: int) -> None:
        """A short job, start to finish in one step: the worker claims one, admits and
        starts it, and it succeeds (a parent's or a signal wait's first run waits)."""
        w = self.workers[worker]
        if self.runs_alone(w):
            return
        for cj in self.claim(w, 1):
            self.start(w, cj.id)
            entry = w.held.get(cj.id)
            if entry is not None and entry.started:
                m = self.jobs[cj.id]
                shape, m.intent = m.intent or "success", None
                self.complete(w, cj.id, shape)

    def live_holders(self, key: str) -> int:
        return sum(
            1
            for j in self.jobs.values()
            if j.key == key and j.status == "executing" and j.admitted and not j.lease_expired
        )

    def start(self, w: SimWorker, job_id: int) -> None:
        """The executor takes the entry: admission first (a keyed or rated job), then the
        handler starts (the database learns it at the next beat)."""
        entry = w.held[job_id]
        job = entry.job
        policy = APP.handlers[job.kind].policy
        if admission.request(job, policy, BOUNCE) is None:
            entry.started = True
            return
        m = self.jobs.get(job_id)
        live = self.live_entry(entry)
        if live:
            assert m is not None
            slot_ok = m.key is None or self.live_holders(m.key) < KEY_LIMIT
            rate_ok = m.kind != "rated" or self.meter_free.get("rated", True)
            want = "admitted" if slot_ok and rate_ok else ("slot" if not slot_ok else "rate")
        else:
            want = "lost"
        gate = admission.Admission(
            w.store, lambda kind: APP.handlers[kind].policy, "default", BOUNCE
        )
        verdict = self.run(gate(SimpleNamespace(job=job)))  # type: ignore[arg-type]
        STATS[f"admission {want}"] += 1
        if verdict is None:
            expect(want == "admitted", f"job {job_id}: admitted, the model says {want}")
            assert m is not None
            m.admitted, entry.started = True, True
            if m.kind == "rated":
                self.meter_free["rated"] = False
                self.rate_starts["rated"] += 1
            self.note(m, f"admitted ({w.name})")
            return
        expect(want != "admitted", f"job {job_id}: refused ({verdict.outcome}), model admits")
        # The bounce (or, for a lost row, the hand-back) is written like any completion.
        w.held.pop(job_id)
        applied = self.run(w.store.complete_executions([verdict]))
        if want == "lost":
            expect(applied == set(), f"job {job_id}: a lost admission's hand-back applied")
            return
        assert m is not None
        expect(applied == {job_id}, f"job {job_id}: its bounce did not apply")
        m.attempts -= 1
        self.note(m, f"bounced ({want})")
        status = "cancelled" if m.cancel_requested else "ready"
        self.settle(m, status, due=False)

    @precondition(lambda self: any(not e.started for w in self.workers for e in w.held.values()))
    @rule(worker=st.integers(0, 1), index=st.integers(0, 7))
    def start_rule(self, worker: int, index: int) -> None:
        w = self.workers[worker]
        unstarted = [i for i, e in w.held.items() if not e.started and not e.overdue]
        # An even index looks first at jobs whose key is held live already (the telling
        # case: admission must refuse them).
        contended = [
            i
            for i in unstarted
            if (m := self.jobs.get(i)) is not None and m.key and self.live_holders(m.key)
        ]
        pool = (contended if index % 2 == 0 else []) or unstarted
        if pool:
            self.start(w, sorted(pool)[(index // 2) % len(pool)])

    # ------------------------------------------------------------------ heartbeat

    def heartbeat(self, w: SimWorker) -> None:
        beating = {i: e for i, e in w.held.items() if not e.overdue}
        held = [(i, e.job.execution_id, e.started) for i, e in sorted(beating.items())]
        report = self.run(w.store.heartbeat(held))
        renewed = {job_id for job_id, _ in report.renewed}
        want = {i for i, e in beating.items() if self.live_entry(e)}
        expect(renewed == want, f"{w.name} renewed {sorted(renewed)}, live {sorted(want)}")
        expect(not report.busy, f"{w.name}: rows busy with nobody else writing: {report.busy}")
        for job_id in renewed:
            m = self.jobs[job_id]
            m.lease_expired = False
            m.db_started = m.db_started or w.held[job_id].started
        cancel = {i for i in want if self.jobs[i].cancel_requested}
        expect(
            report.cancel_requested == cancel,
            f"{w.name}: cancel requested {sorted(report.cancel_requested)}, want {sorted(cancel)}",
        )

    @precondition(lambda self: any(w.held for w in self.workers))
    @rule(worker=st.integers(0, 1))
    def heartbeat_rule(self, worker: int) -> None:
        self.heartbeat(self.workers[worker])

    # ------------------------------------------------------------------ completion

    def completion(self, entry: Held, shape: str, signal: str = "go") -> Completion:
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
        if shape == "lease_lost":
            return completions.stopped(job, RETRY_POLICY, Outcome.LEASE_LOST, 0.01)
        if shape == "cancel":
            return completions.cancelled(job, ERROR, 0.01)
        if shape == "stop":
            return completions.interrupted(job, ERROR, 0.01)
        if shape == "signal_wait":
            return completions.wait_for_signal(job, signal, None, 0.01)
        if shape == "children_wait":
            kids = [child_row(APP.handlers["plain"].job(max_attempts=2), i) for i in range(2)]
            return completions.wait_for_children(job, kids, 0.01)
        if shape == "handback":
            return completions.handback(job, 0.0)
        if shape == "bounce":
            return completions.bounce(job, BOUNCE)
        if shape == "fail_unrun":
            return completions.fail_now(job, ERROR, None)
        raise AssertionError(shape)

    def expected_after(self, m: MJob, shape: str, signal: str) -> None:
        """Apply an attempt's ending to the model job ``m`` (its write applied)."""
        charged_fail = shape in ("failure", "retry_now", "retry_later", "timeout", "lease_lost")
        refund = shape in ("stop", "handback", "bounce", "signal_wait", "children_wait")
        due = True
        if shape == "success":
            status = "succeeded"
        elif charged_fail:
            status = "failed" if m.attempts >= m.budget else "ready"
            due = shape == "retry_now"
        elif shape in ("cancel", "fail_unrun"):
            status = "cancelled" if shape == "cancel" else "failed"
        elif shape in ("stop", "handback"):
            status = "ready"
        elif shape == "bounce":
            status, due = "ready", False
        elif shape == "signal_wait":
            status = "ready" if signal in m.signals else "waiting"
        elif shape == "children_wait":
            status = "waiting"
        else:
            raise AssertionError(shape)
        if status in ("ready", "waiting") and m.cancel_requested:
            status = "cancelled"  # an operator's cancel wins over a return to ready or a wait
        if refund:
            m.attempts -= 1
        if shape not in ("handback", "bounce"):
            m.executions += 1
        self.note(m, f"{shape} -> {status}")
        STATS[f"{shape} -> {status}"] += 1
        if status == "waiting":
            m.status, m.holder, m.admitted = "waiting", None, False
            if shape == "signal_wait":
                m.wait, m.awaited = "signal", signal
            else:
                m.wait, m.pending = "children", 2
                kids = self.run(
                    self.bench.conn.fetch(
                        "SELECT id FROM acta.job WHERE parent_id = $1 "
                        "AND parent_execution_id = $2 ORDER BY id",
                        m.id,
                        m.execution_id,
                    )
                )
                expect(len(kids) == 2, f"job {m.id}: {len(kids)} children spawned, not 2")
                for (kid,) in kids:
                    c = MJob(id=kid, kind="plain", budget=2)
                    c.parent, c.parent_execution = m.id, m.execution_id
                    self.note(c, f"spawned by {m.id}")
                    self.jobs[kid] = c
        else:
            self.settle(m, status, due)

    def complete(self, w: SimWorker, job_id: int, shape: str, signal: str = "go") -> None:
        entry = w.held.pop(job_id)
        live = self.live_entry(entry)
        before = self.row(job_id)
        applied = self.run(w.store.complete_executions([self.completion(entry, shape, signal)]))
        STATS[f"{'live' if live else 'stale'} completion"] += 1
        if live:
            expect(applied == {job_id}, f"{w.name}: live {shape} of {job_id} not applied")
            self.expected_after(self.jobs[job_id], shape, signal)
        else:
            expect(applied == set(), f"{w.name}: stale {shape} of job {job_id} applied")
            expect(self.row(job_id) == before, f"stale {shape} of job {job_id} changed its row")

    @precondition(lambda self: any(w.held for w in self.workers))
    @rule(
        worker=st.integers(0, 1),
        index=st.integers(0, 7),
        shape=st.integers(0, 20),
        signal=st.sampled_from(SIGNALS),
    )
    def complete_rule(self, worker: int, index: int, shape: int, signal: str) -> None:
        w = self.workers[worker]
        if not w.held:
            return
        job_id = sorted(w.held)[index % len(w.held)]
        entry = w.held[job_id]
        if entry.overdue:
            shapes: tuple[str, ...] = ("lease_lost",)
        elif entry.started:
            shapes = STARTED_SHAPES
            m = self.jobs.get(job_id)
            if m is not None and m.intent is not None and self.live_entry(entry):
                shapes, m.intent = (m.intent,), None
            elif m is not None and m.lane is not None:
                shapes = tuple(s for s in shapes if s != "children_wait")
        else:
            shapes = UNSTARTED_SHAPES
        self.complete(w, job_id, shapes[shape % len(shapes)], signal)

    def stale_attempts(self) -> list[tuple[SimWorker, ClaimedJob]]:
        return [(w, cj) for w, cj in self.past if not self.live_entry(Held(cj))]

    def rivals(self) -> list[tuple[SimWorker, ClaimedJob]]:
        """Stale attempts of jobs that another attempt runs now: the write a fence is for."""
        return [
            (w, cj)
            for w, cj in self.stale_attempts()
            if cj.id in self.jobs and self.jobs[cj.id].status == "executing"
        ]

    def write_late(self, w: SimWorker, cj: ClaimedJob, shape: int) -> None:
        shapes = STARTED_SHAPES + UNSTARTED_SHAPES
        before = self.row(cj.id)
        completion = self.completion(Held(cj), shapes[shape % len(shapes)])
        applied = self.run(w.store.complete_executions([completion]))
        STATS["late write"] += 1
        expect(applied == set(), f"a late {completion.outcome} of job {cj.id} applied")
        expect(self.row(cj.id) == before, f"a late write of job {cj.id} changed its row")

    @precondition(lambda self: bool(self.stale_attempts()))
    @rule(index=st.integers(0, 31), shape=st.integers(0, 20))
    def late_write(self, index: int, shape: int) -> None:
        """A write of an attempt that no longer owns its row arrives late (a finalizer's
        repeated write whose first answer was lost, a stalled worker's completion): it must
        change nothing, whatever its shape."""
        stale = self.stale_attempts()
        self.write_late(*stale[index % len(stale)], shape)

    @precondition(lambda self: bool(self.rivals()))
    @rule(index=st.integers(0, 31), shape=st.integers(0, 20))
    def late_write_over_a_rival(self, index: int, shape: int) -> None:
        """The same, while another attempt of the job runs: its row is ``executing``."""
        rivals = self.rivals()
        self.write_late(*rivals[index % len(rivals)], shape)

    # ------------------------------------------------------------------ leases and recovery

    def expire(self, m: MJob) -> None:
        self.sql(
            "UPDATE acta.job SET lease_expires_at = now() - interval '1 second' WHERE id = $1",
            m.id,
        )
        m.lease_expired = True
        for w in self.workers:  # the holder's attempt deadline passed before its lease
            entry = w.held.get(m.id)
            if entry is not None and self.live_entry(entry):
                entry.overdue = True

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
            m.suspect = m.suspect or isolate
            m.lost_before = True
            m.executions += 1
            self.note(m, f"recovered by {w.name} -> {status} (charged={was_charged})")
            self.settle(m, status, due=True)
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

    @precondition(lambda self: any(w.held for w in self.workers))
    @rule(worker=st.integers(0, 1))
    def worker_dies(self, worker: int) -> None:
        """The worker's process dies: its registry is lost, and it comes back as a new
        worker (a new id). Its rows keep their leases until they run out."""
        w = self.workers[worker]
        w.held.clear()
        w.store.worker_id = None
        self.run(w.store.register_worker("model", worker + 10, 8, list(KINDS), "model"))

    # ------------------------------------------------------------------ time

    def time_passes(self) -> None:
        """Every ready job comes due (its delay, back-off or bounce elapsed), and every
        rate meter admits again."""
        self.sql(
            "UPDATE acta.job SET run_at = now() - interval '1 millisecond' "
            "WHERE status = 'ready' AND run_at > now()"
        )
        self.sql("UPDATE acta.rate_meter SET next_at = now() - interval '1 millisecond'")
        for m in self.jobs.values():
            if m.status == "ready":
                m.due = True
        self.meter_free = {k: True for k in self.meter_free}
        self.rate_starts.clear()

    @precondition(
        lambda self: (
            any(j.status == "ready" and not j.due for j in self.jobs.values())
            or not all(self.meter_free.values())
        )
    )
    @rule()
    def time_passes_rule(self) -> None:
        self.time_passes()

    # ------------------------------------------------------------------ the operator

    def operator_cancel(self, index: int) -> None:
        m = self.pick(list(self.jobs), index)
        assert m is not None
        outcome = self.operator(lambda s: APP.cancel_sync(s, m.id))
        self.note(m, f"cancel -> {outcome}")
        if m.status in ("ready", "waiting"):
            want = "cancelled"
            m.cancel_requested = True
            self.ended(m, "cancelled")
        elif m.status == "executing":
            want = "requested"
            m.cancel_requested = True
        else:
            want = "finished"
        expect(outcome == want, f"cancel of job {m.id} ({m.status}) answered {outcome}")

    def counted_children(self) -> list[int]:
        """Finished children a waiting parent has counted: retrying or deleting one is
        where a child could be counted twice."""
        return self.ids(
            lambda j: (
                j.terminal
                and j.parent in self.jobs
                and self.jobs[j.parent].wait == "children"
                and self.jobs[j.parent].execution_id == j.parent_execution
            )
        )

    def operator_retry(self, index: int) -> None:
        # An even index looks at the counted children first (the rare, telling case).
        preferred = self.counted_children() if index % 2 == 0 else []
        STATS["retry of a counted child"] += bool(preferred)
        m = self.pick(preferred or self.ids(lambda j: j.terminal), index // 2)
        assert m is not None
        held_by = [
            j.id for j in self.jobs.values() if m.unique and j.unique == m.unique and not j.terminal
        ]
        try:
            done = self.operator(lambda s: APP.retry_sync(s, m.id))
        except UniqueKeyHeld:
            expect(bool(held_by), f"retry of job {m.id} refused: its key is free")
            self.note(m, "retry refused: unique key held")
            return
        expect(not held_by, f"retry of job {m.id} done while {held_by} holds its key")
        expect(done, f"retry of a finished job {m.id} answered False")
        m.attempts, m.due, m.cancel_requested = 0, True, False
        m.status, m.wait = "ready", None
        if m.lane is not None and any(
            j.lane_head for j in self.jobs.values() if j.lane == m.lane and j.id != m.id
        ):
            m.status, m.wait = "waiting", "lane"
        p = self.jobs.get(m.parent) if m.parent is not None else None
        if (
            p is not None
            and p.status == "waiting"
            and p.wait == "children"
            and p.pending > 0
            and p.execution_id == m.parent_execution
        ):
            p.pending += 1
            self.note(p, f"child {m.id} retried ({p.pending} left)")
        self.note(m, f"retried -> {m.status}")

    def operator_signal(self, index: int, name: str) -> None:
        m = self.pick(self.ids(lambda j: not j.terminal), index)
        assert m is not None
        status = self.operator(lambda s: APP.signal_sync(s, m.id, name, {"n": 1}))
        m.signals.add(name)
        self.note(m, f"signal {name} -> {status}")
        if m.status == "waiting" and m.wait == "signal" and m.awaited == name:
            m.status, m.wait, m.awaited, m.due = "ready", None, None, True
            m.resumes += 1
        expect(status == m.status, f"signal of job {m.id} answered {status}, model {m.status}")

    def operator_delete(self, index: int, finished: bool) -> None:
        """The application deletes a job (``session.delete``): a finished one goes; an
        unfinished one is refused (``JobActive``), and a hand-written DELETE of it has a
        cancel's effects (migration 0014)."""
        ids = self.ids(lambda j: j.terminal == finished) or list(self.jobs)
        preferred = self.counted_children() if finished and index % 2 == 0 else []
        STATS["delete of a counted child"] += bool(preferred)
        m = self.pick(preferred or ids, index // 2)
        assert m is not None

        def delete(session: Session) -> None:
            # run_at deferred: a signal wait without a timeout has run_at 'infinity', which
            # psycopg cannot load (tests/db/test_model_findings.py, xfail).
            session.delete(session.get(Job, m.id, options=[defer(Job.run_at)]))

        if m.terminal:
            self.operator(delete)
            del self.jobs[m.id]
            return
        try:
            self.operator(delete)
        except JobActive:
            pass
        else:
            raise ModelViolation(f"session.delete of unfinished job {m.id} was not refused")
        self.sql("DELETE FROM acta.job WHERE id = $1", m.id)
        STATS["deleted unfinished"] += 1
        self.ended(m, "cancelled", deleted=True)

    def reload_definitions(self, worker: int) -> None:
        """The worker reloads the definitions (its heartbeat saw the version move)."""
        w = self.workers[worker]
        defs = self.run(w.store.load_definitions())
        paused = sorted(
            k
            for k in defs.declared.keys() | defs.overrides.keys()
            if {**defs.declared.get(k, {}), **defs.overrides.get(k, {})}.get("paused") is True
        )
        expect(set(paused) == self.paused, f"{w.name} loaded paused {paused}, model {self.paused}")
        w.store.paused = paused
        w.paused = frozenset(paused)

    def operator_pause_kind(self, kind: str, pause: bool) -> None:
        if pause:
            self.operator(lambda s: APP.set_policy_sync(s, kind, paused=True))
            self.paused.add(kind)
        else:
            self.operator(lambda s: resume_kind(s, "default", kind))
            self.paused.discard(kind)

    @precondition(lambda self: bool(self.jobs))
    @rule(
        action=st.sampled_from(("cancel", "retry", "signal", "delete", "pause", "reload")),
        index=st.integers(0, 15),
        name=st.sampled_from(SIGNALS),
        flag=st.booleans(),
        kind=st.sampled_from(KINDS),
        worker=st.integers(0, 1),
    )
    def operator_acts(
        self, action: str, index: int, name: str, flag: bool, kind: str, worker: int
    ) -> None:
        """One operator action: cancel, retry, signal, delete (a finished or an unfinished
        job), pause or resume a kind; or a worker reloading the definitions (its
        heartbeat saw their version move)."""
        if action == "cancel":
            self.operator_cancel(index)
        elif action == "retry" and any(j.terminal for j in self.jobs.values()):
            self.operator_retry(index)
        elif action == "signal" and any(not j.terminal for j in self.jobs.values()):
            self.operator_signal(index, name)
        elif action == "delete":
            self.operator_delete(index, flag)
        elif action == "pause":
            self.operator_pause_kind(kind, flag)
        elif action == "reload":
            self.reload_definitions(worker)

    # ------------------------------------------------------------------ the invariants

    @invariant()
    def check(self) -> None:
        STATS["checks"] += 1
        conn = self.bench.conn
        rows = self.run(
            conn.fetch(
                "SELECT j.id, j.status, j.attempts, j.execution_id, j.worker_id, "
                "j.cancel_requested, j.suspect, j.started_at IS NOT NULL AS started, "
                "j.pending_children, j.awaited_signal, "
                "(SELECT count(*) FROM acta.attempt e WHERE e.job_id = j.id) AS executions, "
                "(SELECT count(*) FROM acta.job c WHERE c.parent_id = j.id "
                "   AND c.parent_execution_id = j.execution_id "
                "   AND c.status NOT IN ('succeeded', 'failed', 'cancelled')) AS unfinished "
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
            where = f"job {job_id} ({'; '.join(m.history[-8:])})"
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
            # Each child counted once: a waiting parent counts exactly its unfinished
            # children of this wait.
            if m.status == "waiting" and m.wait == "children":
                expect(
                    r["pending_children"] == m.pending == r["unfinished"],
                    f"{where}: pending {r['pending_children']}, model {m.pending}, "
                    f"unfinished children {r['unfinished']}",
                )
            # No lost signal: nothing waits for a signal it has received.
            expect(
                not (m.status == "waiting" and m.awaited in m.signals),
                f"{where}: waits for {m.awaited}, received",
            )
            if m.status == "waiting" and m.wait == "signal":
                expect(r["awaited_signal"] == m.awaited, f"{where}: awaits {r['awaited_signal']}")
            # No job held by two live attempts: at most one registry entry owns the row.
            owners = [w.name for w in self.workers if self.live(w, job_id)]
            expect(len(owners) <= 1, f"{where}: held live by {owners}")
            expect(m.resumes <= max(1, m.executions), f"{where}: resumed {m.resumes} times")
        # Never more than k of a key running (live slot holders, in the database).
        slots = self.run(
            conn.fetch(
                "SELECT sl.key, count(*) AS n FROM acta.concurrency_slot sl "
                "JOIN acta.job h ON h.id = sl.job_id AND h.execution_id = sl.execution_id "
                "AND h.status = 'executing' AND h.lease_expires_at > now() GROUP BY sl.key"
            )
        )
        for s in slots:
            expect(s["n"] <= KEY_LIMIT, f"key {s['key']}: {s['n']} live slot holders")
        for key in {j.key for j in self.jobs.values() if j.key}:
            n = self.live_holders(key)
            expect(n <= KEY_LIMIT, f"key {key}: {n} admitted and running")
        # Never more than N starts in a rate window.
        for key, n in self.rate_starts.items():
            expect(n <= RATE_COUNT, f"rate {key}: {n} starts in one window")
        # Lanes: one head at a time; queued jobs wait behind a head.
        lanes = self.run(
            conn.fetch(
                "SELECT lane_key, count(*) FILTER (WHERE status IN ('ready', 'executing') "
                "OR (status = 'waiting' AND (awaited_signal IS NOT NULL "
                "OR pending_children > 0))) AS heads, "
                "count(*) FILTER (WHERE status = 'waiting' AND awaited_signal IS NULL "
                "AND pending_children = 0) AS queued "
                "FROM acta.job WHERE lane_key IS NOT NULL GROUP BY lane_key"
            )
        )
        for lane in lanes:
            expect(lane["heads"] <= 1, f"lane {lane['lane_key']}: {lane['heads']} heads")
            expect(
                lane["queued"] == 0 or lane["heads"] == 1,
                f"lane {lane['lane_key']}: {lane['queued']} queued behind no head",
            )

    # ------------------------------------------------------------------ nothing stranded

    def drain(self) -> None:
        """Run every unfinished job to a terminal state with the protocol's own actions:
        resume the kinds, signal the waiting, recover the held, run the rest to success."""
        w = self.workers[0]
        for kind in list(self.paused):
            self.operator_pause_kind(kind, False)
        for i in range(len(self.workers)):
            self.reload_definitions(i)
        # Each round ends at least one job (a rate admits one start per window).
        for _ in range(len(self.jobs) + 10):
            if all(m.terminal for m in self.jobs.values()):
                return
            for other in self.workers:
                other.held.clear()
            for m in list(self.jobs.values()):
                if m.status == "executing" and not m.lease_expired:
                    self.expire(m)
                if m.status == "waiting" and m.wait == "signal" and m.awaited is not None:
                    self.operator_signal(
                        sorted(self.ids(lambda j: not j.terminal)).index(m.id), m.awaited
                    )
            self.recover(w)
            self.time_passes()
            self.check()
            while True:
                claimed = self.claim(w, 10)
                if not claimed:
                    break
                for cj in claimed:
                    self.start(w, cj.id)
                self.heartbeat(w)
                for cj in claimed:
                    if cj.id in w.held:
                        # A parent's or a signal wait's first run waits, as its handler does.
                        m = self.jobs[cj.id]
                        shape, m.intent = m.intent or "success", None
                        self.complete(w, cj.id, shape)
                self.check()
        stuck = {m.id: m.history[-6:] for m in self.jobs.values() if not m.terminal}
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


def count_rules() -> None:
    """Count each rule's runs in STATS (``ACTA_MODEL_STATS=1``)."""
    for name, attr in vars(ProtocolMachine).items():
        marked = getattr(attr, "hypothesis_stateful_rule", None)
        if marked is not None and not getattr(marked.function, "counted", False):

            @functools.wraps(marked.function)
            def counted(*args: Any, _f: Any = marked.function, _n: str = name, **kw: Any) -> Any:
                STATS[f"rule {_n}"] += 1
                return _f(*args, **kw)

            counted.counted = True  # type: ignore[attr-defined]
            object.__setattr__(marked, "function", counted)


__all__ = ["Bench", "ProtocolMachine", "machine_for"]
