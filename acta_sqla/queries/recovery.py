"""The recovery pass: expired leases, dead workers, pruning of finished jobs.

Each builder returns SQL text with asyncpg ``$n`` parameters for one schema; ``WorkerSQL``
renders them once per worker. No SQLAlchemy here."""

from __future__ import annotations

from ._render import TERMINAL, quote


def recover_expired(schema: str) -> str:
    """Recovery, step 1: rows whose lease ran out go back to 'ready'. An attempt the database
    knows had started is charged (and ends 'failed' when the budget is spent); one only
    claimed gets its count back -- unless the same job was already lost unstarted
    before, so that a job that kills its worker at once still ends after its budget
    instead of looping forever."""
    s = quote(schema)
    return f"""
        WITH expired AS (
            SELECT j.id, j.execution_id, j.attempts, j.started_at, j.claimed_at,
                   j.worker_id,
                   coalesce(j.max_attempts, (d.overrides->>'max_attempts')::int,
                            (d.declared->>'max_attempts')::int, $3) AS budget,
                   (j.started_at IS NOT NULL OR EXISTS (
                        SELECT 1 FROM {s}.execution e
                        WHERE e.job_id = j.id AND e.outcome = 'lost' AND e.started_at IS NULL
                   )) AS charged
            FROM {s}.job j
            LEFT JOIN {s}.definition d ON d.namespace = j.namespace AND d.kind = j.kind
            WHERE j.namespace = $1 AND j.status = 'executing' AND j.lease_expires_at < now()
            ORDER BY j.lease_expires_at
            LIMIT $2
            FOR UPDATE OF j SKIP LOCKED
        ),
        recovered AS (
            UPDATE {s}.job AS j SET
                status = CASE WHEN j.cancel_requested THEN 'cancelled'
                              WHEN e.charged AND e.attempts >= e.budget THEN 'failed'
                              ELSE 'ready' END,
                attempts = CASE WHEN e.charged THEN j.attempts ELSE j.attempts - 1 END,
                run_at = now(),
                last_error = CASE WHEN e.charged THEN jsonb_build_object(
                    'type', 'acta.LeaseExpired',
                    'message', CASE WHEN e.attempts >= e.budget
                        THEN format('the worker running attempt %s of %s stopped renewing '
                                    'its lease (crashed or stalled): failure budget spent',
                                    e.attempts, e.budget)
                        ELSE 'the worker running this attempt stopped renewing its lease '
                             '(crashed or stalled)' END)
                    ELSE j.last_error END,
                finished_at = CASE WHEN j.cancel_requested
                                     OR (e.charged AND e.attempts >= e.budget)
                                   THEN now() END,
                worker_id = NULL,
                lease_expires_at = NULL
            FROM expired e
            WHERE j.id = e.id
            RETURNING j.id, j.status
        ),
        history AS (
            INSERT INTO {s}.execution (id, job_id, attempt, worker_id, claimed_at,
                started_at, finished_at, outcome, error_type, error_message)
            SELECT e.execution_id, e.id, e.attempts, e.worker_id, e.claimed_at,
                   e.started_at, now(), 'lost', 'acta.LeaseExpired',
                   CASE WHEN e.charged THEN 'lease expired after the attempt started'
                        ELSE 'lease expired before the attempt was known to start' END
            FROM expired e JOIN recovered r ON r.id = e.id
        )
        SELECT r.id, r.status, e.charged FROM recovered r JOIN expired e ON e.id = r.id"""


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
    """Recovery, step 3: finished jobs past their kind's retention, one bounded chunk."""
    s = quote(schema)
    return f"""
        WITH doomed AS (
            SELECT j.id FROM {s}.job j
            LEFT JOIN {s}.definition d ON d.namespace = j.namespace AND d.kind = j.kind
            CROSS JOIN LATERAL (
                SELECT coalesce(d.overrides -> 'retention', d.declared -> 'retention') AS eff
            ) r
            WHERE j.namespace = $1
              AND j.status IN {TERMINAL}
              -- retention null keeps a kind's jobs forever; absent means the default $3
              AND j.finished_at < now() - make_interval(secs => CASE
                    WHEN r.eff IS NULL THEN $3
                    WHEN jsonb_typeof(r.eff) = 'number' THEN r.eff::float8
                  END)
            ORDER BY j.finished_at
            LIMIT $2
            FOR UPDATE OF j SKIP LOCKED
        ),
        gone AS (
            DELETE FROM {s}.job WHERE id IN (SELECT id FROM doomed) RETURNING id
        ),
        history AS (
            DELETE FROM {s}.execution WHERE job_id IN (SELECT id FROM gone) RETURNING 1
        )
        SELECT count(*) FROM gone"""
