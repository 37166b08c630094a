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


# ------------------------------------------------------------ repairs (I11, I16)
#
# What older code, or a hand-written DELETE with triggers disabled, can leave behind: a
# parent counting children that no longer exist, a lane with no head. Since migration
# 0014 a DELETE of an unfinished job applies a cancel's effects and ``session.delete``
# refuses one, so these normally find nothing; each is one probe of a partial index.

_THIS_WAIT = "(c.parent_execution_id IS NULL OR c.parent_execution_id = p.execution_id)"
"""Child ``c`` belongs to the wait parent ``p`` is in (migration 0012's rule)."""


def _unfinished_children(s: str) -> str:
    """The unfinished children of parent ``p``'s wait: what its count must equal."""
    return f"""(SELECT count(*) FROM {s}.job AS c
                WHERE c.parent_id = p.id AND c.status IN {ACTIVE} AND {_THIS_WAIT})"""


def stranded_parents(schema: str) -> str:
    """Repair, step 1a: up to $2 parents of namespace $1 waiting for more children than
    they have unfinished (a child deleted without its terminal effects): their ids. By
    ``job_children_wait_idx``; each parent's children by ``job_parent_idx``. No lock: a
    snapshot shows a child's end and its parent's count together (one statement writes
    both), so what it finds is real; :func:`recount_parents` decides under the lock."""
    s = quote(schema)
    return f"""
        SELECT p.id FROM {s}.job AS p
        WHERE p.namespace = $1 AND p.status = 'waiting' AND p.pending_children > 0
          AND p.pending_children > {_unfinished_children(s)}
        ORDER BY p.id
        LIMIT $2"""


def lock_parents(schema: str) -> str:
    """Repair, step 1b (first statement of one transaction): the parents $1 still waiting
    for children, locked. A child's end decrements its parent under this row lock, so once
    it is held no child of these parents ends until the transaction does, and the next
    statement's snapshot (a new one) counts exactly what the count must say."""
    s = quote(schema)
    return f"""
        SELECT id FROM {s}.job
        WHERE id = ANY ($1::bigint[]) AND status = 'waiting' AND pending_children > 0
        ORDER BY id
        FOR UPDATE SKIP LOCKED"""


def recount_parents(schema: str) -> str:
    """Repair, step 1c (second statement, same transaction): each parent of $1 whose count
    exceeds its unfinished children gets the number of them; one with none left becomes
    ``ready``, told ``resumed = 'children'`` (the NOTIFY trigger wakes a worker), as the
    last child's end would have made it. A child ending while the lock is held waits and
    then applies its decrement to the new count. (id, new count, status)."""
    s = quote(schema)
    return f"""
        WITH counted AS (
            SELECT p.id, {_unfinished_children(s)} AS pending
            FROM {s}.job AS p WHERE p.id = ANY ($1::bigint[])
        )
        UPDATE {s}.job AS j SET
            pending_children = c.pending,
            status = CASE WHEN c.pending = 0 THEN 'ready' ELSE j.status END,
            run_at = CASE WHEN c.pending = 0 THEN now() ELSE j.run_at END,
            resumed = CASE WHEN c.pending = 0 THEN 'children' ELSE j.resumed END
        FROM counted AS c
        WHERE j.id = c.id AND j.status = 'waiting' AND j.pending_children > c.pending
        RETURNING j.id, j.pending_children, j.status"""


def _is_head(alias: str) -> str:
    """A lane's head: its unfinished job that is not queued behind another (it is ready or
    executing, or in a durable wait of its own)."""
    a = alias
    return (
        f"{a}.status IN {ACTIVE} AND ({a}.status <> 'waiting' "
        f"OR {a}.awaited_signal IS NOT NULL OR {a}.pending_children > 0)"
    )


def headless_lanes(schema: str) -> str:
    """Repair, step 2a: up to $2 lanes of namespace $1 with jobs queued and no head (it was
    deleted without its terminal effects). ``lanes`` walks the distinct lanes that have
    waiting jobs on ``job_lane_waiting_idx``, one index descent each; each lane's head is
    looked for on ``job_lane_idx``."""
    s = quote(schema)
    return f"""
        WITH RECURSIVE lanes AS (
            (SELECT j.lane_key FROM {s}.job AS j
             WHERE j.namespace = $1 AND j.status = 'waiting' AND j.lane_key IS NOT NULL
             ORDER BY j.lane_key LIMIT 1)
            UNION ALL
            SELECT (SELECT j.lane_key FROM {s}.job AS j
                    WHERE j.namespace = $1 AND j.status = 'waiting'
                      AND j.lane_key IS NOT NULL AND j.lane_key > l.lane_key
                    ORDER BY j.lane_key LIMIT 1)
            FROM lanes AS l WHERE l.lane_key IS NOT NULL
        )
        SELECT l.lane_key FROM lanes AS l
        WHERE l.lane_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM {s}.job AS h
            WHERE h.namespace = $1 AND h.lane_key = l.lane_key AND {_is_head("h")}
        )
        LIMIT $2"""


def lock_lane(schema: str) -> str:
    """Repair, step 2b (first statement of one transaction): lane $2 of namespace $1, by
    the advisory lock its enqueue and its hand-on take (migration 0006)."""
    return (
        "SELECT pg_advisory_xact_lock(hashtextextended("
        "'acta.lane' || chr(31) || $1 || chr(31) || $2, 0))"
    )


def promote_lane(schema: str) -> str:
    """Repair, step 2c (second statement, same transaction, a new snapshot under the lane's
    lock): if lane $2 of namespace $1 still has no head, its oldest queued job becomes
    ``ready``, as the hand-on does. The promoted job's id."""
    s = quote(schema)
    return f"""
        UPDATE {s}.job SET status = 'ready', run_at = greatest(run_at, now())
        WHERE id = (
            SELECT j.id FROM {s}.job AS j
            WHERE j.namespace = $1 AND j.lane_key = $2 AND j.status = 'waiting'
            ORDER BY j.id LIMIT 1
        )
          AND status = 'waiting'
          AND NOT EXISTS (
              SELECT 1 FROM {s}.job AS h
              WHERE h.namespace = $1 AND h.lane_key = $2 AND {_is_head("h")}
          )
        RETURNING id"""


DEADLOCK_ERROR = "DeadlockDetected"
"""``errors.DeadlockDetected.__name__``: the type recorded in a victim's ``last_error``."""


def fail_deadlocked(schema: str) -> str:
    """Repair, step 3: cycles in the wait-for graph of namespace $1, one waiting parent of
    each failed with ``DeadlockDetected`` (docs/waits.md).

    The graph: a parent waiting for children waits for each unfinished child of its wait;
    a job queued in a lane waits for the lane's head. Parent edges alone form trees, so a
    cycle passes through a queued job whose parent waits for it. ``queued``: those jobs
    (``job_lane_waiting_idx``; normally none). ``heads``: each of their lanes' head, when
    it waits for children (a head that runs or waits for a signal can still move). ``up``:
    each queued job's waiting ancestors, by primary key up the chain, each waiting for
    the one below. A queued job q waits, through its lane's head h, for every queued job
    q2 that has h among its ancestors: ``edges`` (q, q2). ``reach``: the closure of those
    edges (UNION: each pair once, so it ends). A queued job that reaches itself is on a
    cycle; the queued jobs reaching each other are one knot, and its victim is the
    youngest (highest id) parent of one of them: that parent fails, its lane (if any)
    hands on, and the cycle is open.

    Guard: the victim still waits for children in the attempt seen (its execution id).
    Its ``pending_children`` becomes 0, as a cancel's does (the terminal-effects trigger
    reads the old value to hand its lane on); its children run on, as a failed parent's
    do. (victim, its queued child, that child's lane, the lane's head)."""
    s = quote(schema)
    return f"""
        WITH RECURSIVE queued AS MATERIALIZED (
            SELECT q.id, q.lane_key, q.parent_id
            FROM {s}.job AS q JOIN {s}.job AS p ON p.id = q.parent_id
            WHERE q.namespace = $1 AND q.status = 'waiting' AND q.lane_key IS NOT NULL
              AND q.awaited_signal IS NULL AND q.pending_children = 0
              AND p.status = 'waiting' AND p.pending_children > 0
              AND (q.parent_execution_id IS NULL OR q.parent_execution_id = p.execution_id)
        ),
        heads AS MATERIALIZED (
            SELECT l.lane_key, h.id
            FROM (SELECT DISTINCT lane_key FROM queued) AS l
            CROSS JOIN LATERAL (
                SELECT j.id FROM {s}.job AS j
                WHERE j.namespace = $1 AND j.lane_key = l.lane_key AND j.status = 'waiting'
                  AND j.pending_children > 0
                ORDER BY j.id LIMIT 1
            ) AS h
        ),
        up (q, a, depth) AS (
            SELECT q.id, q.parent_id, 1 FROM queued AS q
            UNION ALL
            SELECT up.q, p.id, up.depth + 1
            FROM up
            JOIN {s}.job AS c ON c.id = up.a
            JOIN {s}.job AS p ON p.id = c.parent_id
            WHERE p.status = 'waiting' AND p.pending_children > 0 AND {_THIS_WAIT}
              AND up.depth < 1000
        ),
        edges AS MATERIALIZED (
            SELECT DISTINCT q.id AS src, up.q AS dst
            FROM queued AS q
            JOIN heads AS h ON h.lane_key = q.lane_key
            JOIN up ON up.a = h.id
        ),
        reach (src, dst) AS (
            SELECT src, dst FROM edges
            UNION
            SELECT r.src, e.dst FROM reach AS r JOIN edges AS e ON e.src = r.dst
        ),
        knots AS (
            -- each queued job on a cycle, with the youngest parent of its knot
            SELECT r1.src AS member, max(q2.parent_id) AS victim
            FROM reach AS r1
            JOIN reach AS r2 ON r2.src = r1.dst AND r2.dst = r1.src
            JOIN queued AS q2 ON q2.id = r1.dst
            GROUP BY r1.src
        ),
        victims AS (
            SELECT DISTINCT ON (k.victim) k.victim AS id, q.id AS child, q.lane_key,
                   h.id AS head
            FROM knots AS k
            JOIN queued AS q ON q.id = k.member AND q.parent_id = k.victim
            JOIN heads AS h ON h.lane_key = q.lane_key
            ORDER BY k.victim, q.id
        ),
        seen AS (
            SELECT v.*, j.execution_id FROM victims AS v JOIN {s}.job AS j ON j.id = v.id
        )
        UPDATE {s}.job AS j SET
            status = 'failed', finished_at = now(), pending_children = 0,
            last_error = jsonb_build_object(
                'type', '{DEADLOCK_ERROR}',
                'message', format(
                    'deadlock detected: job %s waited for its child job %s, queued in lane '
                    '%s behind job %s, whose own wait leads back to job %s; failed as the '
                    'youngest waiting parent of the cycle, so that its lanes move on (see '
                    'docs/waits.md)', v.id, v.child, v.lane_key, v.head, v.id))
        FROM seen AS v
        WHERE j.id = v.id AND j.status = 'waiting' AND j.pending_children > 0
          AND j.execution_id IS NOT DISTINCT FROM v.execution_id
        RETURNING j.id, v.child, v.lane_key, v.head"""
