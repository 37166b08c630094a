"""``acta doctor``'s statements: the health of acta's tables and of the server around them.

Plain SQL text with SQLAlchemy ``:name`` parameters (``acta_sqla.doctor`` wraps each in
``text()``). Every statement stays cheap on a table of millions of rows: the statistics
views (``pg_stat_*``, sizes from the catalogue) and predicates an index serves, never a
count over all of ``acta.job``."""

from __future__ import annotations

from ._render import quote

VACUUMED_TABLES = ("job", "execution")
"""The tables whose churn makes vacuum matter: every job passes through several row
versions of ``job`` and leaves ``execution`` rows that retention prunes."""

FINDINGS_CAP = 10_000
"""Rows a counting statement looks at, at most: past this many the report says "10000+"
instead of walking a backlog that is itself the problem."""


def server_settings() -> str:
    """The server's vacuum settings and clock: autovacuum and track_counts (autovacuum needs
    both), the freeze age, the database's now()."""
    return """
        SELECT current_setting('autovacuum')::bool AS autovacuum,
               current_setting('track_counts')::bool AS track_counts,
               current_setting('autovacuum_freeze_max_age')::bigint AS freeze_max_age,
               current_setting('server_version') AS server_version,
               now() AS now"""


def table_health(schema: str) -> str:
    """Live and dead rows, last (auto)vacuum and (auto)analyze, the per-table autovacuum
    switch, heap and index bytes, and the frozen-xid age of acta.job and acta.execution
    (statistics views and file sizes only: no scan)."""
    tables = ", ".join(f"'{t}'" for t in VACUUMED_TABLES)
    return f"""
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
        WHERE n.nspname = {_literal(schema)} AND c.relname IN ({tables}) AND c.relkind = 'r'
        ORDER BY c.relname"""


def index_sizes(schema: str) -> str:
    """Each index of acta.job and acta.execution with its size and estimated entries."""
    tables = ", ".join(f"'{t}'" for t in VACUUMED_TABLES)
    return f"""
        SELECT t.relname AS table_name, i.relname AS name,
               pg_relation_size(i.oid) AS bytes,
               greatest(i.reltuples, 0)::bigint AS estimated_entries
        FROM pg_index x
        JOIN pg_class i ON i.oid = x.indexrelid
        JOIN pg_class t ON t.oid = x.indrelid
        JOIN pg_namespace n ON n.oid = t.relnamespace
        WHERE n.nspname = {_literal(schema)} AND t.relname IN ({tables})
        ORDER BY t.relname, i.relname"""


def xmin_holders() -> str:
    """Sessions of this database that hold back vacuum's horizon (a snapshot or an
    assigned transaction id) or sit idle in a transaction, oldest first, this session
    excepted; at most 20."""
    return """
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
        LIMIT 20"""


def prepared_transactions() -> str:
    """Prepared (two-phase) transactions of this database: each holds vacuum's horizon,
    even across a restart, until COMMIT PREPARED or ROLLBACK PREPARED."""
    return """
        SELECT gid, owner, age(transaction) AS xmin_age,
               extract(epoch FROM now() - prepared)::float8 AS transaction_seconds
        FROM pg_prepared_xacts
        WHERE database = current_database()
        ORDER BY prepared
        LIMIT 20"""


def replication_slots() -> str:
    """Replication slots that hold vacuum's horizon for this database (physical slots hold
    it for every database; a logical slot for its own, through catalog_xmin)."""
    return """
        SELECT slot_name, slot_type, active,
               greatest(age(xmin), age(catalog_xmin)) AS xmin_age
        FROM pg_replication_slots
        WHERE (database IS NULL OR database = current_database())
          AND (xmin IS NOT NULL OR catalog_xmin IS NOT NULL)
        ORDER BY greatest(age(xmin), age(catalog_xmin)) DESC
        LIMIT 20"""


def expired_leases(schema: str) -> str:
    """Rows of namespace :namespace still 'executing' past their lease: how many (looking
    at FINDINGS_CAP at most) and how long the oldest has been expired. Served by
    job_lease_idx (namespace, lease_expires_at)."""
    return f"""
        SELECT count(*) AS rows,
               extract(epoch FROM now() - min(lease_expires_at))::float8 AS oldest_seconds
        FROM (
            SELECT lease_expires_at FROM {quote(schema)}.job
            WHERE namespace = :namespace AND lease_expires_at IS NOT NULL
              AND lease_expires_at < now() AND status = 'executing'
            ORDER BY lease_expires_at
            LIMIT {FINDINGS_CAP}
        ) AS expired"""


def late_waits(schema: str) -> str:
    """Signal waits of namespace :namespace still 'waiting' past their deadline (a
    heartbeat wakes them within one beat): how many (looking at FINDINGS_CAP at most) and
    how long the oldest is past it. Served by job_wait_deadline_idx."""
    return f"""
        SELECT count(*) AS rows,
               extract(epoch FROM now() - min(run_at))::float8 AS oldest_seconds
        FROM (
            SELECT run_at FROM {quote(schema)}.job
            WHERE namespace = :namespace AND status = 'waiting'
              AND awaited_signal IS NOT NULL AND run_at < now()
            ORDER BY run_at
            LIMIT {FINDINGS_CAP}
        ) AS late"""


def stored_schedules(schema: str) -> str:
    """The stored schedules of namespace :namespace (their cron, timezone and missed
    policy: whether each can fire is judged in Python). A handful of rows, by the
    primary key."""
    return f"""
        SELECT name, cron, timezone, missed, enabled
        FROM {quote(schema)}.schedule
        WHERE namespace = :namespace
        ORDER BY name"""


def silent_workers(schema: str) -> str:
    """Workers of namespace :namespace still marked running but silent for :dead_beats of
    their own heartbeats (dead, and not yet marked so by recovery); served by
    worker_live_idx. At most 20, the longest silent first."""
    return f"""
        SELECT id, hostname, pid, heartbeat_seconds,
               extract(epoch FROM now() - heartbeat_at)::float8 AS silent_seconds
        FROM {quote(schema)}.worker
        WHERE namespace = :namespace AND status = 'running'
          AND heartbeat_at < now() - make_interval(secs => :dead_beats * heartbeat_seconds)
        ORDER BY heartbeat_at
        LIMIT 20"""


def recently_dead_workers(schema: str) -> str:
    """Workers of namespace :namespace that recovery marked dead in the last :window
    seconds (crashed or cut off: their jobs came back through recovery). At most 20."""
    return f"""
        SELECT id, hostname, pid,
               extract(epoch FROM now() - stopped_at)::float8 AS dead_seconds
        FROM {quote(schema)}.worker
        WHERE namespace = :namespace AND status = 'dead'
          AND stopped_at > now() - make_interval(secs => :window)
        ORDER BY stopped_at DESC
        LIMIT 20"""


def ready_backlog(schema: str) -> str:
    """Jobs of namespace :namespace ready and due now: how many (looking at FINDINGS_CAP at
    most) and how long the oldest has been due. Served by job_due_idx."""
    return f"""
        SELECT count(*) AS rows,
               extract(epoch FROM now() - min(run_at))::float8 AS oldest_seconds
        FROM (
            SELECT run_at FROM {quote(schema)}.job
            WHERE namespace = :namespace AND status = 'ready' AND run_at <= now()
            ORDER BY run_at
            LIMIT {FINDINGS_CAP}
        ) AS due"""


def namespace_workers(schema: str) -> str:
    """The workers of namespace :namespace as recovery sees them: how many are live
    (running and heard from within :dead_beats of their own beats), the longest beat a
    live one registered, and the beat of the one heard from last (live or not). The worker
    table holds a row per worker start (pruned), so this reads few rows."""
    return f"""
        SELECT count(*) FILTER (WHERE live) AS live,
               max(heartbeat_seconds) FILTER (WHERE live) AS live_beat,
               (array_agg(heartbeat_seconds ORDER BY heartbeat_at DESC NULLS LAST))[1]
                   AS last_beat
        FROM (
            SELECT heartbeat_seconds, heartbeat_at,
                   status = 'running' AND heartbeat_at >= now()
                       - make_interval(secs => :dead_beats * heartbeat_seconds) AS live
            FROM {quote(schema)}.worker
            WHERE namespace = :namespace
        ) AS w"""


KNOWN_NAMESPACES_CAP = 50
"""The known namespaces ``unknown_namespace`` reads, at most."""


def known_namespaces(schema: str) -> str:
    """The namespaces this database knows of, by name (at most KNOWN_NAMESPACES_CAP): those
    registered (a worker's start writes the namespace row), with workers or definitions, and
    those with ready, executing or finished jobs (a namespace no worker ever served has
    only those; a waiting job's namespace had a worker). The jobs' are found by skip
    scans of job_due_idx, job_lease_idx and job_prune_idx (one index probe per
    namespace each), never a scan of acta.job."""
    s = quote(schema)

    def skip_scan(name: str, where: str) -> str:
        return f"""{name}(ns) AS (
            (SELECT namespace FROM {s}.job WHERE {where} ORDER BY namespace LIMIT 1)
            UNION ALL
            SELECT (SELECT namespace FROM {s}.job
                    WHERE {where} AND namespace > {name}.ns ORDER BY namespace LIMIT 1)
            FROM {name} WHERE {name}.ns IS NOT NULL)"""

    ready = skip_scan("ready", "status = 'ready'")
    # Both job_lease_idx predicates (0001's status, 0002's lease) are implied: either serves.
    executing = skip_scan("executing", "status = 'executing' AND lease_expires_at IS NOT NULL")
    finished = skip_scan("finished", "status IN ('succeeded', 'failed', 'cancelled')")
    return f"""
        WITH RECURSIVE {ready}, {executing}, {finished}
        SELECT name FROM (
            SELECT name FROM {s}.namespace
            UNION SELECT namespace FROM {s}.worker
            UNION SELECT namespace FROM {s}.definition
            UNION SELECT ns FROM ready WHERE ns IS NOT NULL
            UNION SELECT ns FROM executing WHERE ns IS NOT NULL
            UNION SELECT ns FROM finished WHERE ns IS NOT NULL
        ) AS known
        ORDER BY name
        LIMIT {KNOWN_NAMESPACES_CAP}"""


def _literal(value: str) -> str:
    # The schema is checked to be a plain lower-case identifier (settings.SCHEMA_PATTERN);
    # quoting the literal anyway keeps the statement valid whatever it is.
    return "'" + value.replace("'", "''") + "'"


def open_breakers(schema: str) -> str:
    """The circuit breakers of namespace :namespace that are not closed (docs/breakers.md):
    kind, key, state, seconds since it changed, seconds until an open one half-opens. By
    the primary key; a handful of rows."""
    return f"""
        SELECT kind, key, state,
               extract(epoch FROM now() - changed_at)::float8 AS since_seconds,
               extract(epoch FROM open_until - now())::float8 AS until_seconds
        FROM {quote(schema)}.breaker
        WHERE namespace = :namespace AND state <> 'closed'
        ORDER BY kind, key"""
