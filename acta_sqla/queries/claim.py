"""The claim: ONE statement takes due rows for free executors; and when the next row is due.

Each builder returns SQL text with asyncpg ``$n`` parameters for one schema; ``WorkerSQL``
renders them once per worker. No SQLAlchemy here."""

from __future__ import annotations

from ._render import quote


def mint_execution_id(schema: str) -> str:
    """The fencing token. A sequence's advance is only as durable as the transaction that
    made it: after a database crash the sequence may hand out again an id that a lost claim
    carried. So the token is the sequence value (low 40 bits) under the server's start time
    (high 23 bits), which changes with every restart, crash recovery or failover: a token
    minted after a crash never equals one minted before it."""
    return (
        "(((extract(epoch FROM pg_postmaster_start_time())::bigint % 8388608) << 40)"
        f" | (nextval('{schema}.execution_id_seq') % 1099511627776))"
    )


TELEMETRY_COLUMNS = """j.trace_context,
                      extract(epoch FROM now() - j.run_at)::float8 AS waited,"""
"""What only telemetry reads: the enqueue's trace context (a span's parent) and how long
the job waited (the queue-wait histogram)."""
NO_TELEMETRY = """NULL::text AS trace_context, NULL::float8 AS waited,"""


def _claimed(schema: str, returning: str = "", telemetry: bool = True) -> str:
    """The body of the ``claimed`` CTE both claims share: the picked rows moved to
    'executing', the attempt counted, the execution id minted, the lease started.
    ``telemetry=False``: the trace context and the wait come back NULL (a worker with no
    OpenTelemetry SDK reads neither: see :func:`claim_plain_lean`)."""
    s = quote(schema)
    columns = TELEMETRY_COLUMNS if telemetry else NO_TELEMETRY
    return f"""            UPDATE {s}.job AS j SET
                status = 'executing',
                attempts = j.attempts + 1,
                execution_id = {mint_execution_id(schema)},
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
                      j.schedule_name, j.scheduled_at, {columns}
                      j.run_at{returning}"""


def _unpaused(param: int | None) -> str:
    return f"\n              AND kind <> ALL (${param}::text[])" if param else ""


def claim_jobs(schema: str, paused_param: int | None = None) -> str:
    """Claim: ONE statement takes up to $2 due rows of namespace $1 in claim order, moves each
    to 'executing', counts the attempt, and mints its execution id (the fencing token).
    SKIP LOCKED: two claimers never take the same row, and never wait for each other.

    Suspects (rows lost with their worker before they were known to start) are never put
    in a batch with others: while one is due, a claimer with nothing in flight ($5, alone)
    takes that suspect and nothing else, and a claimer with work in flight takes nothing
    (it drains, then claims alone), so a suspect always runs alone and the worker's next
    crash, if it causes one, is its own. Answers the claimed rows in claim order (columns
    in ClaimedJob's order), each with ``suspect_due``; when nothing was claimed, ONE row of
    NULLs carrying ``suspect_due`` (the claimer must know it held back for a suspect)."""
    s = quote(schema)
    skip = _unpaused(paused_param)
    return f"""
        WITH suspect AS (
            -- Normally empty: one probe of the (empty) partial index of due suspects.
            SELECT id FROM {s}.job
            WHERE namespace = $1 AND status = 'ready' AND suspect AND run_at <= now(){skip}
            ORDER BY priority, run_at, id
            LIMIT 1
            FOR UPDATE SKIP LOCKED
        ),
        plain AS (
            SELECT id FROM {s}.job
            WHERE namespace = $1 AND status = 'ready' AND run_at <= now() AND NOT suspect
              AND NOT EXISTS (SELECT 1 FROM suspect){skip}
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
{_claimed(schema, ", j.suspect")}
        )
        -- In claim order (the executors take them so); columns in ClaimedJob's order.
        SELECT c.id, c.execution_id, c.kind, c.args, c.attempts, c.max_attempts, c.priority,
               c.concurrency_key, c.rate_key, c.lane_key, c.parent_id, c.signals,
               c.resumed, c.schedule_name, c.scheduled_at, c.trace_context, c.waited,
               c.suspect AS alone, w.suspect_due
        FROM (SELECT EXISTS (SELECT 1 FROM suspect) AS suspect_due) w
        LEFT JOIN claimed c ON true
        ORDER BY c.priority, c.run_at, c.id"""


def claim_plain(schema: str, paused_param: int | None = None, telemetry: bool = True) -> str:
    """The hot claim: up to $2 due rows of namespace $1 that are not suspects, in claim
    order, each moved to 'executing' with its attempt counted and its execution id minted.
    No suspect probe: the claimer asks ``claim_jobs`` (which looks for a due suspect) at
    most once per ``SUSPECT_PROBE_SECONDS`` and this one in between, so plain jobs pay one
    heap filter (``NOT suspect``) on rows the claim reads anyway, not the probe's extra
    nodes on every claim (about 20 % more PostgreSQL CPU per job at 8 executors)."""
    s = quote(schema)
    skip = _unpaused(paused_param)
    return f"""
        WITH picked AS (
            SELECT id FROM {s}.job
            WHERE namespace = $1 AND status = 'ready' AND run_at <= now() AND NOT suspect{skip}
            ORDER BY priority, run_at, id
            LIMIT $2
            FOR UPDATE SKIP LOCKED
        ),
        claimed AS (
{_claimed(schema, "", telemetry)}
        )
        -- In claim order (the executors take them so); columns in ClaimedJob's order.
        SELECT id, execution_id, kind, args, attempts, max_attempts, priority,
               concurrency_key, rate_key, lane_key, parent_id, signals, resumed,
               schedule_name, scheduled_at, trace_context, waited, false AS alone
        FROM claimed ORDER BY priority, run_at, id"""


def claim_plain_lean(schema: str) -> str:
    """``claim_plain`` for a worker with no OpenTelemetry SDK: the trace context and the
    server-computed wait are not returned (NULL), so the hot claim neither reads the one
    nor computes the other per row (together with the completion's feature parts, about
    9 % of the two hot statements' cost: ``python -m benchmarks.statements``)."""
    return claim_plain(schema, telemetry=False)


def next_due_in(schema: str, paused_param: int | None = None) -> str:
    """Seconds until the next ready row of namespace $1 is due (None: none is waiting)."""
    s = quote(schema)
    skip = _unpaused(paused_param)
    return f"""
        SELECT extract(epoch FROM min(run_at) - now())::float8
        FROM {s}.job WHERE namespace = $1 AND status = 'ready'{skip}"""


def bounced_due_in(schema: str) -> str:
    """Seconds until the earliest *bounced* ready job of namespace $1 among kinds $2 is due
    (negative: due already; None: none). A burst worker (``acta worker --burst``,
    ``testing.drain``) stops only once none is left.

    A bounce is told from a due time the user chose by how it is stored: admission's
    refusal is an uncharged hand-back that writes no Execution row (``completions.bounce``:
    ``record=False``), so the row's last claim (``execution_id``) has no attempt in the
    history. A job delayed by its enqueuer (``delay=``, ``run_at=``, a schedule's fire) was
    never claimed (``execution_id IS NULL``), and a retry's back-off or ``Retry(after=)``
    follows an attempt that was recorded. The only other record-less hand-back with a delay
    is a worker's that has no handler for the kind: $2 is the kinds the burst runs."""
    s = quote(schema)
    return f"""
        SELECT extract(epoch FROM j.run_at - now())::float8
        FROM {s}.job AS j
        WHERE j.namespace = $1 AND j.status = 'ready' AND j.kind = ANY($2::text[])
          AND j.execution_id IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM {s}.execution AS e
                          WHERE e.job_id = j.id AND e.id = j.execution_id)
        ORDER BY j.run_at
        LIMIT 1"""


# While some kind of the namespace is paused (docs/operating.md), the worker claims with
# these: the same statements with one more filter, the paused kinds as their last
# parameter. A namespace with no paused kind never pays for the filter.


def claim_jobs_unpaused(schema: str) -> str:
    """``claim_jobs`` skipping the paused kinds ($6)."""
    return claim_jobs(schema, 6)


def claim_plain_unpaused(schema: str) -> str:
    """``claim_plain`` skipping the paused kinds ($5)."""
    return claim_plain(schema, 5)


def next_due_in_unpaused(schema: str) -> str:
    """``next_due_in`` skipping the paused kinds ($2)."""
    return next_due_in(schema, 2)
