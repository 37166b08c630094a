"""circuit breakers per kind (or per key), shared by every worker of a namespace

Revision ID: 0016
Revises: 0014
Create Date: 2026-12-05

Issue 34. A kind declared with ``breaker=Breaker(...)`` (docs/breakers.md) has one row of
``breaker`` per (namespace, kind, key) (``key`` is ``''`` for a breaker per kind, else the
job's concurrency or rate key): its state (``closed``, ``open``, ``half_open``), the
outcomes of the current and the previous window (a sliding-window counter), when an open
breaker half-opens, and the attempts admitted as its probes.

* ``admit()`` (0006, 0013) is re-stated with the breaker's check, in the same call and
  under the same ordered advisory locks as the slots and meters (a breaker's lock is
  ``acta.breaker`` + namespace + kind + key). A request carries the breaker's key and its
  ``probes`` (positions 6 and 7; absent for a kind without a breaker, whose requests pay one
  scan of the batch for the check and nothing else). Closed: nothing changes. Open before
  ``open_until``: refused (verdict ``breaker``, wait = seconds to ``open_until``), so the
  executor bounces it uncharged. Open after ``open_until``, or half-open: the first
  ``probes`` minus the probes holding their place (a live attempt: executing under the
  probe's execution id, lease unexpired, so a dead worker's probe frees its place when its
  lease runs out, like a slot; or one that ended with an outcome within 10 s, whose count
  is on its way)
  are admitted as probes (verdict ``half_open`` for the one that moved the breaker there,
  ``probe`` for the others); the rest are refused, due again after the request's bounce.
* ``breaker_record(namespace, outcomes)``: the finalizer's outcomes of breaker kinds
  (successes and failures; retries, bounces and the rest are not sent), counted under the
  same locks; it answers the transitions it made (``open``, ``closed``) for the worker to
  log. Closed: counted into the window; at ``min_calls`` or more with a failure rate at or
  above the threshold, it opens. Open or half-open: only a probe's outcome counts: a
  success closes it, a failure opens it again for ``open_for``.
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa

from acta_sqla.migrate import target_schema
from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LOCK = (
    "hashtextextended('acta.breaker' || chr(31) || {ns} || chr(31) || {kind}"
    " || chr(31) || {key}, 0)"
)
"""A breaker's advisory lock (admit() and breaker_record() take it in hash order)."""


PROBE_GRACE = "10 seconds"
"""How long a probe that ended with an outcome keeps its place, waiting for its worker's
``breaker_record`` (written after the completion, in its own call): without it, a second
probe was admitted between the first's completion and its outcome's count. A count that
never comes (its worker died in between) frees the place after this long."""


def holds(s: str) -> str:
    """A probe (``p.jid``, ``p.xid``) holds its place: its attempt is live (executing
    under its execution id, lease unexpired: a dead worker's probe frees it when its lease
    runs out, like a slot), or it ended with an outcome within ``PROBE_GRACE`` (its count
    is on its way). A probe that bounced, was handed back or retried frees it at once."""
    return f"""(EXISTS (SELECT 1 FROM {s}.job AS h
                             WHERE h.id = p.jid AND h.execution_id = p.xid
                               AND h.status = 'executing' AND h.lease_expires_at > t)
                     -- acta.attempt (0015): the attempt that ended the job is on its row.
                     OR EXISTS (SELECT 1 FROM {s}.attempt AS x
                                WHERE x.job_id = p.jid AND x.id = p.xid
                                  AND x.outcome IN ('succeeded', 'failed', 'timeout')
                                  AND x.finished_at > t - interval '{PROBE_GRACE}'))"""


def admit_function(s: str) -> str:
    """0013's ``admit()`` with the breaker's check."""
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
            has_breaker boolean := EXISTS (
                SELECT 1 FROM jsonb_array_elements(p_batch) e WHERE e->>6 IS NOT NULL);
            br_refused bigint[] := '{{}}';
            br_waits float8[] := '{{}}';
            br_probes bigint[] := '{{}}';
            br_half bigint[] := '{{}}';
        BEGIN
            -- Every join to job below also says j.id = ANY (ids): the rows are looked up by
            -- primary key whatever the plan (a plan that cannot see the batch's size would
            -- otherwise hash the whole table against it, at every call).
            -- 1. Every key of the batch, locked in one order until commit.
            PERFORM pg_advisory_xact_lock(h) FROM (
                SELECT DISTINCT CASE WHEN which = 3 THEN {
        LOCK.format(ns="p_namespace", kind="kind", key="key")
    } ELSE hashtextextended(
                    CASE WHEN which = 1 THEN 'acta.slot' ELSE 'acta.rate' END || chr(31)
                    || p_namespace || chr(31) || key, 0) END AS h
                FROM (
                    SELECT 1 AS which, NULL::text AS kind, j.concurrency_key AS key
                    FROM jsonb_array_elements(p_batch) AS e
                    JOIN {s}.job AS j ON j.id = (e->>0)::bigint AND j.id = ANY (ids)
                    WHERE j.concurrency_key IS NOT NULL AND e->>2 IS NOT NULL
                    UNION ALL
                    SELECT 2, NULL, coalesce(j.rate_key, j.kind)
                    FROM jsonb_array_elements(p_batch) AS e
                    JOIN {s}.job AS j ON j.id = (e->>0)::bigint AND j.id = ANY (ids)
                    WHERE e->>3 IS NOT NULL
                    UNION ALL
                    SELECT 3, j.kind, e->>6
                    FROM jsonb_array_elements(p_batch) AS e
                    JOIN {s}.job AS j ON j.id = (e->>0)::bigint AND j.id = ANY (ids)
                    WHERE has_breaker AND e->>6 IS NOT NULL
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

            -- 2b. Breakers (0016), under their locks: which requests the breaker refuses,
            -- which it admits as probes. Only batches that carry a breaker get here.
            IF has_breaker THEN
                INSERT INTO {s}.breaker AS b (namespace, kind, key)
                SELECT DISTINCT p_namespace, j.kind, e->>6
                FROM jsonb_array_elements(p_batch) AS e
                JOIN {s}.job AS j ON j.id = (e->>0)::bigint AND j.id = ANY (ids)
                 AND j.execution_id = (e->>1)::bigint AND j.status = 'executing'
                WHERE e->>6 IS NOT NULL
                ON CONFLICT DO NOTHING;
                t := clock_timestamp();
                WITH breq AS (
                    SELECT x.ord, j.id, (x.e->>6) AS bkey, j.kind AS bkind,
                           (x.e->>7)::int AS probes, (x.e->>5)::float8 AS bounce
                    FROM jsonb_array_elements(p_batch) WITH ORDINALITY AS x(e, ord)
                    JOIN {s}.job AS j
                      ON j.id = (x.e->>0)::bigint AND j.id = ANY (ids)
                     AND j.execution_id = (x.e->>1)::bigint
                     AND j.status = 'executing' AND j.namespace = p_namespace
                    WHERE x.e->>6 IS NOT NULL
                ),
                st AS (
                    SELECT b.kind, b.key, b.state, b.open_until,
                           (SELECT count(*) FROM unnest(b.probe_jobs, b.probe_executions)
                                AS p(jid, xid)
                            WHERE {holds(s)}) AS live
                    FROM {s}.breaker AS b
                    WHERE b.namespace = p_namespace AND b.state <> 'closed'
                      AND (b.kind, b.key) IN (SELECT breq.bkind, breq.bkey FROM breq)
                ),
                ranked AS (
                    SELECT breq.id, breq.bounce, st.state, st.open_until,
                           st.state = 'open' AND st.open_until > t AS shut,
                           st.live + count(*) OVER (PARTITION BY breq.bkind, breq.bkey
                                                    ORDER BY breq.ord
                                                    ROWS UNBOUNDED PRECEDING)
                               <= breq.probes AS probe,
                           row_number() OVER (PARTITION BY breq.bkind, breq.bkey
                                              ORDER BY breq.ord) = 1 AS first
                    FROM breq JOIN st ON st.kind = breq.bkind AND st.key = breq.bkey
                )
                SELECT coalesce(array_agg(r.id) FILTER (WHERE r.shut OR NOT r.probe), '{{}}'),
                       coalesce(array_agg(CASE WHEN r.shut
                                              THEN extract(epoch FROM r.open_until - t)
                                              ELSE r.bounce END::float8)
                                FILTER (WHERE r.shut OR NOT r.probe), '{{}}'),
                       coalesce(array_agg(r.id) FILTER (WHERE NOT r.shut AND r.probe), '{{}}'),
                       coalesce(array_agg(r.id) FILTER (WHERE NOT r.shut AND r.probe
                                                      AND r.first AND r.state = 'open'), '{{}}')
                INTO br_refused, br_waits, br_probes, br_half
                FROM ranked AS r;

                IF cardinality(br_probes) > 0 THEN
                    -- The probes: the live ones kept, the new ones added; the breaker is
                    -- half-open from the first.
                    UPDATE {s}.breaker AS b SET
                        state = 'half_open',
                        changed_at = CASE WHEN b.state = 'half_open' THEN b.changed_at
                                          ELSE t END,
                        probe_jobs = ARRAY(
                            SELECT p.jid FROM unnest(b.probe_jobs, b.probe_executions)
                                AS p(jid, xid)
                            WHERE {holds(s)}
                        ) || np.jobs,
                        probe_executions = ARRAY(
                            SELECT p.xid FROM unnest(b.probe_jobs, b.probe_executions)
                                AS p(jid, xid)
                            WHERE {holds(s)}
                        ) || np.xids
                    FROM (
                        SELECT j.kind, e->>6 AS key, array_agg(j.id) AS jobs,
                               array_agg(j.execution_id) AS xids
                        FROM jsonb_array_elements(p_batch) AS e
                        JOIN {s}.job AS j ON j.id = (e->>0)::bigint AND j.id = ANY (br_probes)
                        GROUP BY 1, 2
                    ) AS np
                    WHERE b.namespace = p_namespace AND b.kind = np.kind AND b.key = np.key;
                END IF;
            END IF;

            -- 3. Under the locks, a fresh snapshot: decide the whole batch at once. A
            -- request the breaker refused is not ours here: it takes no slot, no meter.
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
                 AND NOT (j.id = ANY (br_refused))
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
                  AND (sl.job_id, sl.execution_id) NOT IN (
                      SELECT req.id, req.xid FROM req WHERE req.ours)
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
                       CASE WHEN sd.id = ANY (br_refused) THEN 'breaker'
                            WHEN NOT sd.ours THEN 'lost'
                            WHEN NOT sd.slot_ok THEN 'slot'
                            WHEN r.id IS NOT NULL AND NOT r.admitted THEN 'rate'
                            WHEN sd.id = ANY (br_half) THEN 'half_open'
                            WHEN sd.id = ANY (br_probes) THEN 'probe'
                            ELSE 'admitted' END AS v,
                       r.due
                FROM slotted AS sd LEFT JOIN rated AS r ON r.id = sd.id
            ),
            taken AS (
                INSERT INTO {s}.concurrency_slot AS sl
                    (namespace, key, job_id, execution_id, worker_id, acquired_at)
                SELECT p_namespace, d.ck, d.id, d.xid, p_worker, t
                FROM decided AS d
                WHERE d.v IN ('admitted', 'probe', 'half_open')
                  AND d.ck IS NOT NULL AND d.lim IS NOT NULL
                ON CONFLICT ON CONSTRAINT concurrency_slot_pkey DO UPDATE
                SET execution_id = EXCLUDED.execution_id, worker_id = EXCLUDED.worker_id,
                    acquired_at = EXCLUDED.acquired_at
                RETURNING 1
            )
            SELECT d.id, d.v,
                   CASE d.v WHEN 'slot' THEN d.bounce
                            WHEN 'rate' THEN extract(epoch FROM d.due - t)::float8
                            WHEN 'breaker'
                                THEN greatest(0, br_waits[array_position(br_refused, d.id)])
                            ELSE 0::float8 END
            -- meters and taken are not read: a data-modifying CTE runs exactly once
            -- whether or not anything reads it.
            FROM decided AS d
            ORDER BY d.ord;
        END $$"""


def record_function(s: str) -> str:
    """``breaker_record(namespace, outcomes)``: each outcome a JSON array ``[kind, key,
    job_id, execution_id, failed, failure_rate, min_calls, window, open_for]``; answers
    the transitions made (kind, key, state, until)."""
    return f"""
        CREATE FUNCTION {s}.breaker_record(p_namespace text, p_outcomes jsonb)
        RETURNS TABLE (kind text, key text, state text, until timestamptz)
        LANGUAGE plpgsql
        AS $$
        #variable_conflict use_column
        DECLARE
            t timestamptz;
            r record;
            b {s}.breaker%ROWTYPE;
            ws timestamptz;
            pc int; pf int; cc int; cf int;
            weight float8;
            est_calls float8;
            est_fails float8;
            probe_failed boolean;
        BEGIN
            PERFORM pg_advisory_xact_lock(h) FROM (
                SELECT DISTINCT {LOCK.format(ns="p_namespace", kind="(e->>0)", key="(e->>1)")} AS h
                FROM jsonb_array_elements(p_outcomes) AS e
                ORDER BY h
            ) AS ordered;
            INSERT INTO {s}.breaker AS b (namespace, kind, key, window_start)
            SELECT DISTINCT p_namespace, e->>0, e->>1, clock_timestamp()
            FROM jsonb_array_elements(p_outcomes) AS e
            ON CONFLICT DO NOTHING;
            t := clock_timestamp();
            FOR r IN
                SELECT x.e->>0 AS bkind, x.e->>1 AS bkey,
                       count(*)::int AS calls,
                       (count(*) FILTER (WHERE (x.e->>4)::boolean))::int AS fails,
                       max((x.e->>5)::float8) AS rate, max((x.e->>6)::int) AS min_calls,
                       max((x.e->>7)::float8) AS win, max((x.e->>8)::float8) AS open_for,
                       array_agg((x.e->>2)::bigint ORDER BY x.ord) AS jobs,
                       array_agg((x.e->>3)::bigint ORDER BY x.ord) AS xids,
                       array_agg((x.e->>4)::boolean ORDER BY x.ord) AS failed
                FROM jsonb_array_elements(p_outcomes) WITH ORDINALITY AS x(e, ord)
                GROUP BY 1, 2
            LOOP
                SELECT * INTO b FROM {s}.breaker AS br
                WHERE br.namespace = p_namespace AND br.kind = r.bkind AND br.key = r.bkey;
                IF b.state = 'closed' THEN
                    -- A sliding-window counter: this window's outcomes, plus the previous
                    -- window's weighted by how much of it the sliding window still covers.
                    ws := b.window_start; pc := b.prev_calls; pf := b.prev_failures;
                    cc := b.calls; cf := b.failures;
                    IF t >= ws + make_interval(secs => 2 * r.win) THEN
                        ws := t; pc := 0; pf := 0; cc := 0; cf := 0;
                    ELSIF t >= ws + make_interval(secs => r.win) THEN
                        ws := ws + make_interval(secs => r.win);
                        pc := cc; pf := cf; cc := 0; cf := 0;
                    END IF;
                    cc := cc + r.calls; cf := cf + r.fails;
                    weight := greatest(0, 1 - extract(epoch FROM t - ws) / r.win);
                    est_calls := pc * weight + cc;
                    est_fails := pf * weight + cf;
                    IF est_calls >= r.min_calls AND est_fails > 0
                       AND est_fails >= r.rate * est_calls THEN
                        UPDATE {s}.breaker AS br SET
                            state = 'open', open_until = t + make_interval(secs => r.open_for),
                            changed_at = t, window_start = t, calls = 0, failures = 0,
                            prev_calls = 0, prev_failures = 0,
                            probe_jobs = '{{}}', probe_executions = '{{}}'
                        WHERE br.namespace = p_namespace AND br.kind = r.bkind
                          AND br.key = r.bkey;
                        kind := r.bkind; key := r.bkey; state := 'open';
                        until := t + make_interval(secs => r.open_for);
                        RETURN NEXT;
                    ELSE
                        UPDATE {s}.breaker AS br SET
                            window_start = ws, calls = cc, failures = cf,
                            prev_calls = pc, prev_failures = pf
                        WHERE br.namespace = p_namespace AND br.kind = r.bkind
                          AND br.key = r.bkey;
                    END IF;
                ELSE
                    -- Open or half-open: only a probe's outcome counts (the first one of
                    -- the batch); the late outcomes of attempts started before it opened
                    -- do not.
                    SELECT u.f INTO probe_failed
                    FROM unnest(r.jobs, r.xids, r.failed) WITH ORDINALITY AS u(jid, xid, f, i)
                    WHERE (u.jid, u.xid) IN (
                        SELECT p.jid, p.xid
                        FROM unnest(b.probe_jobs, b.probe_executions) AS p(jid, xid))
                    ORDER BY u.i LIMIT 1;
                    IF FOUND AND probe_failed THEN
                        UPDATE {s}.breaker AS br SET
                            state = 'open', open_until = t + make_interval(secs => r.open_for),
                            changed_at = t, probe_jobs = '{{}}', probe_executions = '{{}}'
                        WHERE br.namespace = p_namespace AND br.kind = r.bkind
                          AND br.key = r.bkey;
                        kind := r.bkind; key := r.bkey; state := 'open';
                        until := t + make_interval(secs => r.open_for);
                        RETURN NEXT;
                    ELSIF FOUND THEN
                        UPDATE {s}.breaker AS br SET
                            state = 'closed', open_until = NULL, changed_at = t,
                            window_start = t, calls = 0, failures = 0, prev_calls = 0,
                            prev_failures = 0, probe_jobs = '{{}}', probe_executions = '{{}}'
                        WHERE br.namespace = p_namespace AND br.kind = r.bkind
                          AND br.key = r.bkey;
                        kind := r.bkind; key := r.bkey; state := 'closed'; until := NULL;
                        RETURN NEXT;
                    END IF;
                END IF;
            END LOOP;
        END $$"""


def upgrade() -> None:
    schema = target_schema()
    s = f'"{schema}"'
    ts = sa.DateTime(timezone=True)
    op.create_table(
        "breaker",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False, server_default="closed"),
        sa.Column("open_until", ts, nullable=True),
        sa.Column("changed_at", ts, nullable=False, server_default=sa.text("now()")),
        sa.Column(
            "window_start", ts, nullable=False, server_default=sa.text("'-infinity'::timestamptz")
        ),
        sa.Column("calls", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("failures", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("prev_calls", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("prev_failures", sa.Integer(), nullable=False, server_default="0"),
        sa.Column(
            "probe_jobs",
            sa.ARRAY(sa.BigInteger()),
            nullable=False,
            server_default=sa.text("'{}'::bigint[]"),
        ),
        sa.Column(
            "probe_executions",
            sa.ARRAY(sa.BigInteger()),
            nullable=False,
            server_default=sa.text("'{}'::bigint[]"),
        ),
        sa.PrimaryKeyConstraint("namespace", "kind", "key", name="breaker_pkey"),
        sa.CheckConstraint("state IN ('closed', 'open', 'half_open')", name="breaker_state_check"),
        schema=schema,
    )
    op.execute(admit_function(s))
    op.execute(record_function(s))


def _admit_0013(s: str) -> str:
    """0013's ``admit()``, as it was (read from its own file: history is frozen)."""
    path = Path(__file__).with_name("0013_admit_live_slots.py")
    spec = importlib.util.spec_from_file_location("acta_migration_0013", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module._function(s, module.EXACT))


def downgrade() -> None:
    schema = target_schema()
    s = f'"{schema}"'
    op.execute(_admit_0013(s))
    op.execute(f"DROP FUNCTION IF EXISTS {s}.breaker_record(text, jsonb)")
    op.drop_table("breaker", schema=schema)
