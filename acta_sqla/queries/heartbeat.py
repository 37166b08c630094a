"""The heartbeat: ONE statement per beat.

Each builder returns SQL text with asyncpg ``$n`` parameters for one schema; ``WorkerSQL``
renders them once per worker. No SQLAlchemy here."""

from __future__ import annotations

from ._render import ACTIVE, quote
from .waits import wake_timed_out


def heartbeat(schema: str) -> str:
    """The heartbeat: ONE statement renews the held (job, execution) pairs, records which
    attempts have started, refreshes the worker row, takes the namespace's recovery pass
    when it is due, wakes the namespace's signal waits past their deadline
    (:func:`waits.wake_timed_out`), and reports the definitions version, as ONE row of
    named columns.
    Rows locked by another transaction are skipped, not waited for: they show up among
    the present pairs but not the renewed ones, and keep their deadline for the next beat.

    Parameters: $1 namespace; $2, $3, $4 the held pairs and whether each has started; $5
    the lease; $6 the worker; $7 this worker's recovery interval; $8, $9, $10 the held
    named locks; $11 recovery intervals in beats (interval / heartbeat)."""
    s = quote(schema)
    return f"""
        WITH held AS (
            SELECT * FROM unnest($2::bigint[], $3::bigint[], $4::bool[])
                AS h(job_id, execution_id, started)
        ),
        lockable AS (
            -- id = ANY($2): by primary key whatever the statistics say of 'executing'.
            SELECT j.id FROM {s}.job j
            JOIN held h ON j.id = h.job_id AND j.execution_id = h.execution_id
            WHERE j.id = ANY ($2::bigint[]) AND j.status = 'executing'
            FOR UPDATE OF j SKIP LOCKED
        ),
        renewed AS (
            UPDATE {s}.job AS j SET
                lease_expires_at = now() + make_interval(secs => $5),
                started_at = CASE WHEN h.started THEN coalesce(j.started_at, now())
                                  ELSE j.started_at END
            FROM lockable, held h
            WHERE j.id = lockable.id AND h.job_id = j.id
            RETURNING j.id, j.execution_id, j.cancel_requested
        ),
        present AS (
            SELECT j.id, j.execution_id FROM {s}.job j
            JOIN held h ON j.id = h.job_id AND j.execution_id = h.execution_id
            WHERE j.id = ANY ($2::bigint[]) AND j.status = 'executing'
        ),
        beat AS (
            UPDATE {s}.worker SET heartbeat_at = now(), status = 'running'
            WHERE id = $6
            RETURNING id
        ),
        recovery AS (
            -- The next pass is due after the SHORTEST recovery interval of the namespace's
            -- running workers, not this worker's own: a 45 s worker taking the pass would
            -- otherwise make 0.5 s workers wait 180 s to recover a crashed peer's rows,
            -- whose 2 s leases ran out long before (I1, no lost job). A registering
            -- worker pulls a later due time in to its own interval (register_worker).
            UPDATE {s}.namespace SET recovery_due_at = now() + make_interval(secs => least(
                $7,
                (SELECT min(w.heartbeat_seconds) * $11 FROM {s}.worker w
                 WHERE w.namespace = $1 AND w.status = 'running')))
            WHERE name = $1 AND recovery_due_at <= now()
            RETURNING name
        ),
        lock_holds AS (
            SELECT * FROM unnest($8::text[], $9::bigint[], $10::bigint[])
                AS l(name, job_id, execution_id)
        ),
        locks_renewed AS (
            UPDATE {s}.lock AS k SET lease_expires_at = now() + make_interval(secs => $5)
            FROM lock_holds l
            WHERE k.namespace = $1 AND k.name = l.name
              AND k.job_id = l.job_id AND k.execution_id = l.execution_id
            RETURNING k.name, k.job_id, k.execution_id
        ),
        {wake_timed_out(schema)}
        -- Parallel arrays, each ordered by its set's key so that they pair up.
        SELECT ARRAY(SELECT id FROM renewed ORDER BY id) AS renewed_ids,
               ARRAY(SELECT execution_id FROM renewed ORDER BY id) AS renewed_execution_ids,
               ARRAY(SELECT id FROM renewed WHERE cancel_requested ORDER BY id)
                   AS cancel_requested_ids,
               ARRAY(SELECT id FROM present ORDER BY id) AS present_ids,
               ARRAY(SELECT execution_id FROM present ORDER BY id) AS present_execution_ids,
               ARRAY(SELECT name FROM locks_renewed ORDER BY name) AS lock_names,
               ARRAY(SELECT job_id FROM locks_renewed ORDER BY name) AS lock_job_ids,
               ARRAY(SELECT execution_id FROM locks_renewed ORDER BY name)
                   AS lock_execution_ids,
               (SELECT definitions_version FROM {s}.namespace WHERE name = $1)
                   AS definitions_version,
               EXISTS (SELECT 1 FROM recovery) AS recovery_due,
               EXISTS (SELECT 1 FROM beat) AS worker_found,
               (SELECT count(*) FROM woken) AS woken"""


def measure_depth(schema: str) -> str:
    """The queue-depth gauge's measure: ONE per beat interval ($2 seconds) per namespace
    ($1), taken by the first worker with a metrics SDK whose beat finds it due (a worker
    without one never sends this). Answers the namespace's ready, executing and waiting
    jobs by kind and status as JSON, or no row when another worker measured it within the
    interval. (Not a CTE of the heartbeat: that statement's recovery turn updates the same
    namespace row, and one statement updates a row once.)"""
    s = quote(schema)
    return f"""
        WITH turn AS (
            UPDATE {s}.namespace SET depth_due_at = now() + make_interval(secs => $2)
            WHERE name = $1 AND depth_due_at <= now()
            RETURNING name
        )
        SELECT coalesce((
            SELECT json_agg(json_build_array(d.kind, d.status, d.n))
            FROM (
                SELECT kind, status, count(*) AS n FROM {s}.job
                WHERE namespace = $1 AND status IN {ACTIVE}
                GROUP BY kind, status
            ) AS d
        ), '[]')::text AS depth
        FROM turn"""
