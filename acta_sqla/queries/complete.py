"""complete_executions: ONE statement writes every completion of a batch, whatever its shape.

The statement is composed from named parts, each a CTE with its guard said beside it:

* :data:`INPUT` (``c``): the batch's core fields, one row per completion;
* :data:`FEATURE_INPUT` (``f``): the sparse feature input, keyed by job id;
* :func:`fenced_finish` (``done``): applies each completion to its job, fenced by
  (job, execution) and status ``executing``;
* :func:`history` (``history``): the attempt's Execution row;
* then one part per feature (:data:`FEATURE_PARTS`), each reading ``f`` joined to ``done``.

Effects that must happen on EVERY way out of ``executing`` or into a terminal state (free
the attempt's concurrency slots, hand a lane on, tell a waiting parent) are NOT parts of
this statement: the ``job_terminal_effects`` trigger (queries/schema.sql) runs them for this
statement, for recovery and for the session's cancel alike.

Python makes every decision (``worker/completions.py``); this statement only applies it.
Each builder returns SQL text with asyncpg ``$n`` parameters for one schema; ``WorkerSQL``
renders them once per worker. No SQLAlchemy here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import NamedTuple

from ..values import CORE_FIELDS, Completion
from ._render import TERMINAL, quote
from .schedules import (
    FIRE_COLUMNS,
    FIRE_VALUES,
    cancelled_unstarted,
    revive_on_conflict,
    share_schedules,
)

NEXT_SCHEDULES = (
    "SELECT f.features->'next'->>'namespace', f.features->'next'->>'schedule' FROM f"
    " WHERE f.features ? 'next'"
)
"""The (namespace, name) of every schedule whose fire the batch completes."""

# ------------------------------------------------------------------------------ input

CORE: tuple[tuple[str, str], ...] = (
    ("job_id", "bigint"),
    ("execution_id", "bigint"),
    ("outcome", "text"),
    ("status", "text"),
    ("attempt", "int"),
    ("delay", "float8"),
    ("refund", "bool"),
    ("result_json", "text"),
    ("error_type", "text"),
    ("error_message", "text"),
    ("traceback", "text"),
    ("ran_seconds", "float8"),
    ("record", "bool"),
    ("cancel_wins", "bool"),
    ("keep_last_error", "bool"),
    ("ran_by", "bigint"),
    ("awaited_signal", "text"),
    ("children", "int"),
)
"""The core fields, in the order of ``Completion``'s fields (a unit test holds them equal):
the positions ``e->>0 …`` are rendered from this list, never written by hand."""


NO_FEATURES = "{}"
"""``$3`` of a batch none of whose completions carries a feature: such a batch is written by
:func:`complete_plain`."""


def encode(batch: Sequence[Completion]) -> tuple[str, str]:
    """The statement's two inputs: ``$1`` the core array (one JSON array per completion,
    ``Completion``'s core fields in order) and ``$3`` the sparse features, keyed by job id
    (``{}`` when no completion carries any).

    One text parameter encodes in a fraction of the time of a dozen typed arrays
    (json.dumps writes each NamedTuple as an array, in C), and a string the server cannot
    store (a lone surrogate) is a data error of this statement, never a client-side one."""
    core = json.dumps([c[:CORE_FIELDS] for c in batch])
    features = {c.job_id: c.features for c in batch if c.features}
    return core, json.dumps(features) if features else NO_FEATURES


_COLUMNS = ",\n                   ".join(
    f"(e->>{i})::{t} AS {name}" for i, (name, t) in enumerate(CORE)
)
INPUT = f"""c AS (
            SELECT {_COLUMNS}
            FROM jsonb_array_elements($1::jsonb) AS e
        )"""
"""``c``: one row per completion of the batch. Guard: none (input only)."""

FEATURE_INPUT = "f AS (SELECT key::bigint AS job_id, value AS features FROM jsonb_each($3::jsonb))"
"""``f``: the feature input of the completions that carry one. Guard: none (input only);
PostgreSQL does not evaluate it unless a feature part reads it, so a plain batch pays
nothing for it."""

# ------------------------------------------------------------------------------ the finish

LEASE_STILL_EXPIRED = "AND (j.lease_expires_at < now()) IS TRUE"
"""Recovery's extra guard: a row whose lease was renewed since recovery read it (its worker
was only slow) is left alone. Written as a boolean test, which no index can answer, so the
planner checks it on each row found by primary key instead of scanning the lease index
and hashing it against the batch (tests/db/test_worker_sql.py checks the plan)."""


SATISFIED = "(c.awaited_signal IS NOT NULL AND coalesce(j.signals ? c.awaited_signal, false))"
"""A signal wait whose signal the job already received (while it was ready or executing):
the job goes ``ready`` at once instead of waiting. Read from the row the finish locked, so
a signal committed while the completion waited for the row lock is seen (no lost signal)."""


ENDS_JOB = f"""(c.record AND NOT c.refund AND c.attempt = j.attempts
                 AND (c.status IN {TERMINAL} OR (c.cancel_wins AND j.cancel_requested)))"""
"""The attempt ends the job and is charged: its facts are kept on the job row (``outcome``,
``attempt_error``, ``worker_id``, ``started_at`` beside the row's execution id, attempt
count, claim and finish times: migration 0015) and no Execution row is written for it. The
``acta.attempt`` view reads them back as the job's last attempt. An uncharged attempt that
ends the job (an operator's cancel winning over a hand-back) keeps its Execution row: the
row's attempt count no longer names it."""


def fenced_finish(schema: str, extra_guard: str = "", extra_set: str = "") -> str:
    """``done``: each completion applied to its job. Guard: the row must still be
    'executing' under the same execution id, so a repeated or late write (another worker
    took the row, recovery reclaimed it, or this write landed already) matches nothing
    and is reported as lease lost, never applied twice. ``extra_guard`` adds a condition
    (recovery: :data:`LEASE_STILL_EXPIRED`); ``extra_set`` one more assignment, applied in
    the same fenced write (recovery: a lost job becomes a suspect)."""
    s = quote(schema)
    more = f",\n                {extra_set}" if extra_set else ""
    return f"""done AS (
            UPDATE {s}.job AS j SET
                -- c.cancel_wins: Python's rule (an operator's cancel wins over a retry);
                -- the row's cancel_requested is only known here.
                status = CASE WHEN c.cancel_wins AND j.cancel_requested THEN 'cancelled'
                              WHEN {SATISFIED} THEN 'ready'
                              ELSE c.status END,
                attempts = CASE WHEN c.refund THEN j.attempts - 1 ELSE j.attempts END,
                run_at = CASE WHEN c.status = 'ready'
                              THEN now() + make_interval(secs => c.delay)
                              WHEN c.status <> 'waiting' OR c.awaited_signal IS NULL
                              THEN j.run_at
                              WHEN {SATISFIED} THEN now()
                              WHEN c.delay IS NULL THEN 'infinity'
                              ELSE now() + make_interval(secs => c.delay) END,
                result = CASE WHEN c.status = 'succeeded' THEN c.result_json::jsonb
                              ELSE j.result END,
                -- An operator's cancel record (who, why: session.cancel) stays with it.
                last_error = CASE WHEN c.error_type IS NULL OR c.keep_last_error
                                  THEN j.last_error
                                  ELSE jsonb_build_object('type', c.error_type,
                                                          'message', c.error_message)
                                       || CASE WHEN j.cancel_requested
                                                    AND j.last_error -> 'cancel' IS NOT NULL
                                               THEN jsonb_build_object(
                                                   'cancel', j.last_error -> 'cancel')
                                               ELSE '{{}}'::jsonb END END,
                finished_at = CASE WHEN c.status IN {TERMINAL}
                                     OR (c.cancel_wins AND j.cancel_requested)
                                   THEN now() END,
                -- A durable wait (docs/waits.md): what it waits for, and why it next runs.
                awaited_signal = CASE WHEN c.status = 'waiting' AND NOT {SATISFIED}
                                           AND NOT (c.cancel_wins AND j.cancel_requested)
                                      THEN c.awaited_signal END,
                pending_children = CASE WHEN c.children IS NULL
                                             OR (c.cancel_wins AND j.cancel_requested)
                                        THEN j.pending_children ELSE c.children END,
                resumed = CASE WHEN c.status <> 'waiting' THEN j.resumed
                               WHEN {SATISFIED} THEN 'signal' END,
                -- The attempt that ends the job is kept on its row, not in an Execution
                -- row (migration 0015): its outcome, error, worker and start.
                outcome = CASE WHEN {ENDS_JOB} THEN c.outcome END,
                attempt_error = CASE WHEN {ENDS_JOB} AND c.error_type IS NOT NULL
                                     THEN jsonb_build_object('type', c.error_type,
                                                             'message', c.error_message,
                                                             'traceback', c.traceback) END,
                started_at = CASE WHEN {ENDS_JOB} AND c.ran_seconds IS NOT NULL
                                  THEN now() - make_interval(secs => c.ran_seconds)
                                  ELSE j.started_at END,
                worker_id = CASE WHEN {ENDS_JOB} THEN coalesce(c.ran_by, $2) END,
                lease_expires_at = NULL{more}
            FROM c
            -- Each row is looked up by primary key (id = ANY of the batch's ids): the
            -- planner must never scan the executing set, whose statistics are stale
            -- and whose index entries grow dead with every drained row.
            WHERE j.id = ANY (ARRAY(SELECT c.job_id FROM c))
              AND j.id = c.job_id AND j.execution_id = c.execution_id
              AND j.status = 'executing' {extra_guard}
            RETURNING j.id, j.status, j.claimed_at, j.started_at, c.execution_id, c.attempt,
                      c.ran_seconds, c.outcome, c.error_type, c.error_message, c.traceback,
                      c.record AND j.outcome IS NULL AS record, c.ran_by
        )"""


def history(schema: str) -> str:
    """``history``: the attempt's Execution row, dated from how long the handler ran (or,
    when it never ran here, from the row's own start: recovery). Guard: only rows the
    fenced finish applied, and only real attempts (``record``: not hand-backs) that did
    not end the job (:data:`ENDS_JOB`: the finish kept that one on the job row, and
    ``done.record`` is false for it)."""
    s = quote(schema)
    return f"""history AS (
            INSERT INTO {s}.execution AS e (id, job_id, attempt, worker_id, claimed_at,
                started_at, finished_at, outcome, error_type, error_message, traceback)
            SELECT d.execution_id, d.id, d.attempt, coalesce(d.ran_by, $2), d.claimed_at,
                   CASE WHEN d.ran_seconds IS NULL THEN d.started_at
                        ELSE now() - make_interval(secs => d.ran_seconds) END,
                   now(), d.outcome, d.error_type, d.error_message, d.traceback
            FROM done AS d
            WHERE d.record
        )"""


# ------------------------------------------------------------------------------ features


class FeaturePart(NamedTuple):
    """One feature's part of the statement: a CTE named ``name`` whose body ``build(schema)``
    returns. It reads its input from ``f`` (``f.features->'<feature>'``) and must join
    ``done`` (``JOIN done d ON d.id = f.job_id``), so it acts only on rows the fenced finish
    applied. It must not UPDATE ``job`` (the finish already did: a row updated twice in one
    statement keeps only one of the writes)."""

    name: str
    build: Callable[[str], str]
    """The CTE's body for one schema."""


def spawn_children(schema: str) -> str:
    """``spawn``: the children of a parent that returned ``WaitForChildren``, inserted in
    spawn order with ``parent_id`` and ``parent_execution_id`` set (the wait's attempt: a
    child counts toward that wait only, migration 0012), in the same statement that parks
    the parent with their count (``Completion.children``). Guard: only for a parent the
    fenced finish applied AND left ``waiting`` (a cancel that won spawns nothing). Input:
    ``f.features->'children'``, one object per child (``waits.child_row``)."""
    s = quote(schema)
    return f"""
            INSERT INTO {s}.job (namespace, kind, args, priority, run_at, max_attempts,
                                 concurrency_key, rate_key, lane_key, parent_id,
                                 parent_execution_id)
            SELECT x.v->>'namespace', x.v->>'kind', x.v->'args',
                   coalesce((x.v->>'priority')::smallint, 0),
                   coalesce((x.v->>'run_at')::timestamptz,
                            now() + make_interval(secs => coalesce((x.v->>'delay')::float8, 0))),
                   (x.v->>'max_attempts')::int, x.v->>'concurrency_key', x.v->>'rate_key',
                   x.v->>'lane_key', d.id, d.execution_id
            FROM f
            JOIN done AS d ON d.id = f.job_id AND d.status = 'waiting'
            CROSS JOIN LATERAL jsonb_array_elements(f.features->'children')
                WITH ORDINALITY AS x(v, ord)
            ORDER BY d.id, x.ord"""


def next_fire(schema: str) -> str:
    """``next_fire``: the fire that follows a schedule's fire, enqueued by the fire's
    completion in the same statement, so a fire and its successor commit together (a fire
    that fails still schedules the next tick). Input: ``f.features->'next'`` (namespace,
    schedule, this fire's tick ``after``, the next ``tick``: ``schedules.successor_feature``).
    Guard: only for a fire the fenced finish applied, only while the schedule is stored and
    enabled, and only by the fire's FIRST completion (no fire of the schedule after this
    one's tick exists yet: a retried fire's later completions enqueue nothing); the tick's
    unique key (``job_schedule_tick_key``) makes a second insert of a tick a no-op (I10),
    unless the tick's row is a fire cancelled before it started: made ready again
    (``schedules.revive_on_conflict``; such a fire, of a later tick, does not count as a
    later fire either: a cron changed while paused). The fire takes the schedule's stored
    priority and keys (``schedules.FIRE``).

    The schedule's row is read ``FOR SHARE`` (:data:`schedules.SHARE_SCHEDULES`): a pause
    or a worker's drop of the schedule takes that row first (``schedules.pause``,
    ``store_schedules``), so the two serialise. A pause that committed first is seen here
    (the row is re-read after its lock: not enabled, no successor); a completion that
    locked first commits its successor before the pause's cancel reads the fires, which
    then cancels it. Without the lock, a completion whose snapshot predated the pause
    enqueued one more fire after the pause (23 of 240 pauses; I10)."""
    s = quote(schema)
    return f"""
            INSERT INTO {s}.job AS nf (namespace, kind, args, run_at, schedule_name,
                                       scheduled_at, {FIRE_COLUMNS})
            -- One row per tick: a second proposal of a tick in one statement would be an
            -- error under ON CONFLICT DO UPDATE (one chain per schedule makes it moot).
            SELECT DISTINCT ON (sc.name, (f.features->'next'->>'tick')::timestamptz)
                   sc.namespace, sc.kind, sc.args, (f.features->'next'->>'tick')::timestamptz,
                   sc.name, (f.features->'next'->>'tick')::timestamptz, {FIRE_VALUES}
            FROM f
            JOIN done AS d ON d.id = f.job_id
            JOIN ({share_schedules(schema, NEXT_SCHEDULES)}) AS sc
              ON sc.namespace = f.features->'next'->>'namespace'
             AND sc.name = f.features->'next'->>'schedule'
            WHERE NOT EXISTS (
                SELECT 1 FROM {s}.job AS later
                WHERE later.namespace = sc.namespace AND later.schedule_name = sc.name
                  AND later.scheduled_at > (f.features->'next'->>'after')::timestamptz
                  AND NOT {cancelled_unstarted("later")}
            )
            {revive_on_conflict("nf")}"""


FEATURE_PARTS: tuple[FeaturePart, ...] = (
    FeaturePart("spawn", spawn_children),
    FeaturePart("next_fire", next_fire),
)
"""The features the statement applies, in order: the children a parent waits for, a
schedule's next fire. (A signal
wait needs no part: the finish itself parks the job, reading the row's ``signals``.) A
lane's hand-on and a child telling its parent are not parts: they must follow every way to
a terminal state, so they are terminal effects (the trigger, queries/schema.sql)."""


# ------------------------------------------------------------------------------ the statement


def compose(
    schema: str,
    extra_guard: str = "",
    features: Sequence[FeaturePart] = FEATURE_PARTS,
    extra_set: str = "",
) -> str:
    """The parts in order, as ONE statement: ``$1`` core input, ``$2`` the writing worker,
    ``$3`` features. Answers (id, status) of every job the finish applied."""
    parts = [
        INPUT,
        FEATURE_INPUT,
        fenced_finish(schema, extra_guard, extra_set),
        history(schema),
    ]
    parts += [f"{p.name} AS ({p.build(schema)})" for p in features]
    return "\n        WITH " + ",\n        ".join(parts) + "\n        SELECT id, status FROM done"


def complete_executions(schema: str) -> str:
    """complete_executions: ONE statement writes every completion of a batch, whatever its
    shape (see the module's parts). Guard: (job, execution) and status 'executing'."""
    return compose(schema)


def complete_plain(schema: str) -> str:
    """``complete_executions`` without the feature parts, for a batch none of whose
    completions carries a feature (``$3`` is ``{}``): the parts would find nothing to do,
    but each INSERT part is still planned and opened on every call. Same inputs, same
    guard, same answer; the worker picks it by the encoded features (``WorkerStore``)."""
    return compose(schema, features=())
