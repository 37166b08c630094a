"""admission: concurrency slots and rate meters taken in one call per batch; lanes

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03

``admit(namespace, batch, worker)`` decides, for every keyed job a worker's executors
claimed, whether it may start now: a free slot of its concurrency key (at most the limit
held by LIVE attempts: executing under the slot's execution id with an unexpired lease)
and an admission from its rate meter. It is a PL/pgSQL function rather than one plain
statement because the decision must read what the previous admission of the same key
committed: it first takes a transaction-level advisory lock on every key of the batch,
all in one order (no deadlock between two workers' batches), and each statement after
that sees a fresh snapshot (READ COMMITTED), so two workers racing for the last slot
serialize on the key and the second counts the first's slot. A single statement would
read its snapshot before it waited for the lock and admit both.

The rate meter is GCRA without burst tolerance: ``next_at`` is the earliest time the key
may admit again; an admission at ``t >= next_at`` moves it to ``t + period / N``. Starts
are therefore at least ``period / N`` apart on the database clock (``clock_timestamp()``
taken under the key's lock), so no window of the period's length, wherever placed (half
open), holds more than N of them. (A token bucket of N that also refills admits up to
2N - 1 in one period.) ``booked`` spreads the refused: each refused job is told the next
free time after the last one told, so a backlog returns one per interval instead of all
at once.

Slot and meter writes are fenced by (job, execution): a job not ``executing`` under the
given execution id answers ``lost`` and takes nothing. The slot is freed by the
terminal-effects trigger (0003) on every way out of ``executing``.

Lanes: jobs of one (namespace, lane_key) run one at a time, in the order their enqueuing
transactions committed. ``job_lane_enter`` (BEFORE INSERT, and BEFORE an operator's retry
moves a finished job back to ``ready``) takes a transaction lock on the lane and makes
the row ``waiting`` if the lane has another unfinished job: held until the enqueuer
commits, the lock orders the lane's enqueues by commit; the row's id is drawn again
under it, so a lane's ids follow its commit order (a lane job's id is therefore not the
one its column default drew first: sequences leave gaps anyway). A second
transaction enqueueing into the lane at the same time waits, then sees the first's row.
The terminal-effects trigger gains the hand-on: when a lane's head (a job that was not
``waiting``) reaches a terminal state, it takes the same lock and makes the lane's oldest
``waiting`` job ``ready`` (the NOTIFY trigger of 0001 then wakes the workers). A retry
(``executing`` -> ``ready``) is not terminal: the job keeps its place at the head. A
``waiting`` job cancelled leaves the lane without handing anything on.
"""

from collections.abc import Sequence

import sqlalchemy as sa

from acta_sqla.migrate import target_schema
from alembic import op

TERMINAL = "('succeeded', 'failed', 'cancelled')"

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = target_schema()
    op.drop_column("rate_meter", "tokens", schema=schema)
    for name in ("next_at", "booked"):
        op.add_column(
            "rate_meter",
            sa.Column(
                name,
                sa.DateTime(timezone=True),
                nullable=False,
                server_default=sa.text("'-infinity'::timestamptz"),
            ),
            schema=schema,
        )
    s = f'"{schema}"'
    # Input: one JSON array per request, [job_id, execution_id, limit, rate_count,
    # rate_period, bounce_seconds]; limit null = no slot asked, rate_count null = no meter.
    op.execute(f"""
        CREATE FUNCTION {s}.admit(p_namespace text, p_batch jsonb, p_worker bigint)
        RETURNS TABLE (job_id bigint, verdict text, wait float8)
        LANGUAGE plpgsql
        -- See the ALTER FUNCTION below: index lookups whatever the statistics say.
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
                  AND sl.job_id <> ALL (ids)
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
        END $$""")

    # The slot table is small and churns (a row inserted and deleted per keyed job): its
    # statistics say "empty", so the planner sent every trigger's DELETE (and admission's
    # count of live slots) through a sequential scan of the table and its dead rows: 2.4
    # million rows read over a 20,000-job drain, the trigger costing 160 us per keyed
    # job instead of 10. Both functions look slots up by primary key whatever the
    # statistics say (the SET clause of the terminal-effects function below).

    # ------------------------------------------------------------------ lanes
    op.create_index(
        "job_lane_idx",
        "job",
        ["namespace", "lane_key", "id"],
        schema=schema,
        postgresql_where=sa.text(
            "lane_key IS NOT NULL AND status IN ('ready', 'executing', 'waiting')"
        ),
    )
    # The hand-on's "oldest waiting job of the lane": apart from the index above, so the
    # walk does not step over the lane's head and the dead entries of every job the lane
    # already ran (PG CPU per laned job 300 -> see docs/performance.md).
    op.create_index(
        "job_lane_waiting_idx",
        "job",
        ["namespace", "lane_key", "id"],
        schema=schema,
        postgresql_where=sa.text("status = 'waiting' AND lane_key IS NOT NULL"),
    )
    lock = (
        "pg_advisory_xact_lock(hashtextextended('acta.lane' || chr(31) || {ns} || chr(31)"
        " || {lane}, 0))"
    )
    op.execute(f"""
        CREATE FUNCTION {s}.job_lane_enter() RETURNS trigger LANGUAGE plpgsql
        SET enable_seqscan = off AS $$
        BEGIN
            PERFORM {lock.format(ns="NEW.namespace", lane="NEW.lane_key")};
            IF TG_OP = 'INSERT' THEN
                -- The id was drawn before this trigger waited for the lane: draw it again
                -- under the lock, so a lane's ids follow its commit order (the hand-on
                -- takes the lowest waiting id).
                NEW.id := nextval(pg_get_serial_sequence('{s}.job', 'id'));
            END IF;
            IF EXISTS (
                SELECT 1 FROM {s}.job AS j
                WHERE j.namespace = NEW.namespace AND j.lane_key = NEW.lane_key
                  AND j.status IN ('ready', 'executing', 'waiting')
                  AND j.id IS DISTINCT FROM NEW.id
            ) THEN
                NEW.status := 'waiting';
            END IF;
            RETURN NEW;
        END $$""")
    op.execute(f"""
        CREATE TRIGGER job_lane_enter_insert BEFORE INSERT ON {s}.job
        FOR EACH ROW WHEN (NEW.lane_key IS NOT NULL AND NEW.status = 'ready')
        EXECUTE FUNCTION {s}.job_lane_enter()""")
    op.execute(f"""
        CREATE TRIGGER job_lane_enter_retry BEFORE UPDATE OF status ON {s}.job
        FOR EACH ROW WHEN (NEW.lane_key IS NOT NULL AND NEW.status = 'ready'
                           AND OLD.status IN {TERMINAL})
        EXECUTE FUNCTION {s}.job_lane_enter()""")
    # The terminal effects: free the slot (as in 0003), then hand the lane on.
    op.execute(f"""
        CREATE OR REPLACE FUNCTION {s}.job_terminal_effects() RETURNS trigger
        LANGUAGE plpgsql SET enable_seqscan = off AS $$
        BEGIN
            IF OLD.concurrency_key IS NOT NULL THEN
                DELETE FROM {s}.concurrency_slot
                WHERE namespace = OLD.namespace AND key = OLD.concurrency_key
                  AND job_id = OLD.id AND execution_id = OLD.execution_id;
            END IF;
            IF OLD.lane_key IS NOT NULL AND OLD.status <> 'waiting'
               AND NEW.status IN {TERMINAL} THEN
                PERFORM {lock.format(ns="OLD.namespace", lane="OLD.lane_key")};
                UPDATE {s}.job SET status = 'ready', run_at = greatest(run_at, now())
                WHERE id = (
                    SELECT j.id FROM {s}.job AS j
                    WHERE j.namespace = OLD.namespace AND j.lane_key = OLD.lane_key
                      AND j.status = 'waiting'
                    ORDER BY j.id LIMIT 1
                );
            END IF;
            RETURN NULL;
        END $$""")
    op.execute(f"DROP TRIGGER job_terminal_effects ON {s}.job")
    op.execute(f"""
        CREATE TRIGGER job_terminal_effects AFTER UPDATE OF status ON {s}.job
        FOR EACH ROW
        WHEN ((OLD.concurrency_key IS NOT NULL OR OLD.lane_key IS NOT NULL)
              AND OLD.status IS DISTINCT FROM NEW.status
              AND (OLD.status = 'executing' OR NEW.status IN {TERMINAL}))
        EXECUTE FUNCTION {s}.job_terminal_effects()""")


def downgrade() -> None:
    schema = target_schema()
    s = f'"{schema}"'
    op.execute(f"DROP TRIGGER IF EXISTS job_lane_enter_insert ON {s}.job")
    op.execute(f"DROP TRIGGER IF EXISTS job_lane_enter_retry ON {s}.job")
    op.execute(f"DROP FUNCTION IF EXISTS {s}.job_lane_enter()")
    op.drop_index("job_lane_waiting_idx", table_name="job", schema=schema)
    op.drop_index("job_lane_idx", table_name="job", schema=schema)
    # 0003's trigger and function, as they were.
    op.execute(f"DROP TRIGGER job_terminal_effects ON {s}.job")
    op.execute(f"DROP FUNCTION {s}.job_terminal_effects()")
    op.execute(f"""
        CREATE FUNCTION {s}.job_terminal_effects() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            DELETE FROM {s}.concurrency_slot
            WHERE namespace = OLD.namespace AND key = OLD.concurrency_key
              AND job_id = OLD.id AND execution_id = OLD.execution_id;
            RETURN NULL;
        END $$""")
    op.execute(f"""
        CREATE TRIGGER job_terminal_effects AFTER UPDATE OF status ON {s}.job
        FOR EACH ROW
        WHEN (OLD.concurrency_key IS NOT NULL
              AND OLD.status IS DISTINCT FROM NEW.status
              AND (OLD.status = 'executing' OR NEW.status IN {TERMINAL}))
        EXECUTE FUNCTION {s}.job_terminal_effects()""")
    op.execute(f'DROP FUNCTION IF EXISTS "{schema}".admit(text, jsonb, bigint)')
    op.drop_column("rate_meter", "booked", schema=schema)
    op.drop_column("rate_meter", "next_at", schema=schema)
    op.add_column(
        "rate_meter",
        sa.Column("tokens", sa.Double(), nullable=False, server_default="0"),
        schema=schema,
    )
