"""The heartbeat: ONE statement per beat.

Each builder returns SQL text with asyncpg ``$n`` parameters for one schema; ``WorkerSQL``
renders them once per worker. No SQLAlchemy here."""

from __future__ import annotations

from ._render import quote


def heartbeat(schema: str) -> str:
    """The heartbeat: ONE statement renews the held (job, execution) pairs, records which
    attempts have started, refreshes the worker row, takes the namespace's recovery pass
    when it is due (moving it one lease on), and reports the definitions version. Rows
    locked by another transaction are skipped, not waited for: they show up as 'present'
    without 'renewed' and keep their deadline for the next beat."""
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
            UPDATE {s}.namespace SET recovery_due_at = now() + make_interval(secs => $7)
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
        )
        SELECT 'renewed' AS what, id, execution_id, cancel_requested AS flag,
               NULL::text AS name FROM renewed
        UNION ALL
        SELECT 'present', id, execution_id, NULL, NULL FROM present
        UNION ALL
        SELECT 'lock', job_id, execution_id, NULL, name FROM locks_renewed
        UNION ALL
        SELECT 'namespace',
               (SELECT definitions_version FROM {s}.namespace WHERE name = $1),
               (SELECT count(*) FROM beat),
               EXISTS (SELECT 1 FROM recovery),
               NULL"""
