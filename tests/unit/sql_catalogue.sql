-- Every statement acta sends, as rendered (tests/unit/test_sql_catalogue.py).
-- Regenerate after an intended change: ACTA_UPDATE_SQL_SNAPSHOT=1 pytest tests/unit/test_sql_catalogue.py

-- claim.bounced_due_in: Seconds until the earliest *bounced* ready job of namespace $1 among kinds
--   $2 is due (negative: due already; None: none). A burst worker (``acta worker --burst``,
--   ``testing.drain``) stops only once none is left.
SELECT extract(epoch FROM j.run_at - now())::float8
FROM "acta".job AS j
WHERE j.namespace = $1 AND j.status = 'ready' AND j.kind = ANY($2::text[])
  AND j.execution_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM "acta".execution AS e
                  WHERE e.job_id = j.id AND e.id = j.execution_id)
ORDER BY j.run_at
LIMIT 1;

-- claim.claim_jobs: Claim: ONE statement takes up to $2 due rows of namespace $1 in claim order,
--   moves each to 'executing', counts the attempt, and mints its execution id (the fencing token).
--   SKIP LOCKED: two claimers never take the same row, and never wait for each other.
WITH suspect AS (
    -- Normally empty: one probe of the (empty) partial index of due suspects.
    SELECT id FROM "acta".job
    WHERE namespace = $1 AND status = 'ready' AND suspect AND run_at <= now()
    ORDER BY priority, run_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
),
plain AS (
    SELECT id FROM "acta".job
    WHERE namespace = $1 AND status = 'ready' AND run_at <= now() AND NOT suspect
      AND NOT EXISTS (SELECT 1 FROM suspect)
    ORDER BY priority, run_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
picked AS (
    SELECT id FROM suspect WHERE $5::bool AND $2 > 0
    UNION ALL
    SELECT id FROM plain
),
claimed AS (
    UPDATE "acta".job AS j SET
        status = 'executing',
        attempts = j.attempts + 1,
        execution_id = (((extract(epoch FROM pg_postmaster_start_time())::bigint % 8388608) << 40) | (nextval('acta.execution_id_seq') % 1099511627776)),
        worker_id = $3,
        claimed_at = now(),
        started_at = NULL,
        lease_expires_at = now() + make_interval(secs => $4)
    -- By primary key whatever the plan: a generic plan (which cannot see that
    -- LIMIT $2 is small) would otherwise hash the table against the picked ids.
    WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING j.id, j.execution_id, j.kind, j.args::text AS args, j.attempts,
              j.max_attempts, j.priority, j.concurrency_key, j.rate_key,
              j.lane_key, j.parent_id, j.signals::text AS signals, j.resumed,
              j.schedule_name, j.scheduled_at, j.trace_context,
              extract(epoch FROM now() - j.run_at)::float8 AS waited,
              j.run_at, j.suspect
)
-- In claim order (the executors take them so); columns in ClaimedJob's order.
SELECT c.id, c.execution_id, c.kind, c.args, c.attempts, c.max_attempts, c.priority,
       c.concurrency_key, c.rate_key, c.lane_key, c.parent_id, c.signals,
       c.resumed, c.schedule_name, c.scheduled_at, c.trace_context, c.waited,
       c.suspect AS alone, w.suspect_due
FROM (SELECT EXISTS (SELECT 1 FROM suspect) AS suspect_due) w
LEFT JOIN claimed c ON true
ORDER BY c.priority, c.run_at, c.id;

-- claim.claim_jobs_unpaused: ``claim_jobs`` skipping the paused kinds ($6).
WITH suspect AS (
    -- Normally empty: one probe of the (empty) partial index of due suspects.
    SELECT id FROM "acta".job
    WHERE namespace = $1 AND status = 'ready' AND suspect AND run_at <= now()
      AND kind <> ALL ($6::text[])
    ORDER BY priority, run_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
),
plain AS (
    SELECT id FROM "acta".job
    WHERE namespace = $1 AND status = 'ready' AND run_at <= now() AND NOT suspect
      AND NOT EXISTS (SELECT 1 FROM suspect)
      AND kind <> ALL ($6::text[])
    ORDER BY priority, run_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
picked AS (
    SELECT id FROM suspect WHERE $5::bool AND $2 > 0
    UNION ALL
    SELECT id FROM plain
),
claimed AS (
    UPDATE "acta".job AS j SET
        status = 'executing',
        attempts = j.attempts + 1,
        execution_id = (((extract(epoch FROM pg_postmaster_start_time())::bigint % 8388608) << 40) | (nextval('acta.execution_id_seq') % 1099511627776)),
        worker_id = $3,
        claimed_at = now(),
        started_at = NULL,
        lease_expires_at = now() + make_interval(secs => $4)
    -- By primary key whatever the plan: a generic plan (which cannot see that
    -- LIMIT $2 is small) would otherwise hash the table against the picked ids.
    WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING j.id, j.execution_id, j.kind, j.args::text AS args, j.attempts,
              j.max_attempts, j.priority, j.concurrency_key, j.rate_key,
              j.lane_key, j.parent_id, j.signals::text AS signals, j.resumed,
              j.schedule_name, j.scheduled_at, j.trace_context,
              extract(epoch FROM now() - j.run_at)::float8 AS waited,
              j.run_at, j.suspect
)
-- In claim order (the executors take them so); columns in ClaimedJob's order.
SELECT c.id, c.execution_id, c.kind, c.args, c.attempts, c.max_attempts, c.priority,
       c.concurrency_key, c.rate_key, c.lane_key, c.parent_id, c.signals,
       c.resumed, c.schedule_name, c.scheduled_at, c.trace_context, c.waited,
       c.suspect AS alone, w.suspect_due
FROM (SELECT EXISTS (SELECT 1 FROM suspect) AS suspect_due) w
LEFT JOIN claimed c ON true
ORDER BY c.priority, c.run_at, c.id;

-- claim.claim_plain: The hot claim: up to $2 due rows of namespace $1 that are not suspects, in
--   claim order, each moved to 'executing' with its attempt counted and its execution id minted. No
--   suspect probe: the claimer asks ``claim_jobs`` (which looks for a due suspect) at most once per
--   ``SUSPECT_PROBE_SECONDS`` and this one in between, so plain jobs pay one heap filter (``NOT
--   suspect``) on rows the claim reads anyway, not the probe's extra nodes on every claim (about 20
--   % more PostgreSQL CPU per job at 8 executors).
WITH picked AS (
    SELECT id FROM "acta".job
    WHERE namespace = $1 AND status = 'ready' AND run_at <= now() AND NOT suspect
    ORDER BY priority, run_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE "acta".job AS j SET
        status = 'executing',
        attempts = j.attempts + 1,
        execution_id = (((extract(epoch FROM pg_postmaster_start_time())::bigint % 8388608) << 40) | (nextval('acta.execution_id_seq') % 1099511627776)),
        worker_id = $3,
        claimed_at = now(),
        started_at = NULL,
        lease_expires_at = now() + make_interval(secs => $4)
    -- By primary key whatever the plan: a generic plan (which cannot see that
    -- LIMIT $2 is small) would otherwise hash the table against the picked ids.
    WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING j.id, j.execution_id, j.kind, j.args::text AS args, j.attempts,
              j.max_attempts, j.priority, j.concurrency_key, j.rate_key,
              j.lane_key, j.parent_id, j.signals::text AS signals, j.resumed,
              j.schedule_name, j.scheduled_at, j.trace_context,
              extract(epoch FROM now() - j.run_at)::float8 AS waited,
              j.run_at
)
-- In claim order (the executors take them so); columns in ClaimedJob's order.
SELECT id, execution_id, kind, args, attempts, max_attempts, priority,
       concurrency_key, rate_key, lane_key, parent_id, signals, resumed,
       schedule_name, scheduled_at, trace_context, waited, false AS alone
FROM claimed ORDER BY priority, run_at, id;

-- claim.claim_plain_lean: ``claim_plain`` for a worker with no OpenTelemetry SDK: the trace context
--   and the server-computed wait are not returned (NULL), so the hot claim neither reads the one
--   nor computes the other per row (together with the completion's feature parts, about 9 % of the
--   two hot statements' cost: ``python -m benchmarks.statements``).
WITH picked AS (
    SELECT id FROM "acta".job
    WHERE namespace = $1 AND status = 'ready' AND run_at <= now() AND NOT suspect
    ORDER BY priority, run_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE "acta".job AS j SET
        status = 'executing',
        attempts = j.attempts + 1,
        execution_id = (((extract(epoch FROM pg_postmaster_start_time())::bigint % 8388608) << 40) | (nextval('acta.execution_id_seq') % 1099511627776)),
        worker_id = $3,
        claimed_at = now(),
        started_at = NULL,
        lease_expires_at = now() + make_interval(secs => $4)
    -- By primary key whatever the plan: a generic plan (which cannot see that
    -- LIMIT $2 is small) would otherwise hash the table against the picked ids.
    WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING j.id, j.execution_id, j.kind, j.args::text AS args, j.attempts,
              j.max_attempts, j.priority, j.concurrency_key, j.rate_key,
              j.lane_key, j.parent_id, j.signals::text AS signals, j.resumed,
              j.schedule_name, j.scheduled_at, NULL::text AS trace_context, NULL::float8 AS waited,
              j.run_at
)
-- In claim order (the executors take them so); columns in ClaimedJob's order.
SELECT id, execution_id, kind, args, attempts, max_attempts, priority,
       concurrency_key, rate_key, lane_key, parent_id, signals, resumed,
       schedule_name, scheduled_at, trace_context, waited, false AS alone
FROM claimed ORDER BY priority, run_at, id;

-- claim.claim_plain_unpaused: ``claim_plain`` skipping the paused kinds ($5).
WITH picked AS (
    SELECT id FROM "acta".job
    WHERE namespace = $1 AND status = 'ready' AND run_at <= now() AND NOT suspect
      AND kind <> ALL ($5::text[])
    ORDER BY priority, run_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE "acta".job AS j SET
        status = 'executing',
        attempts = j.attempts + 1,
        execution_id = (((extract(epoch FROM pg_postmaster_start_time())::bigint % 8388608) << 40) | (nextval('acta.execution_id_seq') % 1099511627776)),
        worker_id = $3,
        claimed_at = now(),
        started_at = NULL,
        lease_expires_at = now() + make_interval(secs => $4)
    -- By primary key whatever the plan: a generic plan (which cannot see that
    -- LIMIT $2 is small) would otherwise hash the table against the picked ids.
    WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING j.id, j.execution_id, j.kind, j.args::text AS args, j.attempts,
              j.max_attempts, j.priority, j.concurrency_key, j.rate_key,
              j.lane_key, j.parent_id, j.signals::text AS signals, j.resumed,
              j.schedule_name, j.scheduled_at, j.trace_context,
              extract(epoch FROM now() - j.run_at)::float8 AS waited,
              j.run_at
)
-- In claim order (the executors take them so); columns in ClaimedJob's order.
SELECT id, execution_id, kind, args, attempts, max_attempts, priority,
       concurrency_key, rate_key, lane_key, parent_id, signals, resumed,
       schedule_name, scheduled_at, trace_context, waited, false AS alone
FROM claimed ORDER BY priority, run_at, id;

-- claim.next_due_in: Seconds until the next ready row of namespace $1 is due (None: none is
--   waiting).
SELECT extract(epoch FROM min(run_at) - now())::float8
FROM "acta".job WHERE namespace = $1 AND status = 'ready';

-- claim.next_due_in_unpaused: ``next_due_in`` skipping the paused kinds ($2).
SELECT extract(epoch FROM min(run_at) - now())::float8
FROM "acta".job WHERE namespace = $1 AND status = 'ready'
      AND kind <> ALL ($2::text[]);

-- complete.complete_executions: complete_executions: ONE statement writes every completion of a
--   batch, whatever its shape (see the module's parts). Guard: (job, execution) and status
--   'executing'.
WITH c AS (
    SELECT (e->>0)::bigint AS job_id,
           (e->>1)::bigint AS execution_id,
           (e->>2)::text AS outcome,
           (e->>3)::text AS status,
           (e->>4)::int AS attempt,
           (e->>5)::float8 AS delay,
           (e->>6)::bool AS refund,
           (e->>7)::text AS result_json,
           (e->>8)::text AS error_type,
           (e->>9)::text AS error_message,
           (e->>10)::text AS traceback,
           (e->>11)::float8 AS ran_seconds,
           (e->>12)::bool AS record,
           (e->>13)::bool AS cancel_wins,
           (e->>14)::bool AS keep_last_error,
           (e->>15)::bigint AS ran_by,
           (e->>16)::text AS awaited_signal,
           (e->>17)::int AS children
    FROM jsonb_array_elements($1::jsonb) AS e
),
f AS (SELECT key::bigint AS job_id, value AS features FROM jsonb_each($3::jsonb)),
done AS (
    UPDATE "acta".job AS j SET
        -- c.cancel_wins: Python's rule (an operator's cancel wins over a retry);
        -- the row's cancel_requested is only known here.
        status = CASE WHEN c.cancel_wins AND j.cancel_requested THEN 'cancelled'
                      WHEN (c.awaited_signal IS NOT NULL AND coalesce(j.signals ? c.awaited_signal, false)) THEN 'ready'
                      ELSE c.status END,
        attempts = CASE WHEN c.refund THEN j.attempts - 1 ELSE j.attempts END,
        run_at = CASE WHEN c.status = 'ready'
                      THEN now() + make_interval(secs => c.delay)
                      WHEN c.status <> 'waiting' OR c.awaited_signal IS NULL
                      THEN j.run_at
                      WHEN (c.awaited_signal IS NOT NULL AND coalesce(j.signals ? c.awaited_signal, false)) THEN now()
                      WHEN c.delay IS NULL THEN 'infinity'
                      ELSE now() + make_interval(secs => c.delay) END,
        result = CASE WHEN c.status = 'succeeded' THEN c.result_json::jsonb
                      ELSE j.result END,
        -- An operator's cancel record (who, why: session.cancel) stays with it.
        last_error = CASE WHEN c.error_type IS NULL OR c.keep_last_error
                          THEN j.last_error
                          ELSE jsonb_build_object('type', c.error_type,
                                                  'message', c.error_message)
                               || CASE WHEN j.cancel_requested
                                            AND j.last_error -> 'cancel' IS NOT NULL
                                       THEN jsonb_build_object(
                                           'cancel', j.last_error -> 'cancel')
                                       ELSE '{}'::jsonb END END,
        finished_at = CASE WHEN c.status IN ('succeeded', 'failed', 'cancelled')
                             OR (c.cancel_wins AND j.cancel_requested)
                           THEN now() END,
        -- A durable wait (docs/waits.md): what it waits for, and why it next runs.
        awaited_signal = CASE WHEN c.status = 'waiting' AND NOT (c.awaited_signal IS NOT NULL AND coalesce(j.signals ? c.awaited_signal, false))
                                   AND NOT (c.cancel_wins AND j.cancel_requested)
                              THEN c.awaited_signal END,
        pending_children = CASE WHEN c.children IS NULL
                                     OR (c.cancel_wins AND j.cancel_requested)
                                THEN j.pending_children ELSE c.children END,
        resumed = CASE WHEN c.status <> 'waiting' THEN j.resumed
                       WHEN (c.awaited_signal IS NOT NULL AND coalesce(j.signals ? c.awaited_signal, false)) THEN 'signal' END,
        -- The attempt that ends the job is kept on its row, not in an Execution
        -- row (migration 0015): its outcome, error, worker and start.
        outcome = CASE WHEN (c.record AND NOT c.refund AND c.attempt = j.attempts
         AND (c.status IN ('succeeded', 'failed', 'cancelled') OR (c.cancel_wins AND j.cancel_requested))) THEN c.outcome END,
        attempt_error = CASE WHEN (c.record AND NOT c.refund AND c.attempt = j.attempts
         AND (c.status IN ('succeeded', 'failed', 'cancelled') OR (c.cancel_wins AND j.cancel_requested))) AND c.error_type IS NOT NULL
                             THEN jsonb_build_object('type', c.error_type,
                                                     'message', c.error_message,
                                                     'traceback', c.traceback) END,
        started_at = CASE WHEN (c.record AND NOT c.refund AND c.attempt = j.attempts
         AND (c.status IN ('succeeded', 'failed', 'cancelled') OR (c.cancel_wins AND j.cancel_requested))) AND c.ran_seconds IS NOT NULL
                          THEN now() - make_interval(secs => c.ran_seconds)
                          ELSE j.started_at END,
        worker_id = CASE WHEN (c.record AND NOT c.refund AND c.attempt = j.attempts
         AND (c.status IN ('succeeded', 'failed', 'cancelled') OR (c.cancel_wins AND j.cancel_requested))) THEN coalesce(c.ran_by, $2) END,
        lease_expires_at = NULL
    FROM c
    -- Each row is looked up by primary key (id = ANY of the batch's ids): the
    -- planner must never scan the executing set, whose statistics are stale
    -- and whose index entries grow dead with every drained row.
    WHERE j.id = ANY (ARRAY(SELECT c.job_id FROM c))
      AND j.id = c.job_id AND j.execution_id = c.execution_id
      AND j.status = 'executing'
    RETURNING j.id, j.status, j.claimed_at, j.started_at, c.execution_id, c.attempt,
              c.ran_seconds, c.outcome, c.error_type, c.error_message, c.traceback,
              c.record AND j.outcome IS NULL AS record, c.ran_by
),
history AS (
    INSERT INTO "acta".execution AS e (id, job_id, attempt, worker_id, claimed_at,
        started_at, finished_at, outcome, error_type, error_message, traceback)
    SELECT d.execution_id, d.id, d.attempt, coalesce(d.ran_by, $2), d.claimed_at,
           CASE WHEN d.ran_seconds IS NULL THEN d.started_at
                ELSE now() - make_interval(secs => d.ran_seconds) END,
           now(), d.outcome, d.error_type, d.error_message, d.traceback
    FROM done AS d
    WHERE d.record
),
spawn AS (
    INSERT INTO "acta".job (namespace, kind, args, priority, run_at, max_attempts,
                         concurrency_key, rate_key, lane_key, parent_id,
                         parent_execution_id)
    SELECT x.v->>'namespace', x.v->>'kind', x.v->'args',
           coalesce((x.v->>'priority')::smallint, 0),
           coalesce((x.v->>'run_at')::timestamptz,
                    now() + make_interval(secs => coalesce((x.v->>'delay')::float8, 0))),
           (x.v->>'max_attempts')::int, x.v->>'concurrency_key', x.v->>'rate_key',
           x.v->>'lane_key', d.id, d.execution_id
    FROM f
    JOIN done AS d ON d.id = f.job_id AND d.status = 'waiting'
    CROSS JOIN LATERAL jsonb_array_elements(f.features->'children')
        WITH ORDINALITY AS x(v, ord)
    ORDER BY d.id, x.ord),
next_fire AS (
    INSERT INTO "acta".job AS nf (namespace, kind, args, run_at, schedule_name,
                               scheduled_at, priority, concurrency_key, rate_key, lane_key)
    -- One row per tick: a second proposal of a tick in one statement would be an
    -- error under ON CONFLICT DO UPDATE (one chain per schedule makes it moot).
    SELECT DISTINCT ON (sc.name, (f.features->'next'->>'tick')::timestamptz)
           sc.namespace, sc.kind, sc.args, (f.features->'next'->>'tick')::timestamptz,
           sc.name, (f.features->'next'->>'tick')::timestamptz, sc.priority, sc.concurrency_key, sc.rate_key, sc.lane_key
    FROM f
    JOIN done AS d ON d.id = f.job_id
    JOIN (
        SELECT sc.* FROM "acta".schedule AS sc
        WHERE sc.enabled AND (sc.namespace, sc.name) IN (SELECT f.features->'next'->>'namespace', f.features->'next'->>'schedule' FROM f WHERE f.features ? 'next')
        ORDER BY sc.namespace, sc.name
        FOR SHARE OF sc) AS sc
      ON sc.namespace = f.features->'next'->>'namespace'
     AND sc.name = f.features->'next'->>'schedule'
    WHERE NOT EXISTS (
        SELECT 1 FROM "acta".job AS later
        WHERE later.namespace = sc.namespace AND later.schedule_name = sc.name
          AND later.scheduled_at > (f.features->'next'->>'after')::timestamptz
          AND NOT (later.status = 'cancelled' AND later.attempts = 0)
    )
    ON CONFLICT (namespace, schedule_name, scheduled_at) WHERE schedule_name IS NOT NULL
    DO UPDATE SET status = 'ready', finished_at = NULL, cancel_requested = false,
                  run_at = excluded.run_at, kind = excluded.kind, args = excluded.args, priority = excluded.priority, concurrency_key = excluded.concurrency_key, rate_key = excluded.rate_key, lane_key = excluded.lane_key
    WHERE (nf.status = 'cancelled' AND nf.attempts = 0))
SELECT id, status FROM done;

-- complete.complete_plain: ``complete_executions`` without the feature parts, for a batch none of
--   whose completions carries a feature (``$3`` is ``{}``): the parts would find nothing to do, but
--   each INSERT part is still planned and opened on every call. Same inputs, same guard, same
--   answer; the worker picks it by the encoded features (``WorkerStore``).
WITH c AS (
    SELECT (e->>0)::bigint AS job_id,
           (e->>1)::bigint AS execution_id,
           (e->>2)::text AS outcome,
           (e->>3)::text AS status,
           (e->>4)::int AS attempt,
           (e->>5)::float8 AS delay,
           (e->>6)::bool AS refund,
           (e->>7)::text AS result_json,
           (e->>8)::text AS error_type,
           (e->>9)::text AS error_message,
           (e->>10)::text AS traceback,
           (e->>11)::float8 AS ran_seconds,
           (e->>12)::bool AS record,
           (e->>13)::bool AS cancel_wins,
           (e->>14)::bool AS keep_last_error,
           (e->>15)::bigint AS ran_by,
           (e->>16)::text AS awaited_signal,
           (e->>17)::int AS children
    FROM jsonb_array_elements($1::jsonb) AS e
),
f AS (SELECT key::bigint AS job_id, value AS features FROM jsonb_each($3::jsonb)),
done AS (
    UPDATE "acta".job AS j SET
        -- c.cancel_wins: Python's rule (an operator's cancel wins over a retry);
        -- the row's cancel_requested is only known here.
        status = CASE WHEN c.cancel_wins AND j.cancel_requested THEN 'cancelled'
                      WHEN (c.awaited_signal IS NOT NULL AND coalesce(j.signals ? c.awaited_signal, false)) THEN 'ready'
                      ELSE c.status END,
        attempts = CASE WHEN c.refund THEN j.attempts - 1 ELSE j.attempts END,
        run_at = CASE WHEN c.status = 'ready'
                      THEN now() + make_interval(secs => c.delay)
                      WHEN c.status <> 'waiting' OR c.awaited_signal IS NULL
                      THEN j.run_at
                      WHEN (c.awaited_signal IS NOT NULL AND coalesce(j.signals ? c.awaited_signal, false)) THEN now()
                      WHEN c.delay IS NULL THEN 'infinity'
                      ELSE now() + make_interval(secs => c.delay) END,
        result = CASE WHEN c.status = 'succeeded' THEN c.result_json::jsonb
                      ELSE j.result END,
        -- An operator's cancel record (who, why: session.cancel) stays with it.
        last_error = CASE WHEN c.error_type IS NULL OR c.keep_last_error
                          THEN j.last_error
                          ELSE jsonb_build_object('type', c.error_type,
                                                  'message', c.error_message)
                               || CASE WHEN j.cancel_requested
                                            AND j.last_error -> 'cancel' IS NOT NULL
                                       THEN jsonb_build_object(
                                           'cancel', j.last_error -> 'cancel')
                                       ELSE '{}'::jsonb END END,
        finished_at = CASE WHEN c.status IN ('succeeded', 'failed', 'cancelled')
                             OR (c.cancel_wins AND j.cancel_requested)
                           THEN now() END,
        -- A durable wait (docs/waits.md): what it waits for, and why it next runs.
        awaited_signal = CASE WHEN c.status = 'waiting' AND NOT (c.awaited_signal IS NOT NULL AND coalesce(j.signals ? c.awaited_signal, false))
                                   AND NOT (c.cancel_wins AND j.cancel_requested)
                              THEN c.awaited_signal END,
        pending_children = CASE WHEN c.children IS NULL
                                     OR (c.cancel_wins AND j.cancel_requested)
                                THEN j.pending_children ELSE c.children END,
        resumed = CASE WHEN c.status <> 'waiting' THEN j.resumed
                       WHEN (c.awaited_signal IS NOT NULL AND coalesce(j.signals ? c.awaited_signal, false)) THEN 'signal' END,
        -- The attempt that ends the job is kept on its row, not in an Execution
        -- row (migration 0015): its outcome, error, worker and start.
        outcome = CASE WHEN (c.record AND NOT c.refund AND c.attempt = j.attempts
         AND (c.status IN ('succeeded', 'failed', 'cancelled') OR (c.cancel_wins AND j.cancel_requested))) THEN c.outcome END,
        attempt_error = CASE WHEN (c.record AND NOT c.refund AND c.attempt = j.attempts
         AND (c.status IN ('succeeded', 'failed', 'cancelled') OR (c.cancel_wins AND j.cancel_requested))) AND c.error_type IS NOT NULL
                             THEN jsonb_build_object('type', c.error_type,
                                                     'message', c.error_message,
                                                     'traceback', c.traceback) END,
        started_at = CASE WHEN (c.record AND NOT c.refund AND c.attempt = j.attempts
         AND (c.status IN ('succeeded', 'failed', 'cancelled') OR (c.cancel_wins AND j.cancel_requested))) AND c.ran_seconds IS NOT NULL
                          THEN now() - make_interval(secs => c.ran_seconds)
                          ELSE j.started_at END,
        worker_id = CASE WHEN (c.record AND NOT c.refund AND c.attempt = j.attempts
         AND (c.status IN ('succeeded', 'failed', 'cancelled') OR (c.cancel_wins AND j.cancel_requested))) THEN coalesce(c.ran_by, $2) END,
        lease_expires_at = NULL
    FROM c
    -- Each row is looked up by primary key (id = ANY of the batch's ids): the
    -- planner must never scan the executing set, whose statistics are stale
    -- and whose index entries grow dead with every drained row.
    WHERE j.id = ANY (ARRAY(SELECT c.job_id FROM c))
      AND j.id = c.job_id AND j.execution_id = c.execution_id
      AND j.status = 'executing'
    RETURNING j.id, j.status, j.claimed_at, j.started_at, c.execution_id, c.attempt,
              c.ran_seconds, c.outcome, c.error_type, c.error_message, c.traceback,
              c.record AND j.outcome IS NULL AS record, c.ran_by
),
history AS (
    INSERT INTO "acta".execution AS e (id, job_id, attempt, worker_id, claimed_at,
        started_at, finished_at, outcome, error_type, error_message, traceback)
    SELECT d.execution_id, d.id, d.attempt, coalesce(d.ran_by, $2), d.claimed_at,
           CASE WHEN d.ran_seconds IS NULL THEN d.started_at
                ELSE now() - make_interval(secs => d.ran_seconds) END,
           now(), d.outcome, d.error_type, d.error_message, d.traceback
    FROM done AS d
    WHERE d.record
)
SELECT id, status FROM done;

-- complete.next_fire: ``next_fire``: the fire that follows a schedule's fire, enqueued by the
--   fire's completion in the same statement, so a fire and its successor commit together (a fire
--   that fails still schedules the next tick). Input: ``f.features->'next'`` (namespace, schedule,
--   this fire's tick ``after``, the next ``tick``: ``schedules.successor_feature``). Guard: only
--   for a fire the fenced finish applied, only while the schedule is stored and enabled, and only
--   by the fire's FIRST completion (no fire of the schedule after this one's tick exists yet: a
--   retried fire's later completions enqueue nothing); the tick's unique key
--   (``job_schedule_tick_key``) makes a second insert of a tick a no-op (I10), unless the tick's
--   row is a fire cancelled before it started: made ready again (``schedules.revive_on_conflict``;
--   such a fire, of a later tick, does not count as a later fire either: a cron changed while
--   paused). The fire takes the schedule's stored priority and keys (``schedules.FIRE``).
INSERT INTO "acta".job AS nf (namespace, kind, args, run_at, schedule_name,
                           scheduled_at, priority, concurrency_key, rate_key, lane_key)
-- One row per tick: a second proposal of a tick in one statement would be an
-- error under ON CONFLICT DO UPDATE (one chain per schedule makes it moot).
SELECT DISTINCT ON (sc.name, (f.features->'next'->>'tick')::timestamptz)
       sc.namespace, sc.kind, sc.args, (f.features->'next'->>'tick')::timestamptz,
       sc.name, (f.features->'next'->>'tick')::timestamptz, sc.priority, sc.concurrency_key, sc.rate_key, sc.lane_key
FROM f
JOIN done AS d ON d.id = f.job_id
JOIN (
    SELECT sc.* FROM "acta".schedule AS sc
    WHERE sc.enabled AND (sc.namespace, sc.name) IN (SELECT f.features->'next'->>'namespace', f.features->'next'->>'schedule' FROM f WHERE f.features ? 'next')
    ORDER BY sc.namespace, sc.name
    FOR SHARE OF sc) AS sc
  ON sc.namespace = f.features->'next'->>'namespace'
 AND sc.name = f.features->'next'->>'schedule'
WHERE NOT EXISTS (
    SELECT 1 FROM "acta".job AS later
    WHERE later.namespace = sc.namespace AND later.schedule_name = sc.name
      AND later.scheduled_at > (f.features->'next'->>'after')::timestamptz
      AND NOT (later.status = 'cancelled' AND later.attempts = 0)
)
ON CONFLICT (namespace, schedule_name, scheduled_at) WHERE schedule_name IS NOT NULL
DO UPDATE SET status = 'ready', finished_at = NULL, cancel_requested = false,
              run_at = excluded.run_at, kind = excluded.kind, args = excluded.args, priority = excluded.priority, concurrency_key = excluded.concurrency_key, rate_key = excluded.rate_key, lane_key = excluded.lane_key
WHERE (nf.status = 'cancelled' AND nf.attempts = 0);

-- complete.spawn_children: ``spawn``: the children of a parent that returned ``WaitForChildren``,
--   inserted in spawn order with ``parent_id`` and ``parent_execution_id`` set (the wait's attempt:
--   a child counts toward that wait only, migration 0012), in the same statement that parks the
--   parent with their count (``Completion.children``). Guard: only for a parent the fenced finish
--   applied AND left ``waiting`` (a cancel that won spawns nothing). Input:
--   ``f.features->'children'``, one object per child (``waits.child_row``).
INSERT INTO "acta".job (namespace, kind, args, priority, run_at, max_attempts,
                     concurrency_key, rate_key, lane_key, parent_id,
                     parent_execution_id)
SELECT x.v->>'namespace', x.v->>'kind', x.v->'args',
       coalesce((x.v->>'priority')::smallint, 0),
       coalesce((x.v->>'run_at')::timestamptz,
                now() + make_interval(secs => coalesce((x.v->>'delay')::float8, 0))),
       (x.v->>'max_attempts')::int, x.v->>'concurrency_key', x.v->>'rate_key',
       x.v->>'lane_key', d.id, d.execution_id
FROM f
JOIN done AS d ON d.id = f.job_id AND d.status = 'waiting'
CROSS JOIN LATERAL jsonb_array_elements(f.features->'children')
    WITH ORDINALITY AS x(v, ord)
ORDER BY d.id, x.ord;

-- heartbeat.heartbeat: The heartbeat: ONE statement renews the held (job, execution) pairs, records
--   which attempts have started, refreshes the worker row, takes the namespace's recovery pass when
--   it is due, wakes the namespace's signal waits past their deadline
--   (:func:`waits.wake_timed_out`), and reports the definitions version, as ONE row of named
--   columns. Rows locked by another transaction are skipped, not waited for: they show up among the
--   present pairs but not the renewed ones, and keep their deadline for the next beat.
WITH held AS (
    SELECT * FROM unnest($2::bigint[], $3::bigint[], $4::bool[])
        AS h(job_id, execution_id, started)
),
lockable AS (
    -- id = ANY($2): by primary key whatever the statistics say of 'executing'.
    SELECT j.id FROM "acta".job j
    JOIN held h ON j.id = h.job_id AND j.execution_id = h.execution_id
    WHERE j.id = ANY ($2::bigint[]) AND j.status = 'executing'
    FOR UPDATE OF j SKIP LOCKED
),
renewed AS (
    UPDATE "acta".job AS j SET
        lease_expires_at = now() + make_interval(secs => $5),
        started_at = CASE WHEN h.started THEN coalesce(j.started_at, now())
                          ELSE j.started_at END
    FROM lockable, held h
    WHERE j.id = lockable.id AND h.job_id = j.id
    RETURNING j.id, j.execution_id, j.cancel_requested
),
present AS (
    SELECT j.id, j.execution_id FROM "acta".job j
    JOIN held h ON j.id = h.job_id AND j.execution_id = h.execution_id
    WHERE j.id = ANY ($2::bigint[]) AND j.status = 'executing'
),
beat AS (
    UPDATE "acta".worker SET heartbeat_at = now(), status = 'running'
    WHERE id = $6
    RETURNING id
),
recovery AS (
    -- The next pass is due after the SHORTEST recovery interval of the namespace's
    -- running workers, not this worker's own: a 45 s worker taking the pass would
    -- otherwise make 0.5 s workers wait 180 s to recover a crashed peer's rows,
    -- whose 2 s leases ran out long before (I1, no lost job). A registering
    -- worker pulls a later due time in to its own interval (register_worker).
    UPDATE "acta".namespace SET recovery_due_at = now() + make_interval(secs => least(
        $7,
        (SELECT min(w.heartbeat_seconds) * $11 FROM "acta".worker w
         WHERE w.namespace = $1 AND w.status = 'running')))
    WHERE name = $1 AND recovery_due_at <= now()
    RETURNING name
),
lock_holds AS (
    SELECT * FROM unnest($8::text[], $9::bigint[], $10::bigint[])
        AS l(name, job_id, execution_id)
),
locks_renewed AS (
    UPDATE "acta".lock AS k SET lease_expires_at = now() + make_interval(secs => $5)
    FROM lock_holds l
    WHERE k.namespace = $1 AND k.name = l.name
      AND k.job_id = l.job_id AND k.execution_id = l.execution_id
    RETURNING k.name, k.job_id, k.execution_id
),
woken AS (
    UPDATE "acta".job AS j SET status = 'ready', run_at = now(), resumed = 'timeout',
                             awaited_signal = NULL
    WHERE j.id IN (
        SELECT w.id FROM "acta".job AS w
        WHERE w.namespace = $1 AND w.status = 'waiting'
          AND w.awaited_signal IS NOT NULL AND w.run_at <= now()
        ORDER BY w.run_at
        LIMIT 1000
        FOR UPDATE SKIP LOCKED
    )
      AND j.status = 'waiting' AND j.awaited_signal IS NOT NULL
    RETURNING j.id
)
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
       (SELECT definitions_version FROM "acta".namespace WHERE name = $1)
           AS definitions_version,
       EXISTS (SELECT 1 FROM recovery) AS recovery_due,
       EXISTS (SELECT 1 FROM beat) AS worker_found,
       (SELECT count(*) FROM woken) AS woken;

-- heartbeat.measure_depth: The queue-depth gauge's measure: ONE per beat interval ($2 seconds) per
--   namespace ($1), taken by the first worker with a metrics SDK whose beat finds it due (a worker
--   without one never sends this). Answers the namespace's ready, executing and waiting jobs by
--   kind and status as JSON, or no row when another worker measured it within the interval. (Not a
--   CTE of the heartbeat: that statement's recovery turn updates the same namespace row, and one
--   statement updates a row once.)
WITH turn AS (
    UPDATE "acta".namespace SET depth_due_at = now() + make_interval(secs => $2)
    WHERE name = $1 AND depth_due_at <= now()
    RETURNING name
)
SELECT coalesce((
    SELECT json_agg(json_build_array(d.kind, d.status, d.n))
    FROM (
        SELECT kind, status, count(*) AS n FROM "acta".job
        WHERE namespace = $1 AND status IN ('ready', 'executing', 'waiting')
        GROUP BY kind, status
    ) AS d
), '[]')::text AS depth
FROM turn;

-- recovery.fail_deadlocked: Repair, step 3: cycles in the wait-for graph of namespace $1, one
--   waiting parent of each failed with ``DeadlockDetected`` (docs/waits.md).
WITH RECURSIVE queued AS MATERIALIZED (
    SELECT q.id, q.lane_key, q.parent_id
    FROM "acta".job AS q JOIN "acta".job AS p ON p.id = q.parent_id
    WHERE q.namespace = $1 AND q.status = 'waiting' AND q.lane_key IS NOT NULL
      AND q.awaited_signal IS NULL AND q.pending_children = 0
      AND p.status = 'waiting' AND p.pending_children > 0
      AND (q.parent_execution_id IS NULL OR q.parent_execution_id = p.execution_id)
),
heads AS MATERIALIZED (
    SELECT l.lane_key, h.id
    FROM (SELECT DISTINCT lane_key FROM queued) AS l
    CROSS JOIN LATERAL (
        SELECT j.id FROM "acta".job AS j
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
    JOIN "acta".job AS c ON c.id = up.a
    JOIN "acta".job AS p ON p.id = c.parent_id
    WHERE p.status = 'waiting' AND p.pending_children > 0 AND (c.parent_execution_id IS NULL OR c.parent_execution_id = p.execution_id)
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
    SELECT v.*, j.execution_id FROM victims AS v JOIN "acta".job AS j ON j.id = v.id
)
UPDATE "acta".job AS j SET
    status = 'failed', finished_at = now(), pending_children = 0,
    last_error = jsonb_build_object(
        'type', 'DeadlockDetected',
        'message', format(
            'deadlock detected: job %s waited for its child job %s, queued in lane '
            '%s behind job %s, whose own wait leads back to job %s; failed as the '
            'youngest waiting parent of the cycle, so that its lanes move on (see '
            'docs/waits.md)', v.id, v.child, v.lane_key, v.head, v.id))
FROM seen AS v
WHERE j.id = v.id AND j.status = 'waiting' AND j.pending_children > 0
  AND j.execution_id IS NOT DISTINCT FROM v.execution_id
RETURNING j.id, v.child, v.lane_key, v.head;

-- recovery.finish_expired: Recovery, step 1b: the completions Python built for the expired rows,
--   applied by the same parts as complete_executions (so the same terminal effects follow); the
--   jobs of $4 (ids Python decided to isolate) become suspects in the same fenced write, so no
--   claim can take one between its loss and its mark, and the flag never changes during an attempt
--   (recovery reads it as "this attempt was claimed alone"). Guard: the fenced finish's (job,
--   execution, 'executing'), plus the lease still expired, so a row renewed since step 1a (its
--   worker was only slow) is left alone.
WITH c AS (
    SELECT (e->>0)::bigint AS job_id,
           (e->>1)::bigint AS execution_id,
           (e->>2)::text AS outcome,
           (e->>3)::text AS status,
           (e->>4)::int AS attempt,
           (e->>5)::float8 AS delay,
           (e->>6)::bool AS refund,
           (e->>7)::text AS result_json,
           (e->>8)::text AS error_type,
           (e->>9)::text AS error_message,
           (e->>10)::text AS traceback,
           (e->>11)::float8 AS ran_seconds,
           (e->>12)::bool AS record,
           (e->>13)::bool AS cancel_wins,
           (e->>14)::bool AS keep_last_error,
           (e->>15)::bigint AS ran_by,
           (e->>16)::text AS awaited_signal,
           (e->>17)::int AS children
    FROM jsonb_array_elements($1::jsonb) AS e
),
f AS (SELECT key::bigint AS job_id, value AS features FROM jsonb_each($3::jsonb)),
done AS (
    UPDATE "acta".job AS j SET
        -- c.cancel_wins: Python's rule (an operator's cancel wins over a retry);
        -- the row's cancel_requested is only known here.
        status = CASE WHEN c.cancel_wins AND j.cancel_requested THEN 'cancelled'
                      WHEN (c.awaited_signal IS NOT NULL AND coalesce(j.signals ? c.awaited_signal, false)) THEN 'ready'
                      ELSE c.status END,
        attempts = CASE WHEN c.refund THEN j.attempts - 1 ELSE j.attempts END,
        run_at = CASE WHEN c.status = 'ready'
                      THEN now() + make_interval(secs => c.delay)
                      WHEN c.status <> 'waiting' OR c.awaited_signal IS NULL
                      THEN j.run_at
                      WHEN (c.awaited_signal IS NOT NULL AND coalesce(j.signals ? c.awaited_signal, false)) THEN now()
                      WHEN c.delay IS NULL THEN 'infinity'
                      ELSE now() + make_interval(secs => c.delay) END,
        result = CASE WHEN c.status = 'succeeded' THEN c.result_json::jsonb
                      ELSE j.result END,
        -- An operator's cancel record (who, why: session.cancel) stays with it.
        last_error = CASE WHEN c.error_type IS NULL OR c.keep_last_error
                          THEN j.last_error
                          ELSE jsonb_build_object('type', c.error_type,
                                                  'message', c.error_message)
                               || CASE WHEN j.cancel_requested
                                            AND j.last_error -> 'cancel' IS NOT NULL
                                       THEN jsonb_build_object(
                                           'cancel', j.last_error -> 'cancel')
                                       ELSE '{}'::jsonb END END,
        finished_at = CASE WHEN c.status IN ('succeeded', 'failed', 'cancelled')
                             OR (c.cancel_wins AND j.cancel_requested)
                           THEN now() END,
        -- A durable wait (docs/waits.md): what it waits for, and why it next runs.
        awaited_signal = CASE WHEN c.status = 'waiting' AND NOT (c.awaited_signal IS NOT NULL AND coalesce(j.signals ? c.awaited_signal, false))
                                   AND NOT (c.cancel_wins AND j.cancel_requested)
                              THEN c.awaited_signal END,
        pending_children = CASE WHEN c.children IS NULL
                                     OR (c.cancel_wins AND j.cancel_requested)
                                THEN j.pending_children ELSE c.children END,
        resumed = CASE WHEN c.status <> 'waiting' THEN j.resumed
                       WHEN (c.awaited_signal IS NOT NULL AND coalesce(j.signals ? c.awaited_signal, false)) THEN 'signal' END,
        -- The attempt that ends the job is kept on its row, not in an Execution
        -- row (migration 0015): its outcome, error, worker and start.
        outcome = CASE WHEN (c.record AND NOT c.refund AND c.attempt = j.attempts
         AND (c.status IN ('succeeded', 'failed', 'cancelled') OR (c.cancel_wins AND j.cancel_requested))) THEN c.outcome END,
        attempt_error = CASE WHEN (c.record AND NOT c.refund AND c.attempt = j.attempts
         AND (c.status IN ('succeeded', 'failed', 'cancelled') OR (c.cancel_wins AND j.cancel_requested))) AND c.error_type IS NOT NULL
                             THEN jsonb_build_object('type', c.error_type,
                                                     'message', c.error_message,
                                                     'traceback', c.traceback) END,
        started_at = CASE WHEN (c.record AND NOT c.refund AND c.attempt = j.attempts
         AND (c.status IN ('succeeded', 'failed', 'cancelled') OR (c.cancel_wins AND j.cancel_requested))) AND c.ran_seconds IS NOT NULL
                          THEN now() - make_interval(secs => c.ran_seconds)
                          ELSE j.started_at END,
        worker_id = CASE WHEN (c.record AND NOT c.refund AND c.attempt = j.attempts
         AND (c.status IN ('succeeded', 'failed', 'cancelled') OR (c.cancel_wins AND j.cancel_requested))) THEN coalesce(c.ran_by, $2) END,
        lease_expires_at = NULL,
        suspect = j.suspect OR j.id = ANY ($4::bigint[])
    FROM c
    -- Each row is looked up by primary key (id = ANY of the batch's ids): the
    -- planner must never scan the executing set, whose statistics are stale
    -- and whose index entries grow dead with every drained row.
    WHERE j.id = ANY (ARRAY(SELECT c.job_id FROM c))
      AND j.id = c.job_id AND j.execution_id = c.execution_id
      AND j.status = 'executing' AND (j.lease_expires_at < now()) IS TRUE
    RETURNING j.id, j.status, j.claimed_at, j.started_at, c.execution_id, c.attempt,
              c.ran_seconds, c.outcome, c.error_type, c.error_message, c.traceback,
              c.record AND j.outcome IS NULL AS record, c.ran_by
),
history AS (
    INSERT INTO "acta".execution AS e (id, job_id, attempt, worker_id, claimed_at,
        started_at, finished_at, outcome, error_type, error_message, traceback)
    SELECT d.execution_id, d.id, d.attempt, coalesce(d.ran_by, $2), d.claimed_at,
           CASE WHEN d.ran_seconds IS NULL THEN d.started_at
                ELSE now() - make_interval(secs => d.ran_seconds) END,
           now(), d.outcome, d.error_type, d.error_message, d.traceback
    FROM done AS d
    WHERE d.record
),
spawn AS (
    INSERT INTO "acta".job (namespace, kind, args, priority, run_at, max_attempts,
                         concurrency_key, rate_key, lane_key, parent_id,
                         parent_execution_id)
    SELECT x.v->>'namespace', x.v->>'kind', x.v->'args',
           coalesce((x.v->>'priority')::smallint, 0),
           coalesce((x.v->>'run_at')::timestamptz,
                    now() + make_interval(secs => coalesce((x.v->>'delay')::float8, 0))),
           (x.v->>'max_attempts')::int, x.v->>'concurrency_key', x.v->>'rate_key',
           x.v->>'lane_key', d.id, d.execution_id
    FROM f
    JOIN done AS d ON d.id = f.job_id AND d.status = 'waiting'
    CROSS JOIN LATERAL jsonb_array_elements(f.features->'children')
        WITH ORDINALITY AS x(v, ord)
    ORDER BY d.id, x.ord),
next_fire AS (
    INSERT INTO "acta".job AS nf (namespace, kind, args, run_at, schedule_name,
                               scheduled_at, priority, concurrency_key, rate_key, lane_key)
    -- One row per tick: a second proposal of a tick in one statement would be an
    -- error under ON CONFLICT DO UPDATE (one chain per schedule makes it moot).
    SELECT DISTINCT ON (sc.name, (f.features->'next'->>'tick')::timestamptz)
           sc.namespace, sc.kind, sc.args, (f.features->'next'->>'tick')::timestamptz,
           sc.name, (f.features->'next'->>'tick')::timestamptz, sc.priority, sc.concurrency_key, sc.rate_key, sc.lane_key
    FROM f
    JOIN done AS d ON d.id = f.job_id
    JOIN (
        SELECT sc.* FROM "acta".schedule AS sc
        WHERE sc.enabled AND (sc.namespace, sc.name) IN (SELECT f.features->'next'->>'namespace', f.features->'next'->>'schedule' FROM f WHERE f.features ? 'next')
        ORDER BY sc.namespace, sc.name
        FOR SHARE OF sc) AS sc
      ON sc.namespace = f.features->'next'->>'namespace'
     AND sc.name = f.features->'next'->>'schedule'
    WHERE NOT EXISTS (
        SELECT 1 FROM "acta".job AS later
        WHERE later.namespace = sc.namespace AND later.schedule_name = sc.name
          AND later.scheduled_at > (f.features->'next'->>'after')::timestamptz
          AND NOT (later.status = 'cancelled' AND later.attempts = 0)
    )
    ON CONFLICT (namespace, schedule_name, scheduled_at) WHERE schedule_name IS NOT NULL
    DO UPDATE SET status = 'ready', finished_at = NULL, cancel_requested = false,
                  run_at = excluded.run_at, kind = excluded.kind, args = excluded.args, priority = excluded.priority, concurrency_key = excluded.concurrency_key, rate_key = excluded.rate_key, lane_key = excluded.lane_key
    WHERE (nf.status = 'cancelled' AND nf.attempts = 0))
SELECT id, status FROM done;

-- recovery.headless_lanes: Repair, step 2a: up to $2 lanes of namespace $1 with jobs queued and no
--   head (it was deleted without its terminal effects). ``lanes`` walks the distinct lanes that
--   have waiting jobs on ``job_lane_waiting_idx``, one index descent each; each lane's head is
--   looked for on ``job_lane_idx``.
WITH RECURSIVE lanes AS (
    (SELECT j.lane_key FROM "acta".job AS j
     WHERE j.namespace = $1 AND j.status = 'waiting' AND j.lane_key IS NOT NULL
     ORDER BY j.lane_key LIMIT 1)
    UNION ALL
    SELECT (SELECT j.lane_key FROM "acta".job AS j
            WHERE j.namespace = $1 AND j.status = 'waiting'
              AND j.lane_key IS NOT NULL AND j.lane_key > l.lane_key
            ORDER BY j.lane_key LIMIT 1)
    FROM lanes AS l WHERE l.lane_key IS NOT NULL
)
SELECT l.lane_key FROM lanes AS l
WHERE l.lane_key IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM "acta".job AS h
    WHERE h.namespace = $1 AND h.lane_key = l.lane_key AND h.status IN ('ready', 'executing', 'waiting') AND (h.status <> 'waiting' OR h.awaited_signal IS NOT NULL OR h.pending_children > 0)
)
LIMIT $2;

-- recovery.lock_lane: Repair, step 2b (first statement of one transaction): lane $2 of namespace
--   $1, by the advisory lock its enqueue and its hand-on take (migration 0006).
SELECT pg_advisory_xact_lock(hashtextextended('acta.lane' || chr(31) || $1 || chr(31) || $2, 0));

-- recovery.lock_parents: Repair, step 1b (first statement of one transaction): the parents $1 still
--   waiting for children, locked. A child's end decrements its parent under this row lock, so once
--   it is held no child of these parents ends until the transaction does, and the next statement's
--   snapshot (a new one) counts exactly what the count must say.
SELECT id FROM "acta".job
WHERE id = ANY ($1::bigint[]) AND status = 'waiting' AND pending_children > 0
ORDER BY id
FOR UPDATE SKIP LOCKED;

-- recovery.mark_dead_workers: Recovery, step 2: workers silent for 7 of their own beats are dead
--   (each row keeps its worker's interval: a namespace may mix settings); their locks and
--   concurrency slots are freed.
WITH dead AS (
    UPDATE "acta".worker SET status = 'dead', stopped_at = now()
    WHERE namespace = $1 AND status = 'running'
      AND heartbeat_at < now() - make_interval(secs => $2 * heartbeat_seconds)
    RETURNING id
),
locks AS (
    DELETE FROM "acta".lock WHERE worker_id IN (SELECT id FROM dead) RETURNING 1
),
slots AS (
    DELETE FROM "acta".concurrency_slot WHERE worker_id IN (SELECT id FROM dead)
    RETURNING 1
)
SELECT id FROM dead;

-- recovery.promote_lane: Repair, step 2c (second statement, same transaction, a new snapshot under
--   the lane's lock): if lane $2 of namespace $1 still has no head, its oldest queued job becomes
--   ``ready``, as the hand-on does. The promoted job's id.
UPDATE "acta".job SET status = 'ready', run_at = greatest(run_at, now())
WHERE id = (
    SELECT j.id FROM "acta".job AS j
    WHERE j.namespace = $1 AND j.lane_key = $2 AND j.status = 'waiting'
    ORDER BY j.id LIMIT 1
)
  AND status = 'waiting'
  AND NOT EXISTS (
      SELECT 1 FROM "acta".job AS h
      WHERE h.namespace = $1 AND h.lane_key = $2 AND h.status IN ('ready', 'executing', 'waiting') AND (h.status <> 'waiting' OR h.awaited_signal IS NOT NULL OR h.pending_children > 0)
  )
RETURNING id;

-- recovery.prune_finished: Recovery, step 3: finished jobs past their kind's retention, one bounded
--   chunk of $2 rows of namespace $1 ($3: the default retention, for kinds whose definition names
--   none and kinds without a definition).
WITH RECURSIVE kinds AS (
    (SELECT j.kind FROM "acta".job j
     WHERE j.namespace = $1 AND j.status IN ('succeeded', 'failed', 'cancelled')
     ORDER BY j.kind LIMIT 1)
    UNION ALL
    SELECT (SELECT j.kind FROM "acta".job j
            WHERE j.namespace = $1 AND j.status IN ('succeeded', 'failed', 'cancelled') AND j.kind > k.kind
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
    LEFT JOIN "acta".definition d ON d.namespace = $1 AND d.kind = k.kind
    CROSS JOIN LATERAL (
        SELECT coalesce(d.overrides -> 'retention', d.declared -> 'retention') AS eff
    ) r
    WHERE k.kind IS NOT NULL
),
doomed AS (
    SELECT due.id FROM cutoffs c
    CROSS JOIN LATERAL (
        SELECT j.id FROM "acta".job j
        WHERE j.namespace = $1 AND j.kind = c.kind
          AND j.status IN ('succeeded', 'failed', 'cancelled')
          AND j.finished_at < c.cutoff
          -- A child whose parent has not ended stays: the parent's next run reads
          -- it (ctx.children). A scalar subquery, so its parent is looked up by
          -- primary key per child, never hashed from a scan of the active jobs.
          AND (j.parent_id IS NULL
               OR coalesce((SELECT p.status FROM "acta".job AS p
                            WHERE p.id = j.parent_id), 'gone') NOT IN ('ready', 'executing', 'waiting'))
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
    DELETE FROM "acta".job WHERE id = ANY(ARRAY(SELECT id FROM doomed)) RETURNING id
),
history AS (
    DELETE FROM "acta".execution WHERE job_id = ANY(ARRAY(SELECT id FROM gone))
    RETURNING 1
)
SELECT count(*) FROM gone;

-- recovery.recount_parents: Repair, step 1c (second statement, same transaction): each parent of $1
--   whose count exceeds its unfinished children gets the number of them; one with none left becomes
--   ``ready``, told ``resumed = 'children'`` (the NOTIFY trigger wakes a worker), as the last
--   child's end would have made it. A child ending while the lock is held waits and then applies
--   its decrement to the new count. (id, new count, status).
WITH counted AS (
    SELECT p.id, (SELECT count(*) FROM "acta".job AS c
        WHERE c.parent_id = p.id AND c.status IN ('ready', 'executing', 'waiting') AND (c.parent_execution_id IS NULL OR c.parent_execution_id = p.execution_id)) AS pending
    FROM "acta".job AS p WHERE p.id = ANY ($1::bigint[])
)
UPDATE "acta".job AS j SET
    pending_children = c.pending,
    status = CASE WHEN c.pending = 0 THEN 'ready' ELSE j.status END,
    run_at = CASE WHEN c.pending = 0 THEN now() ELSE j.run_at END,
    resumed = CASE WHEN c.pending = 0 THEN 'children' ELSE j.resumed END
FROM counted AS c
WHERE j.id = c.id AND j.status = 'waiting' AND j.pending_children > c.pending
RETURNING j.id, j.pending_children, j.status;

-- recovery.select_expired: Recovery, step 1a: up to $2 rows of namespace $1 whose lease ran out,
--   oldest first, with what Python needs to decide their completion (``ExpiredLease``'s columns, in
--   its order): attempts, the budget inputs, whether the attempt is known to have started, whether
--   it was claimed alone (the job was a suspect: the claim never batches one with others), and
--   whether the job was lost before. SKIP LOCKED: a row its worker is writing right now is left to
--   that write. No decision here: ``worker/completions.py`` makes it, and :func:`finish_expired`
--   applies it.
SELECT j.id, j.execution_id, j.attempts, j.max_attempts,
       (d.overrides->>'max_attempts')::int AS override_max_attempts,
       (d.declared->>'max_attempts')::int AS declared_max_attempts,
       j.started_at IS NOT NULL AS started,
       j.suspect AS alone,
       EXISTS (
           SELECT 1 FROM "acta".execution e
           WHERE e.job_id = j.id AND e.outcome = 'lost'
       ) AS lost_before,
       j.worker_id
FROM "acta".job j
LEFT JOIN "acta".definition d ON d.namespace = j.namespace AND d.kind = j.kind
WHERE j.namespace = $1 AND j.status = 'executing' AND j.lease_expires_at < now()
ORDER BY j.lease_expires_at
LIMIT $2
FOR UPDATE OF j SKIP LOCKED;

-- recovery.stranded_parents: Repair, step 1a: up to $2 parents of namespace $1 waiting for more
--   children than they have unfinished (a child deleted without its terminal effects): their ids.
--   By ``job_children_wait_idx``; each parent's children by ``job_parent_idx``. No lock: a snapshot
--   shows a child's end and its parent's count together (one statement writes both), so what it
--   finds is real; :func:`recount_parents` decides under the lock.
SELECT p.id FROM "acta".job AS p
WHERE p.namespace = $1 AND p.status = 'waiting' AND p.pending_children > 0
  AND p.pending_children > (SELECT count(*) FROM "acta".job AS c
        WHERE c.parent_id = p.id AND c.status IN ('ready', 'executing', 'waiting') AND (c.parent_execution_id IS NULL OR c.parent_execution_id = p.execution_id))
ORDER BY p.id
LIMIT $2;

-- locks.release_lock: Release a named lock, fenced by its holder's (job, execution): a stale
--   release matches nothing.
DELETE FROM "acta".lock
WHERE namespace = $1 AND name = $2 AND job_id = $3 AND execution_id = $4;

-- locks.take_lock: Named locks. Take: a free name, an expired hold, or one this execution holds
--   already. Fenced by the holder's (job, execution) pair, so a release or renewal by a stale
--   attempt matches nothing.
INSERT INTO "acta".lock AS k (namespace, name, job_id, execution_id, worker_id,
                           lease_expires_at)
VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))
ON CONFLICT (namespace, name) DO UPDATE SET
    job_id = excluded.job_id, execution_id = excluded.execution_id,
    worker_id = excluded.worker_id, acquired_at = now(),
    lease_expires_at = excluded.lease_expires_at
WHERE k.lease_expires_at < now()
   OR (k.job_id = excluded.job_id AND k.execution_id = excluded.execution_id)
RETURNING 1;

-- admission.admit: admit: for each request of ``$2`` (a JSON array of ``[job_id, execution_id,
--   limit, rate_count, rate_period, bounce_seconds, breaker_key, breaker_probes]``) of namespace
--   ``$1``, by worker ``$3``: a verdict (``admitted``, ``slot``, ``rate``, ``lost``; ``breaker``,
--   ``probe``, ``half_open`` for a kind with a breaker, migration 0016) and the seconds to wait
--   before it is due again. Guard: the job must be 'executing' under the given execution id (else
--   ``lost``, nothing taken); slots count only live holders (executing under the slot's execution
--   id, lease unexpired).
SELECT job_id, verdict, wait FROM "acta".admit($1, $2::jsonb, $3);

-- admission.breaker_record: breaker_record: count the outcomes ``$2`` (a JSON array of ``[kind,
--   key, job_id, execution_id, failed, failure_rate, min_calls, window, open_for]``) of namespace
--   ``$1`` into their breakers (migration 0016); answers each transition made: kind, key, the new
--   state (``open``, ``closed``) and, opened, until when.
SELECT kind, key, state, extract(epoch FROM until - clock_timestamp())::float8 AS wait FROM "acta".breaker_record($1, $2::jsonb);

-- definitions.load_definitions: The namespace's definitions version and every kind's declared and
--   override policies (one row with a null kind when the namespace has none).
SELECT d.kind, d.declared::text, d.overrides::text, n.definitions_version
FROM "acta".namespace n LEFT JOIN "acta".definition d ON d.namespace = n.name
WHERE n.name = $1;

-- definitions.store_definitions: Store the code's declared policies; a change moves the namespace's
--   definitions version so that every worker reloads within one heartbeat.
WITH d AS (
    SELECT * FROM unnest($2::text[], $3::text[]) AS d(kind, declared)
),
up AS (
    INSERT INTO "acta".definition AS def (namespace, kind, declared)
    SELECT $1, d.kind, d.declared::jsonb FROM d
    ON CONFLICT (namespace, kind) DO UPDATE
        SET declared = excluded.declared, updated_at = now()
        WHERE def.declared IS DISTINCT FROM excluded.declared
    RETURNING 1
)
UPDATE "acta".namespace SET definitions_version = definitions_version + 1
WHERE name = $1 AND EXISTS (SELECT 1 FROM up)
RETURNING definitions_version;

-- workers.register_worker: Register: the namespace (if new) and the worker row in one statement,
--   and the admin connection named after the new id, so that every connection of a worker can be
--   found in pg_stat_activity. A namespace whose next recovery pass is due later than this worker's
--   own recovery interval ($9) is pulled in to it: a worker with a long heartbeat may have taken
--   the last pass alone, and this one's shorter leases must not wait for the long interval (I1, no
--   lost job).
WITH ns AS (
    INSERT INTO "acta".namespace (name) VALUES ($1) ON CONFLICT (name) DO NOTHING
),
pull_in AS (
    UPDATE "acta".namespace SET recovery_due_at = now() + make_interval(secs => $9)
    WHERE name = $1 AND recovery_due_at > now() + make_interval(secs => $9)
),
w AS (
    INSERT INTO "acta".worker (namespace, hostname, pid, status, executors, kinds,
                            version, heartbeat_seconds)
    VALUES ($1, $2, $3, 'running', $4, $5::jsonb, $6, $7)
    RETURNING id
)
SELECT id, set_config('application_name', $8 || id, false) AS application_name
FROM w;

-- workers.schema_revision: The Alembic revision acta's schema is at (one row; fails if never
--   migrated).
SELECT version_num FROM "acta".alembic_version;

-- workers.set_application_name: Rename this connection ($1): it was opened before the worker's id
--   was known.
SELECT set_config('application_name', $1, false);

-- workers.stop_worker: Mark worker $1 stopped at its clean shutdown (recovery then never calls it
--   dead).
UPDATE "acta".worker SET status = 'stopped', stopped_at = now()
WHERE id = $1 AND status <> 'stopped';

-- admin.create_schema: Create acta's schema if it is missing (the migrations' first step).
CREATE SCHEMA IF NOT EXISTS "acta";

-- admin.expire_leases: End the leases of the executing jobs among ids $1 now; their ids
--   (``testing.faults.expire_lease``).
UPDATE "acta".job SET lease_expires_at = now() - interval '1 millisecond' WHERE id = ANY($1::bigint[]) AND status = 'executing' RETURNING id;

-- admin.make_due: Make every ready job of namespace $1 that is scheduled for later due now
--   (``testing.drain(include_scheduled=True)``).
UPDATE "acta".job SET run_at = now() WHERE namespace = $1 AND status = 'ready' AND run_at > now();

-- admin.make_due_later: Make every ready job scheduled for later due now, of namespace $1 or of
--   every namespace when $1 is NULL; their ids (``testing.faults.make_due``).
UPDATE "acta".job SET run_at = now() WHERE ($1::text IS NULL OR namespace = $1) AND status = 'ready' AND run_at > now() RETURNING id;

-- admin.schema_sequences: The sequences of schema $1 (the pytest plugin restarts them between
--   tests).
SELECT sequencename FROM pg_sequences WHERE schemaname = $1 ORDER BY sequencename;

-- admin.schema_tables: The tables of schema $1 but the version table $2 (the pytest plugin empties
--   them between tests).
SELECT tablename FROM pg_tables WHERE schemaname = $1 AND tablename <> $2 ORDER BY tablename;

-- admin.terminate_worker_connections: Cut every acta worker connection (named ``acta:*``) to the
--   current database but this one (``testing.faults.database_outage``).
SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name LIKE 'acta:%';

-- admin.time_out_waits: Wake every signal wait with a timeout as timed out now (as the heartbeat's
--   ``wake_timed_out`` does once its deadline passes), of namespace $1 or of every namespace when
--   $1 is NULL; their ids (``testing.faults.make_due``).
UPDATE "acta".job SET status = 'ready', run_at = now(), resumed = 'timeout', awaited_signal = NULL WHERE ($1::text IS NULL OR namespace = $1) AND status = 'waiting' AND awaited_signal IS NOT NULL AND run_at > now() AND run_at < 'infinity' RETURNING id;

-- admin.version_table_exists: True once acta's migrations have run in ``schema`` (its version table
--   exists).
SELECT to_regclass('"acta".alembic_version') IS NOT NULL;

-- doctor.expired_leases: Rows of namespace :namespace still 'executing' past their lease: how many
--   (looking at FINDINGS_CAP at most) and how long the oldest has been expired. Served by
--   job_lease_idx (namespace, lease_expires_at).
SELECT count(*) AS rows,
       extract(epoch FROM now() - min(lease_expires_at))::float8 AS oldest_seconds
FROM (
    SELECT lease_expires_at FROM "acta".job
    WHERE namespace = :namespace AND lease_expires_at IS NOT NULL
      AND lease_expires_at < now() AND status = 'executing'
    ORDER BY lease_expires_at
    LIMIT 10000
) AS expired;

-- doctor.index_sizes: Each index of acta.job and acta.execution with its size and estimated
--   entries.
SELECT t.relname AS table_name, i.relname AS name,
       pg_relation_size(i.oid) AS bytes,
       greatest(i.reltuples, 0)::bigint AS estimated_entries
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = 'acta' AND t.relname IN ('job', 'execution')
ORDER BY t.relname, i.relname;

-- doctor.known_namespaces: The namespaces this database knows of, by name (at most
--   KNOWN_NAMESPACES_CAP): those registered (a worker's start writes the namespace row), with
--   workers or definitions, and those with ready, executing or finished jobs (a namespace no worker
--   ever served has only those; a waiting job's namespace had a worker). The jobs' are found by
--   skip scans of job_due_idx, job_lease_idx and job_prune_idx (one index probe per namespace
--   each), never a scan of acta.job.
WITH RECURSIVE ready(ns) AS (
    (SELECT namespace FROM "acta".job WHERE status = 'ready' ORDER BY namespace LIMIT 1)
    UNION ALL
    SELECT (SELECT namespace FROM "acta".job
            WHERE status = 'ready' AND namespace > ready.ns ORDER BY namespace LIMIT 1)
    FROM ready WHERE ready.ns IS NOT NULL), executing(ns) AS (
    (SELECT namespace FROM "acta".job WHERE status = 'executing' AND lease_expires_at IS NOT NULL ORDER BY namespace LIMIT 1)
    UNION ALL
    SELECT (SELECT namespace FROM "acta".job
            WHERE status = 'executing' AND lease_expires_at IS NOT NULL AND namespace > executing.ns ORDER BY namespace LIMIT 1)
    FROM executing WHERE executing.ns IS NOT NULL), finished(ns) AS (
    (SELECT namespace FROM "acta".job WHERE status IN ('succeeded', 'failed', 'cancelled') ORDER BY namespace LIMIT 1)
    UNION ALL
    SELECT (SELECT namespace FROM "acta".job
            WHERE status IN ('succeeded', 'failed', 'cancelled') AND namespace > finished.ns ORDER BY namespace LIMIT 1)
    FROM finished WHERE finished.ns IS NOT NULL)
SELECT name FROM (
    SELECT name FROM "acta".namespace
    UNION SELECT namespace FROM "acta".worker
    UNION SELECT namespace FROM "acta".definition
    UNION SELECT ns FROM ready WHERE ns IS NOT NULL
    UNION SELECT ns FROM executing WHERE ns IS NOT NULL
    UNION SELECT ns FROM finished WHERE ns IS NOT NULL
) AS known
ORDER BY name
LIMIT 50;

-- doctor.late_waits: Signal waits of namespace :namespace still 'waiting' past their deadline (a
--   heartbeat wakes them within one beat): how many (looking at FINDINGS_CAP at most) and how long
--   the oldest is past it. Served by job_wait_deadline_idx.
SELECT count(*) AS rows,
       extract(epoch FROM now() - min(run_at))::float8 AS oldest_seconds
FROM (
    SELECT run_at FROM "acta".job
    WHERE namespace = :namespace AND status = 'waiting'
      AND awaited_signal IS NOT NULL AND run_at < now()
    ORDER BY run_at
    LIMIT 10000
) AS late;

-- doctor.namespace_workers: The workers of namespace :namespace as recovery sees them: how many are
--   live (running and heard from within :dead_beats of their own beats), the longest beat a live
--   one registered, and the beat of the one heard from last (live or not). The worker table holds a
--   row per worker start (pruned), so this reads few rows.
SELECT count(*) FILTER (WHERE live) AS live,
       max(heartbeat_seconds) FILTER (WHERE live) AS live_beat,
       (array_agg(heartbeat_seconds ORDER BY heartbeat_at DESC NULLS LAST))[1]
           AS last_beat
FROM (
    SELECT heartbeat_seconds, heartbeat_at,
           status = 'running' AND heartbeat_at >= now()
               - make_interval(secs => :dead_beats * heartbeat_seconds) AS live
    FROM "acta".worker
    WHERE namespace = :namespace
) AS w;

-- doctor.open_breakers: The circuit breakers of namespace :namespace that are not closed
--   (docs/breakers.md): kind, key, state, seconds since it changed, seconds until an open one half-
--   opens. By the primary key; a handful of rows.
SELECT kind, key, state,
       extract(epoch FROM now() - changed_at)::float8 AS since_seconds,
       extract(epoch FROM open_until - now())::float8 AS until_seconds
FROM "acta".breaker
WHERE namespace = :namespace AND state <> 'closed'
ORDER BY kind, key;

-- doctor.prepared_transactions: Prepared (two-phase) transactions of this database: each holds
--   vacuum's horizon, even across a restart, until COMMIT PREPARED or ROLLBACK PREPARED.
SELECT gid, owner, age(transaction) AS xmin_age,
       extract(epoch FROM now() - prepared)::float8 AS transaction_seconds
FROM pg_prepared_xacts
WHERE database = current_database()
ORDER BY prepared
LIMIT 20;

-- doctor.ready_backlog: Jobs of namespace :namespace ready and due now: how many (looking at
--   FINDINGS_CAP at most) and how long the oldest has been due. Served by job_due_idx.
SELECT count(*) AS rows,
       extract(epoch FROM now() - min(run_at))::float8 AS oldest_seconds
FROM (
    SELECT run_at FROM "acta".job
    WHERE namespace = :namespace AND status = 'ready' AND run_at <= now()
    ORDER BY run_at
    LIMIT 10000
) AS due;

-- doctor.recently_dead_workers: Workers of namespace :namespace that recovery marked dead in the
--   last :window seconds (crashed or cut off: their jobs came back through recovery). At most 20.
SELECT id, hostname, pid,
       extract(epoch FROM now() - stopped_at)::float8 AS dead_seconds
FROM "acta".worker
WHERE namespace = :namespace AND status = 'dead'
  AND stopped_at > now() - make_interval(secs => :window)
ORDER BY stopped_at DESC
LIMIT 20;

-- doctor.replication_slots: Replication slots that hold vacuum's horizon for this database
--   (physical slots hold it for every database; a logical slot for its own, through catalog_xmin).
SELECT slot_name, slot_type, active,
       greatest(age(xmin), age(catalog_xmin)) AS xmin_age
FROM pg_replication_slots
WHERE (database IS NULL OR database = current_database())
  AND (xmin IS NOT NULL OR catalog_xmin IS NOT NULL)
ORDER BY greatest(age(xmin), age(catalog_xmin)) DESC
LIMIT 20;

-- doctor.server_settings: The server's vacuum settings and clock: autovacuum and track_counts
--   (autovacuum needs both), the freeze age, the database's now().
SELECT current_setting('autovacuum')::bool AS autovacuum,
       current_setting('track_counts')::bool AS track_counts,
       current_setting('autovacuum_freeze_max_age')::bigint AS freeze_max_age,
       current_setting('server_version') AS server_version,
       now() AS now;

-- doctor.silent_workers: Workers of namespace :namespace still marked running but silent for
--   :dead_beats of their own heartbeats (dead, and not yet marked so by recovery); served by
--   worker_live_idx. At most 20, the longest silent first.
SELECT id, hostname, pid, heartbeat_seconds,
       extract(epoch FROM now() - heartbeat_at)::float8 AS silent_seconds
FROM "acta".worker
WHERE namespace = :namespace AND status = 'running'
  AND heartbeat_at < now() - make_interval(secs => :dead_beats * heartbeat_seconds)
ORDER BY heartbeat_at
LIMIT 20;

-- doctor.stored_schedules: The stored schedules of namespace :namespace (their cron, timezone and
--   missed policy: whether each can fire is judged in Python). A handful of rows, by the primary
--   key.
SELECT name, cron, timezone, missed, enabled
FROM "acta".schedule
WHERE namespace = :namespace
ORDER BY name;

-- doctor.table_health: Live and dead rows, last (auto)vacuum and (auto)analyze, the per-table
--   autovacuum switch, heap and index bytes, and the frozen-xid age of acta.job and acta.execution
--   (statistics views and file sizes only: no scan).
SELECT c.relname AS name,
       coalesce(s.n_live_tup, 0) AS live_rows,
       coalesce(s.n_dead_tup, 0) AS dead_rows,
       coalesce(s.n_mod_since_analyze, 0) AS modified_since_analyze,
       s.last_vacuum, s.last_autovacuum, s.last_analyze, s.last_autoanalyze,
       coalesce((SELECT bool_and(split_part(o, '=', 2)::bool)
                 FROM unnest(c.reloptions) AS o
                 WHERE split_part(o, '=', 1) = 'autovacuum_enabled'), true)
           AS autovacuum_enabled,
       pg_relation_size(c.oid) AS table_bytes,
       pg_indexes_size(c.oid) AS index_bytes,
       age(c.relfrozenxid) AS frozen_xid_age
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE n.nspname = 'acta' AND c.relname IN ('job', 'execution') AND c.relkind = 'r'
ORDER BY c.relname;

-- doctor.xmin_holders: Sessions of this database that hold back vacuum's horizon (a snapshot or an
--   assigned transaction id) or sit idle in a transaction, oldest first, this session excepted; at
--   most 20.
SELECT pid, usename AS user_name, application_name,
       host(client_addr) AS client_addr, state,
       greatest(age(backend_xmin), age(backend_xid)) AS xmin_age,
       extract(epoch FROM now() - xact_start)::float8 AS transaction_seconds,
       extract(epoch FROM now() - state_change)::float8 AS state_seconds,
       left(query, 200) AS query
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND backend_type = 'client backend'
  AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL
       OR state LIKE 'idle in transaction%')
ORDER BY greatest(age(backend_xmin), age(backend_xid)) DESC NULLS LAST,
         xact_start
LIMIT 20;

-- waits.children_of: ``ctx.children``: the children of job $1 in spawn order, as one JSON array of
--   ``[id, kind, status, result, last_error]`` (NULL when it has none). By ``job_parent_idx``; read
--   only for a run that follows a wait.
SELECT json_agg(json_build_array(id, kind, status, result, last_error)
                ORDER BY id)::text
FROM "acta".job WHERE parent_id = $1;

-- waits.lanes_held_above: The lanes held by job $1 and the ancestors above it that each wait for
--   the child below (``waiting`` for children, not for a signal): (namespace, lane_key) rows. A
--   child of $1's child in one of these lanes would queue behind a job that waits, through the
--   chain, for that very child: the lane would be stranded. The walk stops at the first ancestor
--   not waiting for children (above it nothing waits for this tree). By primary key, one row per
--   level; read only when a child job spawns children with lanes.
WITH RECURSIVE up (id, parent_id, namespace, lane_key, depth) AS (
    SELECT j.id, j.parent_id, j.namespace, j.lane_key, 1 FROM "acta".job AS j
    WHERE j.id = $1 AND j.status = 'waiting' AND j.pending_children > 0
      AND j.awaited_signal IS NULL
    UNION ALL
    SELECT j.id, j.parent_id, j.namespace, j.lane_key, up.depth + 1
    FROM up JOIN "acta".job AS j ON j.id = up.parent_id
    WHERE j.status = 'waiting' AND j.pending_children > 0
      AND j.awaited_signal IS NULL AND up.depth < 1000
)
SELECT namespace, lane_key FROM up WHERE lane_key IS NOT NULL;

-- schedules.cancel_unstarted_fires: The pending fires (not running: :data:`UNSTARTED`) of schedules
--   $2 of namespace $1 end ``cancelled``: those of a paused schedule (:func:`pause_schedule` took
--   its row first, in the same transaction) or of schedules a worker's code dropped
--   (:func:`store_schedules` deleted their rows first). A statement of its own, after the lock: it
--   reads the fires a completion committed while the pause waited for its row.
UPDATE "acta".job AS j SET status = 'cancelled', finished_at = now()
WHERE j.namespace = $1 AND j.schedule_name = ANY ($2::text[]) AND (j.status = 'ready' OR (j.status = 'waiting' AND j.awaited_signal IS NULL AND j.pending_children = 0));

-- schedules.enqueue_fires: Enqueue fire $3[i] (a tick) of schedule $2[i] of namespace $1, under the
--   locks :func:`lock_schedules` took in the same transaction. Guard: the schedule is enabled, and
--   it has no pending fire and no fire that happened at or after that tick (a fire's completion may
--   have enqueued its successor meanwhile; a fire cancelled before it started did not happen). The
--   tick's fire cancelled before it started is made ready again (:func:`revive_on_conflict`). A
--   fire takes the schedule's stored kind, args, priority and keys (:data:`FIRE`). The schedules'
--   rows are read ``FOR SHARE`` (:func:`share_schedules`): a pause or a drop committed meanwhile is
--   seen. Answers the fires enqueued (name, tick).
INSERT INTO "acta".job AS j (namespace, kind, args, run_at, schedule_name, scheduled_at,
                          priority, concurrency_key, rate_key, lane_key)
SELECT $1, sc.kind, sc.args, x.tick, sc.name, x.tick, sc.priority, sc.concurrency_key, sc.rate_key, sc.lane_key
FROM unnest($2::text[], $3::timestamptz[]) AS x(name, tick)
JOIN (
        SELECT sc.* FROM "acta".schedule AS sc
        WHERE sc.enabled AND (sc.namespace, sc.name) IN (SELECT $1::text, unnest($2::text[]))
        ORDER BY sc.namespace, sc.name
        FOR SHARE OF sc) AS sc
  ON sc.namespace = $1 AND sc.name = x.name
WHERE NOT EXISTS (
    SELECT 1 FROM "acta".job AS o
    WHERE o.namespace = $1 AND o.schedule_name = x.name
      AND (o.status IN ('ready', 'executing', 'waiting')
           OR (o.scheduled_at >= x.tick AND NOT (o.status = 'cancelled' AND o.attempts = 0)))
)
ON CONFLICT (namespace, schedule_name, scheduled_at) WHERE schedule_name IS NOT NULL
    DO UPDATE SET status = 'ready', finished_at = NULL, cancel_requested = false,
                  run_at = excluded.run_at, kind = excluded.kind, args = excluded.args, priority = excluded.priority, concurrency_key = excluded.concurrency_key, rate_key = excluded.rate_key, lane_key = excluded.lane_key
    WHERE (j.status = 'cancelled' AND j.attempts = 0)
RETURNING j.schedule_name, j.scheduled_at;

-- schedules.list_schedules: ``acta schedules ls``: namespace $1's schedules with their pending fire
--   (next) and their latest finished fire (its tick and status), and the database's ``now()``
--   (whether a stored cron can fire is judged against it). By ``job_schedule_tick_key``.
SELECT now() AS now, sc.name, sc.cron, sc.timezone, sc.kind, sc.missed, sc.enabled,
       (SELECT min(j.scheduled_at) FROM "acta".job AS j
        WHERE j.namespace = $1 AND j.schedule_name = sc.name
          AND j.status IN ('ready', 'executing', 'waiting')) AS next_fire,
       last.scheduled_at AS last_fire, last.status AS last_status
FROM "acta".schedule AS sc
LEFT JOIN LATERAL (
    SELECT j.scheduled_at, j.status FROM "acta".job AS j
    WHERE j.namespace = $1 AND j.schedule_name = sc.name
      AND j.status NOT IN ('ready', 'executing', 'waiting')
    ORDER BY j.scheduled_at DESC LIMIT 1
) AS last ON true
WHERE sc.namespace = $1
ORDER BY sc.name;

-- schedules.lock_schedules: The transaction locks of schedules $2 of namespace $1, in one order (no
--   deadlock between two workers). A statement of its own: the next one then reads what a writer
--   that held a lock committed.
SELECT count(pg_advisory_xact_lock(hashtextextended('acta.schedule' || chr(31) || $1 || chr(31) || n, 0)))
FROM (SELECT unnest($2::text[]) AS n ORDER BY 1) AS x;

-- schedules.pause_schedule: Pause schedule $2 of namespace $1: no fire from now on (a running one
--   finishes). The UPDATE locks the schedule's row, waiting for any completion that holds it
--   (:func:`share_schedules`); ``schedules.pause`` then cancels its pending fire with
--   :func:`cancel_unstarted_fires` in the same transaction. Answers the schedule's name.
UPDATE "acta".schedule SET enabled = false WHERE namespace = $1 AND name = $2
RETURNING name;

-- schedules.resume_schedule: Resume schedule $2 of namespace $1 (its next fire is enqueued with
--   :func:`enqueue_fires`, in the same transaction). Answers the schedule's name.
UPDATE "acta".schedule SET enabled = true WHERE namespace = $1 AND name = $2
RETURNING name;

-- schedules.run_schedule_now: ``acta schedules run``: one extra fire of schedule $2 of namespace
--   $1, due now, its ``scheduled_at`` now. Not part of the chain (no ``schedule_name``): the
--   cadence is not disturbed. Answers the new job's id.
INSERT INTO "acta".job (namespace, kind, args, scheduled_at, priority, concurrency_key, rate_key, lane_key)
SELECT sc.namespace, sc.kind, sc.args, now(), sc.priority, sc.concurrency_key, sc.rate_key, sc.lane_key FROM "acta".schedule AS sc
WHERE sc.namespace = $1 AND sc.name = $2
RETURNING id;

-- schedules.schedule_row: One stored schedule ($1 namespace, $2 name) for ``acta schedules
--   resume``: its latest fire that was not cancelled before it started (``last_tick``: a pause
--   cancels the pending fire, which must not count as fired), its pending fire's tick, if any, and
--   the database's ``now()`` (its next fire is computed against the database clock).
SELECT now() AS now, sc.name, sc.cron, sc.timezone, sc.kind, sc.args::text AS args,
       sc.missed, sc.enabled,
       (SELECT max(j.scheduled_at) FROM "acta".job AS j
        WHERE j.namespace = $1 AND j.schedule_name = sc.name
          AND NOT (j.status = 'cancelled' AND j.attempts = 0)) AS last_tick,
       (SELECT min(j.scheduled_at) FROM "acta".job AS j
        WHERE j.namespace = $1 AND j.schedule_name = sc.name
          AND j.status IN ('ready', 'executing', 'waiting')) AS pending_tick
FROM "acta".schedule AS sc WHERE sc.namespace = $1 AND sc.name = $2;

-- schedules.store_schedules: Store namespace $1's schedules as the code declares them ($2..
--   parallel arrays: name, cron, timezone, kind, args, missed, and what each fire takes from the
--   kind: priority, concurrency key, rate key, lane key), and drop the namespace's schedules the
--   code no longer declares (:func:`cancel_unstarted_fires` then cancels their pending fires). A
--   paused schedule stays paused. Answers the names dropped. Touches only ``acta.schedule``: a lock
--   on ``acta.job`` must hold up a worker's first claim, not its start-up.
WITH d AS (
    SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int[], $9::text[], $10::text[], $11::text[]) AS d(name, cron, timezone, kind, args, missed, priority, concurrency_key, rate_key, lane_key)
),
up AS (
    INSERT INTO "acta".schedule AS sc (namespace, name, cron, timezone, kind, args, missed, priority, concurrency_key, rate_key, lane_key)
    -- In name order: the rows' locks are taken in the order completions take
    -- them (share_schedules), so the two cannot deadlock.
    SELECT $1, d.name, d.cron, d.timezone, d.kind, d.args::jsonb, d.missed, d.priority, d.concurrency_key, d.rate_key, d.lane_key FROM d ORDER BY d.name
    ON CONFLICT (namespace, name) DO UPDATE
        SET cron = excluded.cron, timezone = excluded.timezone, kind = excluded.kind, args = excluded.args, missed = excluded.missed, priority = excluded.priority, concurrency_key = excluded.concurrency_key, rate_key = excluded.rate_key, lane_key = excluded.lane_key
        WHERE (sc.cron, sc.timezone, sc.kind, sc.args, sc.missed, sc.priority, sc.concurrency_key, sc.rate_key, sc.lane_key) IS DISTINCT FROM
              (excluded.cron, excluded.timezone, excluded.kind, excluded.args, excluded.missed, excluded.priority, excluded.concurrency_key, excluded.rate_key, excluded.lane_key)
    RETURNING 1
),
gone AS (
    DELETE FROM "acta".schedule AS sc
    WHERE sc.namespace = $1 AND sc.name <> ALL ($2::text[])
    RETURNING sc.name
)
SELECT name FROM gone;

-- schedules.unfired_schedules: Namespace $1's enabled schedules with no pending fire (none ready,
--   executing or waiting), each with its latest fire's tick (NULL: it never fired; a fire cancelled
--   before it started does not count, :func:`cancelled_unstarted`) and its stored cron, timezone
--   and missed policy (a schedule this code does not declare is still checked), and the database's
--   ``now()`` (one row of it, with a NULL name, when there is none): the fires to enqueue are
--   computed from these in Python (``schedules.plan_fires``), against the database clock. By
--   ``job_schedule_tick_key``.
SELECT now() AS now, u.name, u.last_tick, u.cron, u.timezone, u.missed
FROM (SELECT 1) AS one
LEFT JOIN (
    SELECT sc.name, sc.cron, sc.timezone, sc.missed,
           (SELECT max(j.scheduled_at) FROM "acta".job AS j
            WHERE j.namespace = $1 AND j.schedule_name = sc.name
              AND NOT (j.status = 'cancelled' AND j.attempts = 0)) AS last_tick
    FROM "acta".schedule AS sc
    WHERE sc.namespace = $1 AND sc.enabled
      AND NOT EXISTS (
          SELECT 1 FROM "acta".job AS j
          WHERE j.namespace = $1 AND j.schedule_name = sc.name
            AND j.status IN ('ready', 'executing', 'waiting')
      )
) AS u ON true;

-- session.bump_definitions_version: Move the namespace's definitions version: every worker reloads
--   within one beat.
UPDATE acta.namespace SET definitions_version=(acta.namespace.definitions_version + %(definitions_version_1)s::BIGINT) WHERE acta.namespace.name = %(name_1)s::VARCHAR RETURNING acta.namespace.definitions_version;

-- session.cancel_waiting: A ready or waiting job ends 'cancelled' at once; a durable wait it was
--   parked in is over (no awaited signal, no pending children: the terminal-effects trigger reads
--   the old values to cancel the children and hand a lane on). Who and why are recorded.
UPDATE acta.job SET status=%(status)s, pending_children=%(pending_children)s::INTEGER, awaited_signal=%(awaited_signal)s::VARCHAR, last_error=(coalesce(acta.job.last_error, CAST('{}' AS JSONB)) || jsonb_build_object(%(jsonb_build_object_1)s::VARCHAR, jsonb_strip_nulls(jsonb_build_object(%(jsonb_build_object_2)s::VARCHAR, CAST(%(cancel_by)s AS TEXT), %(jsonb_build_object_3)s::VARCHAR, CAST(%(cancel_reason)s AS TEXT), %(jsonb_build_object_4)s::VARCHAR, now())))), cancel_requested=%(cancel_requested)s, finished_at=now() WHERE acta.job.id = %(id_1)s::BIGINT AND acta.job.status IN (__[POSTCOMPILE_status_1]) RETURNING acta.job.id;

-- session.definition_for_update: A kind's stored definition (declared policy and overrides), locked
--   until commit so that two operators' changes apply one after the other.
SELECT acta.definition.declared, acta.definition.overrides
FROM acta.definition
WHERE acta.definition.namespace = %(namespace_1)s::VARCHAR AND acta.definition.kind = %(kind_1)s::VARCHAR FOR UPDATE;

-- session.insert_jobs_bulk: INSERT a batch of jobs from two JSON texts in one statement, in input
--   order.
INSERT INTO acta.job (namespace, kind, priority, run_at, max_attempts, concurrency_key, rate_key, lane_key, unique_key, trace_context, args, attempts, pending_children, cancel_requested, suspect) SELECT src.r ->> 0 AS namespace, src.r ->> 1 AS kind, CAST(src.r ->> 2 AS SMALLINT) AS priority, coalesce(CAST(src.r ->> 3 AS TIMESTAMP WITH TIME ZONE), now() + make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, coalesce(CAST(src.r ->> 4 AS DOUBLE PRECISION), %(coalesce_1)s))) AS run_at, CAST(src.r ->> 5 AS INTEGER) AS max_attempts, src.r ->> 6 AS concurrency_key, src.r ->> 7 AS rate_key, src.r ->> 8 AS lane_key, src.r ->> 9 AS unique_key, src.r ->> 10 AS trace_context, src.args AS args, %(attempts)s::INTEGER AS anon_1, %(pending_children)s::INTEGER AS anon_2, %(cancel_requested)s AS anon_3, %(suspect)s AS anon_4
FROM ROWS FROM (jsonb_array_elements(CAST(%(rows)s::VARCHAR AS jsonb)), jsonb_array_elements(CAST(%(args)s::VARCHAR AS jsonb))) WITH ORDINALITY AS src(r, args, ord) ORDER BY src.ord ON CONFLICT (namespace, unique_key) WHERE unique_key IS NOT NULL AND status IN ('ready', 'executing', 'waiting') DO NOTHING RETURNING acta.job.id, acta.job.unique_key;

-- session.insert_unique_job: INSERT one job unless a non-terminal job holds its unique key;
--   RETURNING the new Job.
INSERT INTO acta.job (namespace, kind, args, priority, attempts, unique_key, pending_children, cancel_requested, suspect) VALUES (%(namespace)s::VARCHAR, %(kind)s::VARCHAR, %(args)s::JSONB, %(priority)s::SMALLINT, %(attempts)s::INTEGER, %(unique_key)s::VARCHAR, %(pending_children)s::INTEGER, %(cancel_requested)s, %(suspect)s) ON CONFLICT (namespace, unique_key) WHERE unique_key IS NOT NULL AND status IN ('ready', 'executing', 'waiting') DO NOTHING RETURNING acta.job.id, acta.job.namespace, acta.job.kind, acta.job.args, acta.job.status, acta.job.priority, acta.job.run_at, acta.job.attempts, acta.job.max_attempts, acta.job.execution_id, acta.job.worker_id, acta.job.claimed_at, acta.job.started_at, acta.job.lease_expires_at, acta.job.concurrency_key, acta.job.rate_key, acta.job.lane_key, acta.job.unique_key, acta.job.parent_id, acta.job.parent_execution_id, acta.job.pending_children, acta.job.awaited_signal, acta.job.signals, acta.job.schedule_name, acta.job.scheduled_at, acta.job.trace_context, acta.job.resumed, acta.job.result, acta.job.last_error, acta.job.cancel_requested, acta.job.suspect, acta.job.created_at, acta.job.finished_at, acta.job.outcome, acta.job.attempt_error;

-- session.job_status: One job's status (signal tells a finished job from a missing one).
SELECT acta.job.status
FROM acta.job
WHERE acta.job.id = %(id_1)s::BIGINT;

-- session.lock_job_status: One job's status, its row locked until the transaction ends: cancel
--   decides on the status a concurrent completion committed, never on the one before it.
SELECT acta.job.status
FROM acta.job
WHERE acta.job.id = %(id_1)s::BIGINT FOR UPDATE;

-- session.request_cancel: An executing job is asked to stop: its worker's next heartbeat cancels
--   the handler. Who and why are recorded (the completion that ends it keeps them).
UPDATE acta.job SET last_error=(coalesce(acta.job.last_error, CAST('{}' AS JSONB)) || jsonb_build_object(%(jsonb_build_object_1)s::VARCHAR, jsonb_strip_nulls(jsonb_build_object(%(jsonb_build_object_2)s::VARCHAR, CAST(%(cancel_by)s AS TEXT), %(jsonb_build_object_3)s::VARCHAR, CAST(%(cancel_reason)s AS TEXT), %(jsonb_build_object_4)s::VARCHAR, now())))), cancel_requested=%(cancel_requested)s WHERE acta.job.id = %(id_1)s::BIGINT AND acta.job.status = %(status_1)s RETURNING acta.job.id;

-- session.retry_job: An operator's retry: a finished job goes back to 'ready' now with a fresh
--   budget, as a fresh start: no result, no wait it was in, no cancel record, no ``resumed`` (its
--   first run is not one that follows a wait). Signals it received stay. Not while another job
--   holds its unique key (:func:`unique_key_holder`). The only way out of a terminal state.
UPDATE acta.job SET status=%(status)s, run_at=now(), attempts=%(attempts)s::INTEGER, pending_children=%(pending_children)s::INTEGER, awaited_signal=%(awaited_signal)s::VARCHAR, resumed=%(resumed)s::VARCHAR, result=%(result)s::JSONB, last_error=(acta.job.last_error - 'cancel'::text), cancel_requested=%(cancel_requested)s, finished_at=%(finished_at)s::TIMESTAMP WITH TIME ZONE WHERE acta.job.id = %(id_1)s::BIGINT AND acta.job.status IN (__[POSTCOMPILE_status_1]) AND NOT (EXISTS (SELECT job_1.id
FROM acta.job AS job_1
WHERE job_1.namespace = acta.job.namespace AND job_1.unique_key = acta.job.unique_key AND job_1.status IN (__[POSTCOMPILE_status_2]))) RETURNING acta.job.id;

-- session.select_unique_holder: The non-terminal job holding ``unique_key`` in ``namespace``
--   (enqueue returns it).
SELECT acta.job.id, acta.job.namespace, acta.job.kind, acta.job.args, acta.job.status, acta.job.priority, acta.job.run_at, acta.job.attempts, acta.job.max_attempts, acta.job.execution_id, acta.job.worker_id, acta.job.claimed_at, acta.job.started_at, acta.job.lease_expires_at, acta.job.concurrency_key, acta.job.rate_key, acta.job.lane_key, acta.job.unique_key, acta.job.parent_id, acta.job.parent_execution_id, acta.job.pending_children, acta.job.awaited_signal, acta.job.signals, acta.job.schedule_name, acta.job.scheduled_at, acta.job.trace_context, acta.job.resumed, acta.job.result, acta.job.last_error, acta.job.cancel_requested, acta.job.suspect, acta.job.created_at, acta.job.finished_at, acta.job.outcome, acta.job.attempt_error
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.unique_key = %(unique_key_1)s::VARCHAR AND acta.job.status IN (__[POSTCOMPILE_status_1]);

-- session.select_unique_holders: (id, namespace, unique_key) of the non-terminal jobs holding any
--   of the given keys.
SELECT acta.job.id, acta.job.namespace, acta.job.unique_key
FROM acta.job JOIN (SELECT unnest(%(namespaces)s::TEXT[]) AS namespace, unnest(%(keys)s::TEXT[]) AS unique_key) AS pairs ON acta.job.namespace = pairs.namespace AND acta.job.unique_key = pairs.unique_key AND acta.job.status IN (__[POSTCOMPILE_status_1]);

-- session.signal_job: Record signal ``name`` (its payload as JSON text) on a ready, executing or
--   waiting job; a job waiting for that name becomes ready now (the NOTIFY trigger wakes a worker)
--   with ``resumed = 'signal'``. RETURNING the job's status afterwards (no row: the job is finished
--   or missing).
UPDATE acta.job SET status=CASE WHEN (acta.job.status = %(status_1)s AND acta.job.awaited_signal = %(awaited_signal_1)s::VARCHAR) THEN %(param_1)s::VARCHAR ELSE acta.job.status END, run_at=CASE WHEN (acta.job.status = %(status_1)s AND acta.job.awaited_signal = %(awaited_signal_1)s::VARCHAR) THEN now() ELSE acta.job.run_at END, awaited_signal=CASE WHEN (acta.job.status = %(status_1)s AND acta.job.awaited_signal = %(awaited_signal_1)s::VARCHAR) THEN NULL ELSE acta.job.awaited_signal END, signals=(coalesce(acta.job.signals, CAST(%(param_2)s::VARCHAR AS JSONB)) || jsonb_build_object(%(jsonb_build_object_1)s::VARCHAR, CAST(%(param_3)s::VARCHAR AS JSONB))), resumed=CASE WHEN (acta.job.status = %(status_1)s AND acta.job.awaited_signal = %(awaited_signal_1)s::VARCHAR) THEN %(param_4)s::VARCHAR ELSE acta.job.resumed END WHERE acta.job.id = %(id_1)s::BIGINT AND acta.job.status IN (__[POSTCOMPILE_status_2]) RETURNING acta.job.status;

-- session.stored_kinds: The kinds stored in a namespace (an unknown kind's error lists them).
SELECT acta.definition.kind
FROM acta.definition
WHERE acta.definition.namespace = %(namespace_1)s::VARCHAR ORDER BY acta.definition.kind;

-- session.unique_key_holder: (holder id, namespace, unique key) when finished job ``job_id``'s
--   unique key is held by another, unfinished job: what keeps an operator's retry from it.
SELECT job_1.id, acta.job.namespace, acta.job.unique_key
FROM acta.job AS job_1, acta.job
WHERE acta.job.id = %(id_1)s::BIGINT AND acta.job.status IN (__[POSTCOMPILE_status_1]) AND job_1.namespace = acta.job.namespace AND job_1.unique_key = acta.job.unique_key AND job_1.status IN (__[POSTCOMPILE_status_2]);

-- session.write_overrides: Store a kind's overrides (the whole object, validated by the caller).
UPDATE acta.definition SET overrides=%(overrides)s::JSONB, updated_at=now() WHERE acta.definition.namespace = %(namespace_1)s::VARCHAR AND acta.definition.kind = %(kind_1)s::VARCHAR;

-- inspect.active_depth: (kind, status, count) of the namespace's ready and executing jobs, exactly:
--   ready through the claim index, executing through the lease index (an executing job always holds
--   a lease), so finished rows are never read.
SELECT acta.job.kind, acta.job.status, count(*) AS count_1
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.status = %(status_1)s GROUP BY acta.job.kind, acta.job.status UNION ALL SELECT acta.job.kind, acta.job.status, count(*) AS count_2
FROM acta.job
WHERE acta.job.namespace = %(namespace_2)s::VARCHAR AND acta.job.lease_expires_at IS NOT NULL AND acta.job.status = %(status_2)s GROUP BY acta.job.kind, acta.job.status;

-- inspect.count_due_later: The Scheduled or Retrying view's size, counting no further than
--   ``limit``.
SELECT count(*) AS count_1
FROM (SELECT acta.job.id AS id
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.status = %(status_1)s AND acta.job.run_at > now() AND acta.job.attempts > %(attempts_1)s::INTEGER
 LIMIT %(param_1)s::INTEGER) AS anon_1;

-- inspect.count_jobs_up_to: How many jobs match a filter, counting no further than ``limit``: exact
--   for a small set (read from an index where one serves the filter), never a scan of a big one
--   (the count stops at ``limit``; the caller then takes the planner's estimate).
SELECT count(*) AS count_1
FROM (SELECT acta.job.id AS id
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.status = %(status_1)s AND acta.job.kind = %(kind_1)s::VARCHAR
 LIMIT %(param_1)s::INTEGER) AS anon_1;

-- inspect.delete_finished_jobs: An operator's delete: the given jobs, if finished (an active job is
--   never deleted under its worker); RETURNING the ids deleted.
DELETE FROM acta.job WHERE acta.job.id IN (__[POSTCOMPILE_id_1]) AND acta.job.status IN (__[POSTCOMPILE_status_1]) RETURNING acta.job.id;

-- inspect.delete_history: The recorded attempts of deleted jobs (as retention deletes them with
--   their job).
DELETE FROM acta.execution WHERE acta.execution.job_id IN (__[POSTCOMPILE_job_id_1]);

-- inspect.due_later: The Scheduled (``retrying`` False) or Retrying view: ready jobs due later,
--   soonest first, keyset-paged on (run_at, id) after ``after``; with the last error (a retry's).
SELECT acta.job.id, acta.job.namespace, acta.job.kind, acta.job.status, acta.job.priority, acta.job.attempts, acta.job.max_attempts, CASE WHEN (acta.job.run_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.run_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.run_at END AS run_at, CASE WHEN (acta.job.created_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.created_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.created_at END AS created_at, CASE WHEN (acta.job.finished_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.finished_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.finished_at END AS finished_at, acta.job.last_error
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.status = %(status_1)s AND acta.job.run_at > now() AND acta.job.attempts > %(attempts_1)s::INTEGER ORDER BY acta.job.run_at, acta.job.id
 LIMIT %(param_1)s::INTEGER;

-- inspect.estimate_due_later: The planner's estimate of the Scheduled or Retrying view's size.
EXPLAIN (FORMAT JSON) SELECT acta.job.id
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.status = %(status_1)s AND acta.job.run_at > now() AND acta.job.attempts = %(attempts_1)s::INTEGER;

-- inspect.estimate_jobs: The planner's estimate of how many jobs match a filter (a listing's count:
--   exact would scan every matching row, a million for "succeeded").
EXPLAIN (FORMAT JSON) SELECT acta.job.id
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.status = %(status_1)s AND acta.job.kind = %(kind_1)s::VARCHAR;

-- inspect.failed_ids: Ids of one failure group (failed in the last ``seconds`` with this error
--   type; "" for no recorded type; of ``kind``, None: of any kind), newest first, at most ``limit``
--   (a group action's batch); through the time range of ``job_failed_idx``.
SELECT acta.job.id
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.status = 'failed' AND acta.job.finished_at >= now() - make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, %(make_interval_7)s) AND coalesce((acta.job.last_error ->> %(last_error_1)s::TEXT), %(coalesce_1)s::VARCHAR) = %(coalesce_2)s::VARCHAR AND acta.job.kind = %(kind_1)s::VARCHAR ORDER BY acta.job.id DESC
 LIMIT %(param_1)s::INTEGER;

-- inspect.failure_groups: Failed jobs of the last ``seconds`` grouped by kind and error type (one
--   group for "card declined" of ``charge``, another for "child 2 broke" of ``report``): count,
--   first and last seen, the newest one's id (the sample); through the time range of
--   ``job_failed_idx`` (failed rows only, migration 0017).
SELECT acta.job.kind AS kind, coalesce(acta.job.last_error ->> %(last_error_1)s::TEXT, %(coalesce_1)s::VARCHAR) AS error_type, count(*) AS count, min(acta.job.finished_at) AS first_seen, max(acta.job.finished_at) AS last_seen, max(acta.job.id) AS sample_id
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.status = 'failed' AND acta.job.finished_at >= now() - make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, %(make_interval_7)s) GROUP BY acta.job.kind, coalesce(acta.job.last_error ->> %(last_error_1)s::TEXT, %(coalesce_1)s::VARCHAR) ORDER BY count(*) DESC, acta.job.kind, coalesce(acta.job.last_error ->> %(last_error_1)s::TEXT, %(coalesce_1)s::VARCHAR)
 LIMIT %(param_1)s::INTEGER;

-- inspect.finished_series: The charts: jobs finished in the last ``seconds`` (of ``kind``, None:
--   every kind) in buckets of ``step`` seconds (the bucket's start, epoch seconds): succeeded,
--   failed and cancelled, and the mean queue wait of those claimed. Through the finished index's
--   range of each kind (``job_prune_idx``): the cost of the window, not of the history.
SELECT floor(CAST(EXTRACT(epoch FROM acta.job.finished_at) AS DOUBLE PRECISION) / CAST(%(param_1)s AS DOUBLE PRECISION)) * %(floor_1)s AS bucket, count(*) FILTER (WHERE acta.job.status = %(status_1)s) AS succeeded, count(*) FILTER (WHERE acta.job.status = %(status_2)s) AS failed, count(*) FILTER (WHERE acta.job.status = %(status_3)s) AS cancelled, avg(CASE WHEN (isfinite(acta.job.run_at) AND isfinite(acta.job.claimed_at)) THEN greatest(EXTRACT(epoch FROM acta.job.claimed_at - acta.job.run_at), %(greatest_1)s::INTEGER) END) AS wait
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.status IN ('succeeded', 'failed', 'cancelled') AND acta.job.kind = %(kind_1)s::VARCHAR AND acta.job.finished_at >= now() - make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, %(make_interval_7)s) GROUP BY floor(CAST(EXTRACT(epoch FROM acta.job.finished_at) AS DOUBLE PRECISION) / CAST(%(param_1)s AS DOUBLE PRECISION)) * %(floor_1)s ORDER BY floor(CAST(EXTRACT(epoch FROM acta.job.finished_at) AS DOUBLE PRECISION) / CAST(%(param_1)s AS DOUBLE PRECISION)) * %(floor_1)s;

-- inspect.finished_since: (kind, status, count) of the jobs that finished in the last ``seconds``
--   (throughput and failures), through each kind's range of the finished index from the window's
--   start.
WITH RECURSIVE finished_kinds(k) AS
((SELECT acta.job.kind AS k
FROM acta.job
WHERE acta.job.namespace = %(namespace_2)s::VARCHAR AND acta.job.status IN ('succeeded', 'failed', 'cancelled') ORDER BY acta.job.kind
 LIMIT %(param_1)s::INTEGER) UNION ALL SELECT (SELECT acta.job.kind
FROM acta.job
WHERE acta.job.namespace = %(namespace_3)s::VARCHAR AND acta.job.status IN ('succeeded', 'failed', 'cancelled') AND acta.job.kind > finished_kinds.k ORDER BY acta.job.kind
 LIMIT %(param_2)s::INTEGER) AS anon_1
FROM finished_kinds
WHERE finished_kinds.k IS NOT NULL)
 SELECT acta.job.kind, acta.job.status, count(*) AS count_1
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.status IN ('succeeded', 'failed', 'cancelled') AND acta.job.kind = ANY (array((SELECT finished_kinds.k
FROM finished_kinds
WHERE finished_kinds.k IS NOT NULL))) AND acta.job.finished_at >= now() - make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, %(make_interval_7)s) GROUP BY acta.job.kind, acta.job.status ORDER BY acta.job.kind, acta.job.status;

-- inspect.in_flight: (worker_id, count) of the namespace's executing jobs, through the lease index.
SELECT acta.job.worker_id, count(*) AS count_1
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.lease_expires_at IS NOT NULL AND acta.job.status = %(status_1)s GROUP BY acta.job.worker_id;

-- inspect.job_children: A parent's children in spawn order (by ``job_parent_idx``).
SELECT acta.job.id, acta.job.namespace, acta.job.kind, acta.job.status, acta.job.priority, acta.job.attempts, acta.job.max_attempts, CASE WHEN (acta.job.run_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.run_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.run_at END AS run_at, CASE WHEN (acta.job.created_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.created_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.created_at END AS created_at, CASE WHEN (acta.job.finished_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.finished_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.finished_at END AS finished_at
FROM acta.job
WHERE acta.job.parent_id = %(parent_id_1)s::BIGINT ORDER BY acta.job.id;

-- inspect.job_detail: One job in full.
SELECT acta.job.id, acta.job.namespace, acta.job.kind, acta.job.status, acta.job.priority, acta.job.attempts, acta.job.max_attempts, CASE WHEN (acta.job.run_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.run_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.run_at END AS run_at, CASE WHEN (acta.job.created_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.created_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.created_at END AS created_at, CASE WHEN (acta.job.finished_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.finished_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.finished_at END AS finished_at, acta.job.args, acta.job.result, acta.job.last_error, acta.job.unique_key, acta.job.concurrency_key, acta.job.rate_key, acta.job.lane_key, acta.job.parent_id, acta.job.execution_id, acta.job.worker_id, CASE WHEN (acta.job.claimed_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.claimed_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.claimed_at END AS claimed_at, CASE WHEN (acta.job.started_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.started_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.started_at END AS started_at, CASE WHEN (acta.job.lease_expires_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.lease_expires_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.lease_expires_at END AS lease_expires_at, acta.job.cancel_requested, acta.job.awaited_signal, acta.job.pending_children, acta.job.signals, acta.job.resumed
FROM acta.job
WHERE acta.job.id = %(id_1)s::BIGINT;

-- inspect.job_executions: One job's recorded attempts, in the order they ended (the
--   ``acta.attempt`` view).
SELECT acta.attempt.id, acta.attempt.attempt, acta.attempt.outcome, acta.attempt.worker_id, acta.attempt.claimed_at, acta.attempt.started_at, acta.attempt.finished_at, acta.attempt.error_type, acta.attempt.error_message
FROM acta.attempt
WHERE acta.attempt.job_id = %(job_id_1)s::BIGINT ORDER BY acta.attempt.finished_at, acta.attempt.attempt;

-- inspect.key_jobs: The unfinished jobs of one concurrency key, in claim order.
SELECT acta.job.id, acta.job.namespace, acta.job.kind, acta.job.status, acta.job.priority, acta.job.attempts, acta.job.max_attempts, CASE WHEN (acta.job.run_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.run_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.run_at END AS run_at, CASE WHEN (acta.job.created_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.created_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.created_at END AS created_at, CASE WHEN (acta.job.finished_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.finished_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.finished_at END AS finished_at
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.concurrency_key = %(concurrency_key_1)s::VARCHAR AND acta.job.status IN (__[POSTCOMPILE_status_1]) ORDER BY acta.job.priority, acta.job.run_at, acta.job.id
 LIMIT %(param_1)s::INTEGER;

-- inspect.key_kinds: The kinds with unfinished jobs of one key, and their definitions (for the
--   limit).
SELECT anon_1.kind, acta.definition.declared, acta.definition.overrides
FROM (SELECT DISTINCT acta.job.kind AS kind
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.concurrency_key = %(concurrency_key_1)s::VARCHAR AND acta.job.status IN (__[POSTCOMPILE_status_1])) AS anon_1 LEFT OUTER JOIN acta.definition ON acta.definition.namespace = %(namespace_2)s::VARCHAR AND acta.definition.kind = anon_1.kind ORDER BY anon_1.kind;

-- inspect.key_slots: The slots of one concurrency key: (job, execution, worker, acquired), by time.
SELECT acta.concurrency_slot.job_id, acta.concurrency_slot.execution_id, acta.concurrency_slot.worker_id, acta.concurrency_slot.acquired_at
FROM acta.concurrency_slot
WHERE acta.concurrency_slot.namespace = %(namespace_1)s::VARCHAR AND acta.concurrency_slot.key = %(key_1)s::VARCHAR ORDER BY acta.concurrency_slot.acquired_at;

-- inspect.kind_rates: Each kind's live numbers over the last ``seconds``: jobs succeeded, failed
--   and cancelled, the median and 95th percentile of their last attempt's run time (started to
--   finished: from the job row when it keeps the attempt that ended it, migration 0015, else from
--   that attempt's history row, found by primary key), and the mean queue wait. Through each kind's
--   range of the finished index.
WITH RECURSIVE finished_kinds(k) AS
((SELECT acta.job.kind AS k
FROM acta.job
WHERE acta.job.namespace = %(namespace_2)s::VARCHAR AND acta.job.status IN ('succeeded', 'failed', 'cancelled') ORDER BY acta.job.kind
 LIMIT %(param_1)s::INTEGER) UNION ALL SELECT (SELECT acta.job.kind
FROM acta.job
WHERE acta.job.namespace = %(namespace_3)s::VARCHAR AND acta.job.status IN ('succeeded', 'failed', 'cancelled') AND acta.job.kind > finished_kinds.k ORDER BY acta.job.kind
 LIMIT %(param_2)s::INTEGER) AS anon_1
FROM finished_kinds
WHERE finished_kinds.k IS NOT NULL)
 SELECT acta.job.kind AS kind, count(*) FILTER (WHERE acta.job.status = %(status_1)s) AS succeeded, count(*) FILTER (WHERE acta.job.status = %(status_2)s) AS failed, count(*) FILTER (WHERE acta.job.status = %(status_3)s) AS cancelled, percentile_cont(%(percentile_cont_1)s) WITHIN GROUP (ORDER BY EXTRACT(epoch FROM CASE WHEN (acta.job.outcome IS NOT NULL) THEN acta.job.finished_at - acta.job.started_at ELSE acta.execution.finished_at - acta.execution.started_at END)) AS p50, percentile_cont(%(percentile_cont_2)s) WITHIN GROUP (ORDER BY EXTRACT(epoch FROM CASE WHEN (acta.job.outcome IS NOT NULL) THEN acta.job.finished_at - acta.job.started_at ELSE acta.execution.finished_at - acta.execution.started_at END)) AS p95, avg(CASE WHEN (isfinite(acta.job.run_at) AND isfinite(acta.job.claimed_at)) THEN greatest(EXTRACT(epoch FROM acta.job.claimed_at - acta.job.run_at), %(greatest_1)s::INTEGER) END) AS wait
FROM acta.job LEFT OUTER JOIN acta.execution ON acta.execution.job_id = acta.job.id AND acta.execution.id = acta.job.execution_id
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.status IN ('succeeded', 'failed', 'cancelled') AND acta.job.kind = ANY (array((SELECT finished_kinds.k
FROM finished_kinds
WHERE finished_kinds.k IS NOT NULL))) AND acta.job.finished_at >= now() - make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, %(make_interval_7)s) GROUP BY acta.job.kind ORDER BY acta.job.kind;

-- inspect.lane_heads: Each lane's head: its job that is not queued behind another (ready or
--   executing, or in a durable wait of its own), else its oldest. By ``job_lane_idx``.
SELECT DISTINCT ON (acta.job.lane_key) acta.job.id, acta.job.namespace, acta.job.kind, acta.job.status, acta.job.priority, acta.job.attempts, acta.job.max_attempts, CASE WHEN (acta.job.run_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.run_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.run_at END AS run_at, CASE WHEN (acta.job.created_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.created_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.created_at END AS created_at, CASE WHEN (acta.job.finished_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.finished_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.finished_at END AS finished_at, acta.job.lane_key
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.lane_key IN (__[POSTCOMPILE_lane_key_1]) AND acta.job.status IN (__[POSTCOMPILE_status_1]) ORDER BY acta.job.lane_key, acta.job.status = %(status_2)s AND acta.job.awaited_signal IS NULL AND acta.job.pending_children = %(pending_children_1)s::INTEGER, acta.job.id;

-- inspect.lane_jobs: A lane's unfinished jobs in run order: its head, then the queued ones by id
--   (the order the hand-on takes them).
SELECT acta.job.id, acta.job.namespace, acta.job.kind, acta.job.status, acta.job.priority, acta.job.attempts, acta.job.max_attempts, CASE WHEN (acta.job.run_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.run_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.run_at END AS run_at, CASE WHEN (acta.job.created_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.created_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.created_at END AS created_at, CASE WHEN (acta.job.finished_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.finished_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.finished_at END AS finished_at, acta.job.worker_id, acta.job.claimed_at, acta.job.concurrency_key, acta.job.awaited_signal, acta.job.pending_children
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.lane_key = %(lane_key_1)s::VARCHAR AND acta.job.status IN (__[POSTCOMPILE_status_1]) ORDER BY acta.job.status = %(status_2)s AND acta.job.awaited_signal IS NULL AND acta.job.pending_children = %(pending_children_1)s::INTEGER, acta.job.id
 LIMIT %(param_1)s::INTEGER;

-- inspect.last_errors: (id, last_error) of the given jobs (a failure group's sample message).
SELECT acta.job.id, acta.job.last_error
FROM acta.job
WHERE acta.job.id IN (__[POSTCOMPILE_id_1]);

-- inspect.last_traceback: The traceback of a job's latest attempt that recorded one.
SELECT acta.attempt.traceback
FROM acta.attempt
WHERE acta.attempt.job_id = %(job_id_1)s::BIGINT AND acta.attempt.traceback IS NOT NULL ORDER BY acta.attempt.finished_at DESC, acta.attempt.attempt DESC
 LIMIT %(param_1)s::INTEGER;

-- inspect.list_concurrency_keys: Concurrency keys in use: slots held and jobs ready behind each, by
--   key.
SELECT coalesce(anon_1.key, anon_2.key) AS key, coalesce(anon_1.held, %(coalesce_1)s::INTEGER) AS held, coalesce(anon_2.queued, %(coalesce_2)s::INTEGER) AS queued
FROM (SELECT acta.concurrency_slot.key AS key, count(*) AS held
FROM acta.concurrency_slot
WHERE acta.concurrency_slot.namespace = %(namespace_1)s::VARCHAR GROUP BY acta.concurrency_slot.key) AS anon_1 FULL OUTER JOIN (SELECT acta.job.concurrency_key AS key, count(*) AS queued
FROM acta.job
WHERE acta.job.namespace = %(namespace_2)s::VARCHAR AND acta.job.status = %(status_1)s AND acta.job.concurrency_key IS NOT NULL GROUP BY acta.job.concurrency_key) AS anon_2 ON anon_1.key = anon_2.key ORDER BY coalesce(anon_1.key, anon_2.key)
 LIMIT %(param_1)s::INTEGER;

-- inspect.list_definitions: A namespace's kinds with their declared policy and an operator's
--   overrides.
SELECT acta.definition.kind, acta.definition.declared, acta.definition.overrides, acta.definition.updated_at
FROM acta.definition
WHERE acta.definition.namespace = %(namespace_1)s::VARCHAR ORDER BY acta.definition.kind;

-- inspect.list_jobs: One page of jobs, newest first, filtered; keyset pagination: the next page
--   starts below the last id shown (``before_id``), so a page costs the same however deep.
SELECT acta.job.id, acta.job.namespace, acta.job.kind, acta.job.status, acta.job.priority, acta.job.attempts, acta.job.max_attempts, CASE WHEN (acta.job.run_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.run_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.run_at END AS run_at, CASE WHEN (acta.job.created_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.created_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.created_at END AS created_at, CASE WHEN (acta.job.finished_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.finished_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.finished_at END AS finished_at
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.status = %(status_1)s AND acta.job.kind = %(kind_1)s::VARCHAR AND acta.job.id < %(id_1)s::BIGINT ORDER BY acta.job.id DESC
 LIMIT %(param_1)s::INTEGER;

-- inspect.list_lanes: The namespace's lanes with unfinished jobs: (lane, jobs, oldest id), by lane.
--   By ``job_lane_idx`` (unfinished laned jobs only).
SELECT acta.job.lane_key, count(*) AS count_1, min(acta.job.id) AS min_1
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.lane_key IS NOT NULL AND acta.job.status IN (__[POSTCOMPILE_status_1]) GROUP BY acta.job.lane_key ORDER BY acta.job.lane_key
 LIMIT %(param_1)s::INTEGER;

-- inspect.list_locks: The namespace's named locks as held now: name, holder job and worker, since
--   when, until when (a lease its worker's heartbeat renews).
SELECT acta.lock.name, acta.lock.job_id, acta.lock.execution_id, acta.lock.worker_id, acta.lock.acquired_at, acta.lock.lease_expires_at
FROM acta.lock
WHERE acta.lock.namespace = %(namespace_1)s::VARCHAR ORDER BY acta.lock.name
 LIMIT %(param_1)s::INTEGER;

-- inspect.list_namespaces: The namespaces this database knows of (``acta status``, the dashboard's
--   namespace switcher): those workers registered, with workers or definitions, and those with
--   ready, executing or finished jobs (jobs enqueued before any worker started: their namespace has
--   no row yet). The jobs' by skip scans of job_due_idx, job_lease_idx and job_prune_idx, never a
--   scan of acta.job.
WITH RECURSIVE ready_ns(ns) AS
((SELECT acta.job.namespace AS ns
FROM acta.job
WHERE acta.job.status = 'ready' ORDER BY acta.job.namespace
 LIMIT %(param_1)s::INTEGER) UNION ALL SELECT (SELECT acta.job.namespace
FROM acta.job
WHERE acta.job.status = 'ready' AND acta.job.namespace > ready_ns.ns ORDER BY acta.job.namespace
 LIMIT %(param_2)s::INTEGER) AS anon_1
FROM ready_ns
WHERE ready_ns.ns IS NOT NULL),
executing_ns(ns) AS
((SELECT acta.job.namespace AS ns
FROM acta.job
WHERE acta.job.status = 'executing' AND acta.job.lease_expires_at IS NOT NULL ORDER BY acta.job.namespace
 LIMIT %(param_3)s::INTEGER) UNION ALL SELECT (SELECT acta.job.namespace
FROM acta.job
WHERE acta.job.status = 'executing' AND acta.job.lease_expires_at IS NOT NULL AND acta.job.namespace > executing_ns.ns ORDER BY acta.job.namespace
 LIMIT %(param_4)s::INTEGER) AS anon_2
FROM executing_ns
WHERE executing_ns.ns IS NOT NULL),
finished_ns(ns) AS
((SELECT acta.job.namespace AS ns
FROM acta.job
WHERE acta.job.status IN ('succeeded', 'failed', 'cancelled') ORDER BY acta.job.namespace
 LIMIT %(param_5)s::INTEGER) UNION ALL SELECT (SELECT acta.job.namespace
FROM acta.job
WHERE acta.job.status IN ('succeeded', 'failed', 'cancelled') AND acta.job.namespace > finished_ns.ns ORDER BY acta.job.namespace
 LIMIT %(param_6)s::INTEGER) AS anon_3
FROM finished_ns
WHERE finished_ns.ns IS NOT NULL)
 SELECT known.name
FROM (SELECT acta.namespace.name AS name
FROM acta.namespace UNION SELECT acta.worker.namespace AS namespace
FROM acta.worker UNION SELECT acta.definition.namespace AS namespace
FROM acta.definition UNION SELECT ready_ns.ns AS ns
FROM ready_ns
WHERE ready_ns.ns IS NOT NULL UNION SELECT executing_ns.ns AS ns
FROM executing_ns
WHERE executing_ns.ns IS NOT NULL UNION SELECT finished_ns.ns AS ns
FROM finished_ns
WHERE finished_ns.ns IS NOT NULL) AS known ORDER BY known.name
 LIMIT %(param_7)s::INTEGER;

-- inspect.list_schedule_rows: The namespace's schedules with their pending fire and their latest
--   finished fire.
SELECT acta.schedule.name, acta.schedule.cron, acta.schedule.timezone, acta.schedule.kind, acta.schedule.args, acta.schedule.missed, acta.schedule.enabled, (SELECT min(fire.scheduled_at) AS min_1
FROM acta.job AS fire
WHERE fire.namespace = %(namespace_1)s::VARCHAR AND fire.schedule_name = acta.schedule.name AND fire.status IN (__[POSTCOMPILE_status_1])) AS next_fire, last.scheduled_at AS last_fire, last.status AS last_status, last.id AS last_job_id
FROM acta.schedule LEFT OUTER JOIN LATERAL (SELECT fire.scheduled_at AS scheduled_at, fire.status AS status, fire.id AS id
FROM acta.job AS fire
WHERE fire.namespace = %(namespace_2)s::VARCHAR AND fire.schedule_name = acta.schedule.name AND fire.status IN (__[POSTCOMPILE_status_2]) ORDER BY fire.scheduled_at DESC
 LIMIT %(param_1)s::INTEGER) AS last ON true
WHERE acta.schedule.namespace = %(namespace_3)s::VARCHAR ORDER BY acta.schedule.name;

-- inspect.list_workers: The namespace's newest ``limit`` worker rows (running, stopped or dead).
SELECT acta.worker.id, acta.worker.status, acta.worker.hostname, acta.worker.pid, acta.worker.executors, acta.worker.heartbeat_seconds, acta.worker.started_at, acta.worker.heartbeat_at, acta.worker.stopped_at
FROM acta.worker
WHERE acta.worker.namespace = %(namespace_1)s::VARCHAR ORDER BY acta.worker.id DESC
 LIMIT %(param_1)s::INTEGER;

-- inspect.newest_job_id: The highest job id (the top of a bounded args search; one step down the
--   primary key).
SELECT max(acta.job.id) AS max_1
FROM acta.job;

-- inspect.queue_depth: (kind, status, count) of the namespace's jobs, by kind then status.
SELECT acta.job.kind, acta.job.status, count(*) AS count_1
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR GROUP BY acta.job.kind, acta.job.status ORDER BY acta.job.kind, acta.job.status;

-- inspect.rate_meter: One rate key's meter: when it admits next.
SELECT acta.rate_meter.next_at, acta.rate_meter.booked, acta.rate_meter.updated_at
FROM acta.rate_meter
WHERE acta.rate_meter.namespace = %(namespace_1)s::VARCHAR AND acta.rate_meter.key = %(key_1)s::VARCHAR;

-- inspect.search_jobs: Jobs whose args text contains ``pattern`` (an ILIKE pattern, escaped by the
--   caller), newest first, among ids in [floor_id, before_id): no index can answer a substring
--   search, so each page reads a bounded slice of the primary key instead of the table.
SELECT acta.job.id, acta.job.namespace, acta.job.kind, acta.job.status, acta.job.priority, acta.job.attempts, acta.job.max_attempts, CASE WHEN (acta.job.run_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.run_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.run_at END AS run_at, CASE WHEN (acta.job.created_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.created_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.created_at END AS created_at, CASE WHEN (acta.job.finished_at > CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('9999-12-30 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) WHEN (acta.job.finished_at < CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE)) THEN CAST('0001-01-02 00:00:00+00' AS TIMESTAMP WITH TIME ZONE) ELSE acta.job.finished_at END AS finished_at
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.status = %(status_1)s AND acta.job.kind = %(kind_1)s::VARCHAR AND acta.job.id < %(id_1)s::BIGINT AND acta.job.id >= %(id_2)s::BIGINT AND CAST(acta.job.args AS TEXT) ILIKE %(param_1)s::VARCHAR ESCAPE '\' ORDER BY acta.job.id DESC
 LIMIT %(param_2)s::INTEGER;

-- demo.count_executions: Attempts recorded for the namespace's jobs.
SELECT count(*) AS count_1
FROM acta.attempt JOIN acta.job ON acta.job.id = acta.attempt.job_id
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR;

-- demo.count_finished: The namespace's jobs in a terminal state.
SELECT count(*) AS count_1
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.status IN (__[POSTCOMPILE_status_1]);

-- demo.count_jobs_of_user: Jobs whose args name ``user_id`` (the rolled-back sign-up must have
--   none).
SELECT count(*) AS count_1
FROM acta.job
WHERE CAST((acta.job.args ->> %(args_1)s::TEXT) AS INTEGER) = %(param_1)s::INTEGER;

-- demo.delete_namespace_history: Delete the namespace's execution rows (before its jobs: the demo
--   starts empty).
DELETE FROM acta.execution WHERE acta.execution.job_id IN (SELECT acta.job.id
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR);

-- demo.delete_namespace_jobs: Delete every job of the namespace.
DELETE FROM acta.job WHERE acta.job.namespace = %(namespace_1)s::VARCHAR;

-- demo.last_error_of_kind: The last error of the namespace's job of ``kind``.
SELECT acta.job.last_error
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.kind = %(kind_1)s::VARCHAR;

-- demo.outcome_by_kind: (kind, status, count, average attempts) of the namespace's jobs.
SELECT acta.job.kind, acta.job.status, count(*) AS count_1, avg(acta.job.attempts) AS avg_1
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR GROUP BY acta.job.kind, acta.job.status ORDER BY acta.job.kind;

-- demo.result_of_kind: The result of the namespace's job of ``kind``.
SELECT acta.job.result
FROM acta.job
WHERE acta.job.namespace = %(namespace_1)s::VARCHAR AND acta.job.kind = %(kind_1)s::VARCHAR;

-- breakers.close_breaker: Close a breaker by hand: counts and probes reset; answers the state it
--   had.
UPDATE acta.breaker SET state=%(state)s::VARCHAR, open_until=%(open_until)s::TIMESTAMP WITH TIME ZONE, changed_at=now(), window_start=now(), calls=%(calls)s::INTEGER, failures=%(failures)s::INTEGER, prev_calls=%(prev_calls)s::INTEGER, prev_failures=%(prev_failures)s::INTEGER, probe_jobs=%(probe_jobs)s::BIGINT[], probe_executions=%(probe_executions)s::BIGINT[] WHERE acta.breaker.namespace = %(namespace_1)s::VARCHAR AND acta.breaker.kind = %(kind_1)s::VARCHAR AND acta.breaker.key = %(key_1)s::VARCHAR RETURNING (SELECT acta.breaker.state
FROM acta.breaker
WHERE acta.breaker.namespace = %(namespace_2)s::VARCHAR AND acta.breaker.kind = %(kind_2)s::VARCHAR AND acta.breaker.key = %(key_2)s::VARCHAR) AS anon_1;

-- breakers.list_breakers: A namespace's breakers: kind, key, state as it is now (an open breaker
--   past its ``open_until`` is half-open: its next job is a probe), when it changes next (an open
--   one's ``open_until``; None: on an outcome), live-or-not probes held, since when.
SELECT acta.breaker.kind, acta.breaker.key, CASE WHEN (acta.breaker.state = %(state_1)s::VARCHAR AND acta.breaker.open_until <= now()) THEN %(param_1)s::VARCHAR ELSE acta.breaker.state END AS anon_1, CASE WHEN (acta.breaker.state = %(state_2)s::VARCHAR AND acta.breaker.open_until > now()) THEN acta.breaker.open_until END AS anon_2, cardinality(acta.breaker.probe_jobs) AS cardinality_1, acta.breaker.changed_at
FROM acta.breaker
WHERE acta.breaker.namespace = %(namespace_1)s::VARCHAR ORDER BY acta.breaker.kind, acta.breaker.key;

-- breakers.lock_breaker: The breaker's advisory lock until commit (the one ``admit`` and
--   ``breaker_record`` take), so a close by hand does not interleave with a worker's decision.
SELECT pg_advisory_xact_lock(hashtextextended(concat_ws(chr(%(chr_1)s::INTEGER), %(concat_ws_1)s::VARCHAR, %(concat_ws_2)s::VARCHAR, %(concat_ws_3)s::VARCHAR, %(concat_ws_4)s::VARCHAR), %(hashtextextended_1)s::INTEGER)) AS pg_advisory_xact_lock_1;

-- ddl.sequence.execution_id_seq
CREATE SEQUENCE acta.execution_id_seq;

-- ddl.table.breaker
CREATE TABLE acta.breaker (
	namespace TEXT NOT NULL,
	kind TEXT NOT NULL,
	key TEXT NOT NULL,
	state TEXT DEFAULT 'closed' NOT NULL,
	open_until TIMESTAMP WITH TIME ZONE,
	changed_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	window_start TIMESTAMP WITH TIME ZONE DEFAULT '-infinity'::timestamptz NOT NULL,
	calls INTEGER DEFAULT '0' NOT NULL,
	failures INTEGER DEFAULT '0' NOT NULL,
	prev_calls INTEGER DEFAULT '0' NOT NULL,
	prev_failures INTEGER DEFAULT '0' NOT NULL,
	probe_jobs BIGINT[] DEFAULT '{}'::bigint[] NOT NULL,
	probe_executions BIGINT[] DEFAULT '{}'::bigint[] NOT NULL,
	CONSTRAINT breaker_pkey PRIMARY KEY (namespace, kind, key),
	CONSTRAINT breaker_breaker_state_check_check CHECK (state IN ('closed', 'open', 'half_open'))
);

-- ddl.table.concurrency_slot
CREATE TABLE acta.concurrency_slot (
	namespace TEXT NOT NULL,
	key TEXT NOT NULL,
	job_id BIGINT NOT NULL,
	execution_id BIGINT NOT NULL,
	worker_id BIGINT,
	acquired_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	CONSTRAINT concurrency_slot_pkey PRIMARY KEY (namespace, key, job_id)
);

-- ddl.table.execution
CREATE TABLE acta.execution (
	job_id BIGINT NOT NULL,
	id BIGINT NOT NULL,
	attempt INTEGER NOT NULL,
	worker_id BIGINT,
	claimed_at TIMESTAMP WITH TIME ZONE,
	started_at TIMESTAMP WITH TIME ZONE,
	finished_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	outcome TEXT NOT NULL,
	error_type TEXT,
	error_message TEXT,
	traceback TEXT,
	CONSTRAINT execution_pkey PRIMARY KEY (job_id, id)
);

-- ddl.table.job
CREATE TABLE acta.job (
	id BIGINT GENERATED BY DEFAULT AS IDENTITY,
	namespace TEXT DEFAULT 'default' NOT NULL,
	kind TEXT NOT NULL,
	args JSONB DEFAULT '{}' NOT NULL,
	status VARCHAR(16) DEFAULT 'ready' NOT NULL,
	priority SMALLINT DEFAULT '0' NOT NULL,
	run_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	attempts INTEGER DEFAULT '0' NOT NULL,
	max_attempts INTEGER,
	execution_id BIGINT,
	worker_id BIGINT,
	claimed_at TIMESTAMP WITH TIME ZONE,
	started_at TIMESTAMP WITH TIME ZONE,
	lease_expires_at TIMESTAMP WITH TIME ZONE,
	concurrency_key TEXT,
	rate_key TEXT,
	lane_key TEXT,
	unique_key TEXT,
	parent_id BIGINT,
	parent_execution_id BIGINT,
	pending_children INTEGER DEFAULT '0' NOT NULL,
	awaited_signal TEXT,
	signals JSONB,
	schedule_name TEXT,
	scheduled_at TIMESTAMP WITH TIME ZONE,
	trace_context TEXT,
	resumed TEXT,
	result JSONB,
	last_error JSONB,
	cancel_requested BOOLEAN DEFAULT 'false' NOT NULL,
	suspect BOOLEAN DEFAULT 'false' NOT NULL,
	created_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	finished_at TIMESTAMP WITH TIME ZONE,
	outcome TEXT,
	attempt_error JSONB,
	CONSTRAINT job_pkey PRIMARY KEY (id),
	CONSTRAINT job_status_check CHECK (status IN ('ready', 'executing', 'waiting', 'succeeded', 'failed', 'cancelled'))
)
 WITH (fillfactor = 50);

-- ddl.index.job_children_wait_idx
CREATE INDEX job_children_wait_idx ON acta.job (namespace, id) WHERE status = 'waiting' AND pending_children > 0;

-- ddl.index.job_claim_idx
CREATE INDEX job_claim_idx ON acta.job (namespace, priority, run_at, id) WHERE status = 'ready';

-- ddl.index.job_due_idx
CREATE INDEX job_due_idx ON acta.job (namespace, run_at) WHERE status = 'ready';

-- ddl.index.job_failed_idx
CREATE INDEX job_failed_idx ON acta.job (namespace, finished_at) WHERE status = 'failed';

-- ddl.index.job_key_idx
CREATE INDEX job_key_idx ON acta.job (namespace, concurrency_key, id) WHERE concurrency_key IS NOT NULL AND status IN ('ready', 'executing', 'waiting');

-- ddl.index.job_lane_idx
CREATE INDEX job_lane_idx ON acta.job (namespace, lane_key, id) WHERE lane_key IS NOT NULL AND status IN ('ready', 'executing', 'waiting');

-- ddl.index.job_lane_waiting_idx
CREATE INDEX job_lane_waiting_idx ON acta.job (namespace, lane_key, id) WHERE status = 'waiting' AND lane_key IS NOT NULL;

-- ddl.index.job_lease_idx
CREATE INDEX job_lease_idx ON acta.job (namespace, lease_expires_at) WHERE lease_expires_at IS NOT NULL;

-- ddl.index.job_parent_idx
CREATE INDEX job_parent_idx ON acta.job (parent_id) WHERE parent_id IS NOT NULL;

-- ddl.index.job_prune_idx
CREATE INDEX job_prune_idx ON acta.job (namespace, kind, finished_at) WHERE status IN ('succeeded', 'failed', 'cancelled');

-- ddl.index.job_schedule_tick_key
CREATE UNIQUE INDEX job_schedule_tick_key ON acta.job (namespace, schedule_name, scheduled_at) WHERE schedule_name IS NOT NULL;

-- ddl.index.job_suspect_idx
CREATE INDEX job_suspect_idx ON acta.job (namespace, priority, run_at, id) WHERE status = 'ready' AND suspect;

-- ddl.index.job_unique_key_idx
CREATE UNIQUE INDEX job_unique_key_idx ON acta.job (namespace, unique_key) WHERE unique_key IS NOT NULL AND status IN ('ready', 'executing', 'waiting');

-- ddl.index.job_wait_deadline_idx
CREATE INDEX job_wait_deadline_idx ON acta.job (namespace, run_at) WHERE status = 'waiting' AND awaited_signal IS NOT NULL;

-- ddl.table.lock
CREATE TABLE acta.lock (
	namespace TEXT NOT NULL,
	name TEXT NOT NULL,
	job_id BIGINT NOT NULL,
	execution_id BIGINT NOT NULL,
	worker_id BIGINT,
	acquired_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	lease_expires_at TIMESTAMP WITH TIME ZONE NOT NULL,
	CONSTRAINT lock_pkey PRIMARY KEY (namespace, name)
);

-- ddl.table.namespace
CREATE TABLE acta.namespace (
	name TEXT NOT NULL,
	definitions_version BIGINT DEFAULT '0' NOT NULL,
	depth_due_at TIMESTAMP WITH TIME ZONE DEFAULT '-infinity'::timestamptz NOT NULL,
	recovery_due_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	created_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	CONSTRAINT namespace_pkey PRIMARY KEY (name)
);

-- ddl.table.rate_meter
CREATE TABLE acta.rate_meter (
	namespace TEXT NOT NULL,
	key TEXT NOT NULL,
	next_at TIMESTAMP WITH TIME ZONE DEFAULT '-infinity'::timestamptz NOT NULL,
	booked TIMESTAMP WITH TIME ZONE DEFAULT '-infinity'::timestamptz NOT NULL,
	updated_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	CONSTRAINT rate_meter_pkey PRIMARY KEY (namespace, key)
);

-- ddl.table.schedule
CREATE TABLE acta.schedule (
	id BIGINT GENERATED BY DEFAULT AS IDENTITY,
	namespace TEXT NOT NULL,
	name TEXT NOT NULL,
	cron TEXT NOT NULL,
	timezone TEXT DEFAULT 'UTC' NOT NULL,
	kind TEXT NOT NULL,
	args JSONB DEFAULT '{}' NOT NULL,
	missed TEXT DEFAULT 'latest' NOT NULL,
	enabled BOOLEAN DEFAULT 'true' NOT NULL,
	priority SMALLINT DEFAULT '0' NOT NULL,
	concurrency_key TEXT,
	rate_key TEXT,
	lane_key TEXT,
	next_fire_at TIMESTAMP WITH TIME ZONE,
	last_fired_at TIMESTAMP WITH TIME ZONE,
	created_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	CONSTRAINT schedule_pkey PRIMARY KEY (id)
);

-- ddl.index.schedule_namespace_name_key
CREATE UNIQUE INDEX schedule_namespace_name_key ON acta.schedule (namespace, name);

-- ddl.table.worker
CREATE TABLE acta.worker (
	id BIGINT GENERATED BY DEFAULT AS IDENTITY,
	namespace TEXT NOT NULL,
	hostname TEXT NOT NULL,
	pid INTEGER NOT NULL,
	status VARCHAR(16) NOT NULL,
	executors INTEGER NOT NULL,
	heartbeat_seconds DOUBLE PRECISION DEFAULT '45' NOT NULL,
	kinds JSONB DEFAULT '[]' NOT NULL,
	version TEXT DEFAULT '' NOT NULL,
	started_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	heartbeat_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	stopped_at TIMESTAMP WITH TIME ZONE,
	CONSTRAINT worker_pkey PRIMARY KEY (id),
	CONSTRAINT worker_status_check CHECK (status IN ('running', 'stopped', 'dead'))
);

-- ddl.index.worker_live_idx
CREATE INDEX worker_live_idx ON acta.worker (namespace) WHERE status = 'running';

-- ddl.table.definition
CREATE TABLE acta.definition (
	namespace TEXT NOT NULL,
	kind TEXT NOT NULL,
	declared JSONB DEFAULT '{}' NOT NULL,
	overrides JSONB DEFAULT '{}' NOT NULL,
	updated_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	CONSTRAINT definition_pkey PRIMARY KEY (namespace, kind),
	CONSTRAINT definition_namespace_fkey FOREIGN KEY(namespace) REFERENCES acta.namespace (name) ON DELETE CASCADE
);
