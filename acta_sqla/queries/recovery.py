"""The recovery pass: expired leases, dead workers, pruning of finished jobs.

Each builder returns SQL text with asyncpg ``$n`` parameters for one schema; ``WorkerSQL``
renders them once per worker. No SQLAlchemy here."""

from __future__ import annotations

from ..values import Outcome
from . import complete
from ._render import ACTIVE, TERMINAL, quote


def select_expired(schema: str) -> str:
    """Recovery, step 1a: up to $2 rows of namespace $1 whose lease ran out, oldest first,
    with what Python needs to decide their completion (``ExpiredLease``'s columns, in its
    order): attempts, the budget inputs, whether the attempt is known to have started,
    whether it was claimed alone (the job was a suspect: the claim never batches one with
    others), and whether the job was lost before. SKIP LOCKED: a row its worker is
    writing right now is left to that write. No decision here: ``worker/completions.py``
    makes it, and :func:`finish_expired` applies it."""
    s = quote(schema)
    return f"""
        SELECT j.id, j.execution_id, j.attempts, j.max_attempts,
               (d.overrides->>'max_attempts')::int AS override_max_attempts,
               (d.declared->>'max_attempts')::int AS declared_max_attempts,
               j.started_at IS NOT NULL AS started,
               j.suspect AS alone,
               EXISTS (
                   SELECT 1 FROM {s}.execution e
                   WHERE e.job_id = j.id AND e.outcome = '{Outcome.LOST.value}'
               ) AS lost_before,
               j.worker_id
        FROM {s}.job j
        LEFT JOIN {s}.definition d ON d.namespace = j.namespace AND d.kind = j.kind
        WHERE j.namespace = $1 AND j.status = 'executing' AND j.lease_expires_at < now()
        ORDER BY j.lease_expires_at
        LIMIT $2
        FOR UPDATE OF j SKIP LOCKED"""


def finish_expired(schema: str) -> str:
    """Recovery, step 1b: the completions Python built for the expired rows, applied by the
    same parts as complete_executions (so the same terminal effects follow); the jobs of
    $4 (ids Python decided to isolate) become suspects in the same fenced write, so no
    claim can take one between its loss and its mark, and the flag never changes during
    an attempt (recovery reads it as "this attempt was claimed alone"). Guard: the fenced
    finish's (job, execution, 'executing'), plus the lease still expired, so a row renewed
    since step 1a (its worker was only slow) is left alone."""
    return complete.compose(
        schema,
        extra_guard=complete.LEASE_STILL_EXPIRED,
        extra_set="suspect = j.suspect OR j.id = ANY ($4::bigint[])",
    )


def mark_dead_workers(schema: str) -> str:
    """Recovery, step 2: workers silent for 7 of their own beats are dead (each row keeps its
    worker's interval: a namespace may mix settings); their locks and concurrency slots
    are freed."""
    s = quote(schema)
    return f"""
        WITH dead AS (
            UPDATE {s}.worker SET status = 'dead', stopped_at = now()
            WHERE namespace = $1 AND status = 'running'
              AND heartbeat_at < now() - make_interval(secs => $2 * heartbeat_seconds)
            RETURNING id
        ),
        locks AS (
            DELETE FROM {s}.lock WHERE worker_id IN (SELECT id FROM dead) RETURNING 1
        ),
        slots AS (
            DELETE FROM {s}.concurrency_slot WHERE worker_id IN (SELECT id FROM dead)
            RETURNING 1
        )
        SELECT id FROM dead"""


def prune_finished(schema: str) -> str:
    """Recovery, step 3: finished jobs past their kind's retention, one bounded chunk of $2
    rows of namespace $1 ($3: the default retention, for kinds whose definition names none
    and kinds without a definition).

    Its cost is what it deletes, not the history it keeps. Retention is per kind, so one
    cutoff on the namespace's finish times cannot find the rows due: comparing each row with
    its own kind's cutoff read every finished row (1.85 s per pass at 1M rows, to delete
    nothing). Instead, on ``job_prune_idx`` (namespace, kind, finished_at; terminal rows):
    ``kinds`` walks the distinct kinds of finished rows, one index descent each (a kind
    without a definition has rows, so it is found too); each kind's cutoff comes from its
    definition; each kind's due rows are the front of its range, read oldest first and
    stopping at the first row inside retention. The outer LIMIT stops the walk once the
    chunk is full, so a chunk deletes kind by kind (name order), oldest first within one.
    Retention null (keep forever) gives no cutoff, and the kind's range is never read.

    FOR UPDATE SKIP LOCKED: a row being retried or written right now is left to the next
    pass (its status and finish time are checked again once locked). The jobs' execution
    rows go with them. A finished child whose parent has not ended (it waits for its other
    children, or runs on) is kept, whatever its age, so the parent's next run sees every
    child; such rows are read again by each pass until the parent ends."""
    s = quote(schema)
    return f"""
        WITH RECURSIVE kinds AS (
            (SELECT j.kind FROM {s}.job j
             WHERE j.namespace = $1 AND j.status IN {TERMINAL}
             ORDER BY j.kind LIMIT 1)
            UNION ALL
            SELECT (SELECT j.kind FROM {s}.job j
                    WHERE j.namespace = $1 AND j.status IN {TERMINAL} AND j.kind > k.kind
                    ORDER BY j.kind LIMIT 1)
            FROM kinds k WHERE k.kind IS NOT NULL
        ),
        cutoffs AS (
            -- retention null keeps a kind's jobs forever (no cutoff); absent means the
            -- default $3
            SELECT k.kind, now() - make_interval(secs => CASE
                       WHEN r.eff IS NULL THEN $3
                       WHEN jsonb_typeof(r.eff) = 'number' THEN r.eff::float8
                   END) AS cutoff
            FROM kinds k
            LEFT JOIN {s}.definition d ON d.namespace = $1 AND d.kind = k.kind
            CROSS JOIN LATERAL (
                SELECT coalesce(d.overrides -> 'retention', d.declared -> 'retention') AS eff
            ) r
            WHERE k.kind IS NOT NULL
        ),
        doomed AS (
            SELECT due.id FROM cutoffs c
            CROSS JOIN LATERAL (
                SELECT j.id FROM {s}.job j
                WHERE j.namespace = $1 AND j.kind = c.kind
                  AND j.status IN {TERMINAL}
                  AND j.finished_at < c.cutoff
                  -- A child whose parent has not ended stays: the parent's next run reads
                  -- it (ctx.children). A scalar subquery, so its parent is looked up by
                  -- primary key per child, never hashed from a scan of the active jobs.
                  AND (j.parent_id IS NULL
                       OR coalesce((SELECT p.status FROM {s}.job AS p
                                    WHERE p.id = j.parent_id), 'gone') NOT IN {ACTIVE})
                ORDER BY j.finished_at
                LIMIT $2
                FOR UPDATE OF j SKIP LOCKED
            ) due
            LIMIT $2
        ),
        -- = ANY(ARRAY(...)): each row by its primary key, whatever the table's size. With
        -- IN (SELECT ...) the planner, expecting a full chunk, may hash-join a sequential
        -- scan of the history instead (it did below ~10k rows).
        gone AS (
            DELETE FROM {s}.job WHERE id = ANY(ARRAY(SELECT id FROM doomed)) RETURNING id
        ),
        history AS (
            DELETE FROM {s}.execution WHERE job_id = ANY(ARRAY(SELECT id FROM gone))
            RETURNING 1
        )
        SELECT count(*) FROM gone"""
