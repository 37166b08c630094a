"""a running job's slot counts even beside a stale request of the same job

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05

``admit()`` counted a key's live slots leaving out every slot whose job was in the batch
(``sl.job_id <> ALL (ids)``), so that a request repeated for an attempt that already holds
its slot does not count itself. It left out too much: a stale request (a job whose lease
ran out on this worker and that another worker re-claimed and admitted) answers ``lost``
but hid the re-claimed attempt's live slot, and a request of the same key in the same
batch was admitted over the limit. Now only the slot of the very attempt a request asks
for, (job, execution) of a request that is still ours, is left out of the count.
"""

from collections.abc import Sequence

from acta_sqla.migrate import target_schema
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EXACT = (
    "                  AND (sl.job_id, sl.execution_id) NOT IN (\n"
    "                      SELECT req.id, req.xid FROM req WHERE req.ours)"
)
"""0013: only the slot of the attempt a live request asks for is not counted."""
WHOLE_JOB = "                  AND sl.job_id <> ALL (ids)"
"""0006: every slot of every job in the batch was not counted."""


def _function(s: str, live_exclusion: str) -> str:
    """0006's ``admit()``, with its live-slot count's exclusion as given."""
    return f"""
        CREATE OR REPLACE FUNCTION {s}.admit(p_namespace text, p_batch jsonb, p_worker bigint)
        RETURNS TABLE (job_id bigint, verdict text, wait float8)
        LANGUAGE plpgsql
        -- Index lookups whatever the statistics say (see 0006).
        SET enable_seqscan = off
        AS $$
        DECLARE
            t timestamptz;
            ids bigint[] := ARRAY(SELECT (e->>0)::bigint FROM jsonb_array_elements(p_batch) e);
        BEGIN
            -- Every join to job below also says j.id = ANY (ids): the rows are looked up by
            -- primary key whatever the plan (a plan that cannot see the batch's size would
            -- otherwise hash the whole table against it, at every call).
            -- 1. Every key of the batch, locked in one order until commit.
            PERFORM pg_advisory_xact_lock(h) FROM (
                SELECT DISTINCT hashtextextended(
                    CASE WHEN which = 1 THEN 'acta.slot' ELSE 'acta.rate' END || chr(31)
                    || p_namespace || chr(31) || key, 0) AS h
                FROM (
                    SELECT 1 AS which, j.concurrency_key AS key
                    FROM jsonb_array_elements(p_batch) AS e
                    JOIN {s}.job AS j ON j.id = (e->>0)::bigint AND j.id = ANY (ids)
                    WHERE j.concurrency_key IS NOT NULL AND e->>2 IS NOT NULL
                    UNION ALL
                    SELECT 2, coalesce(j.rate_key, j.kind)
                    FROM jsonb_array_elements(p_batch) AS e
                    JOIN {s}.job AS j ON j.id = (e->>0)::bigint AND j.id = ANY (ids)
                    WHERE e->>3 IS NOT NULL
                ) AS keys
                ORDER BY h
            ) AS ordered;

            -- 2. A meter row for every rate key asked about (so step 3 can read them all);
            -- fenced like everything else: a stale request creates nothing.
            INSERT INTO {s}.rate_meter AS rm (namespace, key)
            SELECT DISTINCT p_namespace, coalesce(j.rate_key, j.kind)
            FROM jsonb_array_elements(p_batch) AS e
            JOIN {s}.job AS j ON j.id = (e->>0)::bigint AND j.id = ANY (ids)
             AND j.execution_id = (e->>1)::bigint AND j.status = 'executing'
            WHERE e->>3 IS NOT NULL
            ON CONFLICT DO NOTHING;

            -- 3. Under the locks, a fresh snapshot: decide the whole batch at once.
            t := clock_timestamp();
            RETURN QUERY
            WITH req AS (
                SELECT x.ord, (x.e->>0)::bigint AS id, (x.e->>1)::bigint AS xid,
                       (x.e->>2)::int AS lim, (x.e->>3)::int AS cnt,
                       (x.e->>4)::float8 AS period, (x.e->>5)::float8 AS bounce,
                       j.id IS NOT NULL AS ours, j.concurrency_key AS ck,
                       coalesce(j.rate_key, j.kind) AS rk
                FROM jsonb_array_elements(p_batch) WITH ORDINALITY AS x(e, ord)
                -- Fenced: only a job still executing under the asked execution.
                LEFT JOIN {s}.job AS j
                  ON j.id = (x.e->>0)::bigint AND j.id = ANY (ids)
                 AND j.execution_id = (x.e->>1)::bigint
                 AND j.status = 'executing' AND j.namespace = p_namespace
            ),
            live AS (
                -- Live holders only: a slot whose attempt ended (its row moved on) or
                -- whose lease ran out (its worker died or stalled) is free.
                SELECT sl.key, count(*) AS n
                FROM {s}.concurrency_slot AS sl
                JOIN {s}.job AS h ON h.id = sl.job_id AND h.execution_id = sl.execution_id
                 AND h.status = 'executing' AND h.lease_expires_at > t
                WHERE sl.namespace = p_namespace
                  AND sl.key IN (SELECT req.ck FROM req WHERE req.ours AND req.lim IS NOT NULL)
{live_exclusion}
                GROUP BY sl.key
            ),
            slotted AS (
                -- The k-th asker of a key (in batch order) gets a slot if live + k <= limit.
                SELECT req.*,
                       req.ours AND (req.ck IS NULL OR req.lim IS NULL
                           OR coalesce(live.n, 0) + count(*) OVER (
                                  PARTITION BY req.ck, req.ours AND req.lim IS NOT NULL
                                  ORDER BY req.ord ROWS UNBOUNDED PRECEDING) <= req.lim)
                       AS slot_ok
                FROM req LEFT JOIN live ON live.key = req.ck
            ),
            metered AS (
                -- GCRA without burst: of the askers of one rate key that have their slot,
                -- the first is admitted if next_at <= t; each refused one is told the next
                -- free time after the last one told (booked), one interval apart.
                SELECT sd.*, rm.next_at, rm.booked,
                       make_interval(secs => sd.period / sd.cnt) AS step,
                       count(*) OVER (PARTITION BY sd.rk ORDER BY sd.ord
                                      ROWS UNBOUNDED PRECEDING) AS k
                FROM slotted AS sd
                JOIN {s}.rate_meter AS rm ON rm.namespace = p_namespace AND rm.key = sd.rk
                WHERE sd.slot_ok AND sd.cnt IS NOT NULL
            ),
            rated AS (
                SELECT m.id, m.rk, m.step,
                       m.k = 1 AND m.next_at <= t AS admitted,
                       greatest(CASE WHEN m.next_at <= t THEN t + m.step ELSE m.next_at END,
                                m.booked + m.step)
                       + m.step * (m.k - CASE WHEN m.next_at <= t THEN 2 ELSE 1 END) AS due
                FROM metered AS m
            ),
            meters AS (
                UPDATE {s}.rate_meter AS rm SET
                    next_at = CASE WHEN bool_or_admitted THEN t + agg.step ELSE rm.next_at END,
                    booked = coalesce(agg.last_due, rm.booked),
                    updated_at = t
                FROM (
                    SELECT r.rk, min(r.step) AS step, bool_or(r.admitted) AS bool_or_admitted,
                           max(r.due) FILTER (WHERE NOT r.admitted) AS last_due
                    FROM rated AS r GROUP BY r.rk
                ) AS agg
                WHERE rm.namespace = p_namespace AND rm.key = agg.rk
                RETURNING 1
            ),
            decided AS (
                SELECT sd.ord, sd.id, sd.xid, sd.ck, sd.lim, sd.bounce,
                       CASE WHEN NOT sd.ours THEN 'lost'
                            WHEN NOT sd.slot_ok THEN 'slot'
                            WHEN r.id IS NOT NULL AND NOT r.admitted THEN 'rate'
                            ELSE 'admitted' END AS v,
                       r.due
                FROM slotted AS sd LEFT JOIN rated AS r ON r.id = sd.id
            ),
            taken AS (
                INSERT INTO {s}.concurrency_slot AS sl
                    (namespace, key, job_id, execution_id, worker_id, acquired_at)
                SELECT p_namespace, d.ck, d.id, d.xid, p_worker, t
                FROM decided AS d
                WHERE d.v = 'admitted' AND d.ck IS NOT NULL AND d.lim IS NOT NULL
                ON CONFLICT ON CONSTRAINT concurrency_slot_pkey DO UPDATE
                SET execution_id = EXCLUDED.execution_id, worker_id = EXCLUDED.worker_id,
                    acquired_at = EXCLUDED.acquired_at
                RETURNING 1
            )
            SELECT d.id, d.v,
                   CASE d.v WHEN 'slot' THEN d.bounce
                            WHEN 'rate' THEN extract(epoch FROM d.due - t)::float8
                            ELSE 0::float8 END
            -- meters and taken are not read: a data-modifying CTE runs exactly once
            -- whether or not anything reads it.
            FROM decided AS d
            ORDER BY d.ord;
        END $$"""


def upgrade() -> None:
    op.execute(_function(f'"{target_schema()}"', EXACT))


def downgrade() -> None:
    op.execute(_function(f'"{target_schema()}"', WHOLE_JOB))
