"""admission: concurrency slots and rate meters taken in one call per batch

Revision ID: 0006
Revises: 0003
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
"""

from collections.abc import Sequence

import sqlalchemy as sa

from acta_sqla.migrate import target_schema
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0003"
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
        LANGUAGE plpgsql AS $$
        DECLARE
            r record;
            k bigint;
            n bigint;
            t timestamptz;
            m record;
            step interval;
            due timestamptz;
        BEGIN
            -- Every key of the batch, locked in one order until commit.
            FOR k IN
                SELECT DISTINCT h FROM (
                    SELECT hashtextextended('acta.slot' || chr(31) || p_namespace
                                            || chr(31) || j.concurrency_key, 0) AS h
                    FROM jsonb_array_elements(p_batch) AS e
                    JOIN {s}.job AS j ON j.id = (e->>0)::bigint
                    WHERE j.concurrency_key IS NOT NULL AND e->>2 IS NOT NULL
                    UNION ALL
                    SELECT hashtextextended('acta.rate' || chr(31) || p_namespace
                                            || chr(31) || coalesce(j.rate_key, j.kind), 0)
                    FROM jsonb_array_elements(p_batch) AS e
                    JOIN {s}.job AS j ON j.id = (e->>0)::bigint
                    WHERE e->>3 IS NOT NULL
                ) AS keys ORDER BY h
            LOOP
                PERFORM pg_advisory_xact_lock(k);
            END LOOP;

            FOR r IN
                SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS xid, (e->>2)::int AS lim,
                       (e->>3)::int AS cnt, (e->>4)::float8 AS period,
                       (e->>5)::float8 AS bounce, j.id IS NOT NULL AS ours,
                       j.concurrency_key AS ck, coalesce(j.rate_key, j.kind) AS rk
                FROM jsonb_array_elements(p_batch) WITH ORDINALITY AS x(e, ord)
                LEFT JOIN {s}.job AS j
                  ON j.id = (e->>0)::bigint AND j.execution_id = (e->>1)::bigint
                 AND j.status = 'executing' AND j.namespace = p_namespace
                ORDER BY x.ord
            LOOP
                job_id := r.id;
                wait := 0;
                IF NOT r.ours THEN  -- fenced out: another execution owns the row now
                    verdict := 'lost';
                    RETURN NEXT;
                    CONTINUE;
                END IF;
                t := clock_timestamp();
                IF r.ck IS NOT NULL AND r.lim IS NOT NULL THEN
                    -- Live holders only: a slot whose attempt ended (its row moved on) or
                    -- whose lease ran out (its worker died or stalled) is free.
                    SELECT count(*) INTO n
                    FROM {s}.concurrency_slot AS sl
                    JOIN {s}.job AS h ON h.id = sl.job_id AND h.execution_id = sl.execution_id
                     AND h.status = 'executing' AND h.lease_expires_at > t
                    WHERE sl.namespace = p_namespace AND sl.key = r.ck AND sl.job_id <> r.id;
                    IF n >= r.lim THEN
                        verdict := 'slot';
                        wait := r.bounce;
                        RETURN NEXT;
                        CONTINUE;
                    END IF;
                END IF;
                IF r.cnt IS NOT NULL THEN
                    step := make_interval(secs => r.period / r.cnt);
                    INSERT INTO {s}.rate_meter AS rm (namespace, key, updated_at)
                    VALUES (p_namespace, r.rk, t) ON CONFLICT DO NOTHING;
                    SELECT rm.next_at, rm.booked INTO m FROM {s}.rate_meter AS rm
                    WHERE rm.namespace = p_namespace AND rm.key = r.rk;
                    IF m.next_at > t THEN
                        due := greatest(m.next_at, m.booked + step);
                        UPDATE {s}.rate_meter AS rm SET booked = due
                        WHERE rm.namespace = p_namespace AND rm.key = r.rk;
                        verdict := 'rate';
                        wait := extract(epoch FROM due - t);
                        RETURN NEXT;
                        CONTINUE;
                    END IF;
                    UPDATE {s}.rate_meter AS rm SET next_at = t + step, updated_at = t
                    WHERE rm.namespace = p_namespace AND rm.key = r.rk;
                END IF;
                IF r.ck IS NOT NULL AND r.lim IS NOT NULL THEN
                    INSERT INTO {s}.concurrency_slot AS sl
                        (namespace, key, job_id, execution_id, worker_id, acquired_at)
                    VALUES (p_namespace, r.ck, r.id, r.xid, p_worker, t)
                    ON CONFLICT ON CONSTRAINT concurrency_slot_pkey DO UPDATE
                    SET execution_id = EXCLUDED.execution_id, worker_id = EXCLUDED.worker_id,
                        acquired_at = EXCLUDED.acquired_at;
                END IF;
                verdict := 'admitted';
                RETURN NEXT;
            END LOOP;
        END $$""")


def downgrade() -> None:
    schema = target_schema()
    op.execute(f'DROP FUNCTION IF EXISTS "{schema}".admit(text, jsonb, bigint)')
    op.drop_column("rate_meter", "booked", schema=schema)
    op.drop_column("rate_meter", "next_at", schema=schema)
    op.add_column(
        "rate_meter",
        sa.Column("tokens", sa.Double(), nullable=False, server_default="0"),
        schema=schema,
    )
