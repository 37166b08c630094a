"""complete_executions: ONE statement writes every completion of a batch, whatever its shape.

Each builder returns SQL text with asyncpg ``$n`` parameters for one schema; ``WorkerSQL``
renders them once per worker. No SQLAlchemy here."""

from __future__ import annotations

from ._render import TERMINAL, quote


def complete_executions(schema: str) -> str:
    """complete_executions: ONE statement writes every completion of a batch, whatever its
    shape. Guard: the row must still be 'executing' under the same execution id, so a
    repeated or late write (another worker took the row, or this one landed already)
    matches nothing and is reported as lease lost, never applied twice."""
    s = quote(schema)
    return f"""
        WITH c AS (
            -- $1 is a JSON array with one array per completion, its items in the field
            -- order of Completion: one text parameter encodes in a fraction of the time
            -- of thirteen typed arrays, and a string the server cannot store (a lone
            -- surrogate) is a data error of this statement, never a client-side one.
            SELECT (e->>0)::bigint AS job_id, (e->>1)::bigint AS execution_id,
                   e->>2 AS outcome, e->>3 AS status, (e->>4)::int AS attempt,
                   (e->>5)::float8 AS delay, (e->>6)::int AS charge, e->>7 AS result,
                   e->>8 AS error_type, e->>9 AS error_message, e->>10 AS traceback,
                   (e->>11)::float8 AS ran_seconds, (e->>12)::bool AS record
            FROM jsonb_array_elements($1::jsonb) AS e
        ),
        done AS (
            UPDATE {s}.job AS j SET
                -- An operator's cancel wins over a retry: the job ends 'cancelled'.
                status = CASE WHEN j.cancel_requested AND c.status = 'ready'
                              THEN 'cancelled' ELSE c.status END,
                attempts = j.attempts + c.charge,
                run_at = CASE WHEN c.status = 'ready'
                              THEN now() + make_interval(secs => c.delay)
                              ELSE j.run_at END,
                result = CASE WHEN c.status = 'succeeded' THEN c.result::jsonb
                              ELSE j.result END,
                last_error = CASE WHEN c.error_type IS NULL THEN j.last_error
                                  ELSE jsonb_build_object('type', c.error_type,
                                                          'message', c.error_message) END,
                finished_at = CASE WHEN c.status IN {TERMINAL} OR j.cancel_requested
                                   THEN now() END,
                worker_id = NULL,
                lease_expires_at = NULL
            FROM c
            -- Each row is looked up by primary key (id = ANY of the batch's ids): the
            -- planner must never scan the executing set, whose statistics are stale
            -- and whose index entries grow dead with every drained row.
            WHERE j.id = ANY (ARRAY(SELECT c.job_id FROM c))
              AND j.id = c.job_id AND j.execution_id = c.execution_id
              AND j.status = 'executing'
            RETURNING j.id, j.claimed_at, c.execution_id, c.attempt, c.ran_seconds,
                      c.outcome, c.error_type, c.error_message, c.traceback, c.record
        ),
        history AS (
            INSERT INTO {s}.execution AS e (id, job_id, attempt, worker_id, claimed_at,
                started_at, finished_at, outcome, error_type, error_message, traceback)
            SELECT d.execution_id, d.id, d.attempt, $2, d.claimed_at,
                   CASE WHEN d.ran_seconds IS NULL THEN NULL
                        ELSE now() - make_interval(secs => d.ran_seconds) END,
                   now(), d.outcome, d.error_type, d.error_message, d.traceback
            FROM done AS d
            WHERE d.record
        )
        SELECT id FROM done"""
