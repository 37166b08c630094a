"""The worker's statements: SQL text with asyncpg ``$n`` parameters, rendered once for the
configured schema and prepared once per connection. Each names its guard: every state
change matches status plus the (job, execution) pair inside the statement itself.

No SQLAlchemy here: a worker process never needs to load it.
"""

from __future__ import annotations

_TERMINAL_SQL = "('succeeded', 'failed', 'cancelled')"


class WorkerSQL:
    """The worker's statements, rendered once for one schema (asyncpg ``$n`` parameters)."""

    def __init__(self, schema: str) -> None:
        s = f'"{schema}"'
        self.schema = schema

        # The fencing token. The claim commits asynchronously, and a sequence's advance is
        # only as durable as the transaction that made it: after a database crash the
        # sequence may hand out again an id that a lost claim carried. So the token is the
        # sequence value (low 40 bits) under the server's start time (high 23 bits), which
        # changes with every restart, crash recovery or failover: a token minted after a
        # crash never equals one minted before it.
        mint_execution_id = (
            "(((extract(epoch FROM pg_postmaster_start_time())::bigint % 8388608) << 40)"
            f" | (nextval('{schema}.execution_id_seq') % 1099511627776))"
        )

        # Claim: ONE statement takes up to $2 due rows of namespace $1 in claim order,
        # moves each to 'executing', counts the attempt, and mints its execution id (the
        # fencing token). SKIP LOCKED: two claimers never take the same row, and never wait
        # for each other.
        self.claim_jobs = f"""
            WITH picked AS (
                SELECT id FROM {s}.job
                WHERE namespace = $1 AND status = 'ready' AND run_at <= now()
                ORDER BY priority, run_at, id
                LIMIT $2
                FOR UPDATE SKIP LOCKED
            ),
            claimed AS (
                UPDATE {s}.job AS j SET
                    status = 'executing',
                    attempts = j.attempts + 1,
                    execution_id = {mint_execution_id},
                    worker_id = $3,
                    claimed_at = now(),
                    started_at = NULL,
                    lease_expires_at = now() + make_interval(secs => $4)
                -- By primary key whatever the plan: a generic plan (which cannot see that
                -- LIMIT $2 is small) would otherwise hash the table against the picked ids.
                WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
                RETURNING j.id, j.execution_id, j.kind, j.args::text AS args, j.attempts,
                          j.max_attempts, j.priority, j.concurrency_key, j.rate_key,
                          j.lane_key, j.parent_id, j.signals::text AS signals, j.run_at
            )
            -- In claim order (the executors take them so); columns in ClaimedJob's order.
            SELECT id, execution_id, kind, args, attempts, max_attempts, priority,
                   concurrency_key, rate_key, lane_key, parent_id, signals
            FROM claimed ORDER BY priority, run_at, id"""

        # Seconds until the next ready row of namespace $1 is due (None: none is waiting).
        self.next_due_in = f"""
            SELECT extract(epoch FROM min(run_at) - now())::float8
            FROM {s}.job WHERE namespace = $1 AND status = 'ready'"""

        # complete_executions: ONE statement writes every completion of a batch, whatever
        # its shape. Guard: the row must still be 'executing' under the same execution id,
        # so a repeated or late write (another worker took the row, or this one landed
        # already) matches nothing and is reported as lease lost, never applied twice.
        self.complete_executions = f"""
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
                    finished_at = CASE WHEN c.status IN {_TERMINAL_SQL} OR j.cancel_requested
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

        # Register: the namespace (if new) and the worker row in one statement, and the
        # admin connection named after the new id, so that every connection of a worker
        # can be found in pg_stat_activity.
        self.register_worker = f"""
            WITH ns AS (
                INSERT INTO {s}.namespace (name) VALUES ($1) ON CONFLICT (name) DO NOTHING
            ),
            w AS (
                INSERT INTO {s}.worker (namespace, hostname, pid, status, executors, kinds,
                                        version, heartbeat_seconds)
                VALUES ($1, $2, $3, 'running', $4, $5::jsonb, $6, $7)
                RETURNING id
            )
            SELECT id, set_config('application_name', $8 || id, false) AS application_name
            FROM w"""

        # Store the code's declared policies; a change moves the namespace's definitions
        # version so that every worker reloads within one heartbeat.
        self.store_definitions = f"""
            WITH d AS (
                SELECT * FROM unnest($2::text[], $3::text[]) AS d(kind, declared)
            ),
            up AS (
                INSERT INTO {s}.definition AS def (namespace, kind, declared)
                SELECT $1, d.kind, d.declared::jsonb FROM d
                ON CONFLICT (namespace, kind) DO UPDATE
                    SET declared = excluded.declared, updated_at = now()
                    WHERE def.declared IS DISTINCT FROM excluded.declared
                RETURNING 1
            )
            UPDATE {s}.namespace SET definitions_version = definitions_version + 1
            WHERE name = $1 AND EXISTS (SELECT 1 FROM up)
            RETURNING definitions_version"""

        self.load_definitions = f"""
            SELECT d.kind, d.declared::text, d.overrides::text, n.definitions_version
            FROM {s}.namespace n LEFT JOIN {s}.definition d ON d.namespace = n.name
            WHERE n.name = $1"""

        self.stop_worker = f"""
            UPDATE {s}.worker SET status = 'stopped', stopped_at = now()
            WHERE id = $1 AND status <> 'stopped'"""

        # The heartbeat: ONE statement renews the held (job, execution) pairs, records which
        # attempts have started, refreshes the worker row, takes the namespace's recovery
        # pass when it is due (moving it one lease on), and reports the definitions version.
        # Rows locked by another transaction are skipped, not waited for: they show up as
        # 'present' without 'renewed' and keep their deadline for the next beat.
        self.heartbeat = f"""
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

        # Named locks. Take: a free name, an expired hold, or one this execution holds
        # already. Fenced by the holder's (job, execution) pair, so a release or renewal by
        # a stale attempt matches nothing.
        self.take_lock = f"""
            INSERT INTO {s}.lock AS k (namespace, name, job_id, execution_id, worker_id,
                                       lease_expires_at)
            VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))
            ON CONFLICT (namespace, name) DO UPDATE SET
                job_id = excluded.job_id, execution_id = excluded.execution_id,
                worker_id = excluded.worker_id, acquired_at = now(),
                lease_expires_at = excluded.lease_expires_at
            WHERE k.lease_expires_at < now()
               OR (k.job_id = excluded.job_id AND k.execution_id = excluded.execution_id)
            RETURNING 1"""

        self.release_lock = f"""
            DELETE FROM {s}.lock
            WHERE namespace = $1 AND name = $2 AND job_id = $3 AND execution_id = $4"""

        # Recovery, step 1: rows whose lease ran out go back to 'ready'. An attempt the
        # database knows had started is charged (and ends 'failed' when the budget is
        # spent); one only claimed gets its count back -- unless the same job was already
        # lost unstarted before, so that a job that kills its worker at once still ends
        # after its budget instead of looping forever.
        self.recover_expired = f"""
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

        # Recovery, step 2: workers silent for 7 of their own beats are dead (each row keeps
        # its worker's interval: a namespace may mix settings); their locks and concurrency
        # slots are freed.
        self.mark_dead_workers = f"""
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

        # Recovery, step 3: finished jobs past their kind's retention, one bounded chunk.
        self.prune_finished = f"""
            WITH doomed AS (
                SELECT j.id FROM {s}.job j
                LEFT JOIN {s}.definition d ON d.namespace = j.namespace AND d.kind = j.kind
                CROSS JOIN LATERAL (
                    SELECT coalesce(d.overrides -> 'retention', d.declared -> 'retention') AS eff
                ) r
                WHERE j.namespace = $1
                  AND j.status IN {_TERMINAL_SQL}
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
