"""Recurring schedules, the worker's side: store the code's schedules, find those with no
pending fire, enqueue a fire under the schedule's lock. (A fire's successor is a part of
``complete_executions``: ``complete.next_fire``.)

Each builder returns SQL text with asyncpg ``$n`` parameters for one schema; ``WorkerSQL``
renders them once per worker. No SQLAlchemy here."""

from __future__ import annotations

from ._render import ACTIVE, quote

LOCK = (
    "pg_advisory_xact_lock(hashtextextended("
    "'acta.schedule' || chr(31) || $1 || chr(31) || {name}, 0))"
)
"""A schedule's transaction lock: taken by every writer that may enqueue a fire without a
fire of its own to fence it (start-up, recovery, ``acta schedules resume``)."""

FIRE = ("priority", "concurrency_key", "rate_key", "lane_key")
"""What every statement that writes a fire copies from the schedule row (``sc``): what
``handler.job(**args)`` would give a job of the schedule's args (migration 0011)."""
UNSTARTED = (
    "(j.status = 'ready' OR (j.status = 'waiting' AND j.awaited_signal IS NULL"
    " AND j.pending_children = 0))"
)
"""A fire that is pending and not running: ``ready`` (due later, or a retry), or
``waiting`` for its turn in the kind's lane (a durable wait of its own has an awaited
signal or children). What pausing or dropping a schedule cancels."""
FIRE_COLUMNS = ", ".join(FIRE)
FIRE_VALUES = ", ".join(f"sc.{c}" for c in FIRE)


def share_schedules(schema: str, which: str) -> str:
    """The enabled schedules whose (namespace, name) the query ``which`` answers, their rows
    locked ``FOR SHARE`` in one order (namespace, name): what every statement that enqueues
    a fire joins, so that it serialises with a pause or a drop of the schedule, which lock
    the row before they cancel its pending fire (:func:`pause_schedule`, the ``DELETE`` of
    :func:`store_schedules`). Read COMMITTED re-reads a row it waited for: a schedule paused
    or dropped meanwhile is not enabled, or gone, and no fire is written. Share locks do
    not conflict: fires of one schedule completed by two workers at once do not wait on
    each other."""
    return f"""
                SELECT sc.* FROM {quote(schema)}.schedule AS sc
                WHERE sc.enabled AND (sc.namespace, sc.name) IN ({which})
                ORDER BY sc.namespace, sc.name
                FOR SHARE OF sc"""


def cancelled_unstarted(alias: str = "j") -> str:
    """A fire (row ``alias``) cancelled before it ever ran (by a pause, or by a worker of
    code that no longer declares its schedule): not a fire that happened. It counts for
    neither a schedule's latest tick nor the guard against an earlier tick; when its tick
    comes round again it is made ready again (a tick has one fire row for good)."""
    return f"({alias}.status = 'cancelled' AND {alias}.attempts = 0)"


CANCELLED_UNSTARTED = cancelled_unstarted()

DECLARED = ("cron", "timezone", "kind", "args", "missed", *FIRE)
"""A schedule's columns as the code declares them (``Schedule.row()``, beside its name)."""
_DECLARED_TYPES = {"args": "text", "priority": "int"}


def store_schedules(schema: str) -> str:
    """Store namespace $1's schedules as the code declares them ($2.. parallel arrays:
    name, cron, timezone, kind, args, missed, and what each fire takes from the kind:
    priority, concurrency key, rate key, lane key), and drop the namespace's schedules the code
    no longer declares (:func:`cancel_unstarted_fires` then cancels their pending fires). A
    paused schedule stays paused. Answers the names dropped. Touches only
    ``acta.schedule``: a lock on ``acta.job`` must hold up a worker's first claim, not its
    start-up."""
    s = quote(schema)
    arrays = ", ".join(
        f"${i}::{_DECLARED_TYPES.get(c, 'text')}[]" for i, c in enumerate(DECLARED, start=3)
    )
    values = ", ".join("d.args::jsonb" if c == "args" else f"d.{c}" for c in DECLARED)
    return f"""
        WITH d AS (
            SELECT * FROM unnest($2::text[], {arrays}) AS d(name, {", ".join(DECLARED)})
        ),
        up AS (
            INSERT INTO {s}.schedule AS sc (namespace, name, {", ".join(DECLARED)})
            -- In name order: the rows' locks are taken in the order completions take
            -- them (share_schedules), so the two cannot deadlock.
            SELECT $1, d.name, {values} FROM d ORDER BY d.name
            ON CONFLICT (namespace, name) DO UPDATE
                SET {", ".join(f"{c} = excluded.{c}" for c in DECLARED)}
                WHERE ({", ".join(f"sc.{c}" for c in DECLARED)}) IS DISTINCT FROM
                      ({", ".join(f"excluded.{c}" for c in DECLARED)})
            RETURNING 1
        ),
        gone AS (
            DELETE FROM {s}.schedule AS sc
            WHERE sc.namespace = $1 AND sc.name <> ALL ($2::text[])
            RETURNING sc.name
        )
        SELECT name FROM gone"""


def cancel_unstarted_fires(schema: str) -> str:
    """The pending fires (not running: :data:`UNSTARTED`) of schedules $2 of namespace $1
    end ``cancelled``: those of a paused schedule (:func:`pause_schedule` took its row
    first, in the same transaction) or of schedules a worker's code dropped
    (:func:`store_schedules` deleted their rows first). A statement of its own, after the
    lock: it reads the fires a completion committed while the pause waited for its row."""
    s = quote(schema)
    return f"""
        UPDATE {s}.job AS j SET status = 'cancelled', finished_at = now()
        WHERE j.namespace = $1 AND j.schedule_name = ANY ($2::text[]) AND {UNSTARTED}"""


def unfired_schedules(schema: str) -> str:
    """Namespace $1's enabled schedules with no pending fire (none ready, executing or
    waiting), each with its latest fire's tick (NULL: it never fired; a fire cancelled
    before it started does not count, :func:`cancelled_unstarted`) and its stored cron,
    timezone and missed policy (a schedule this code does not declare is still checked),
    and the database's ``now()`` (one row of it, with a NULL name, when there is none): the
    fires to enqueue are computed from these in Python (``schedules.plan_fires``), against
    the database clock. By ``job_schedule_tick_key``."""
    s = quote(schema)
    return f"""
        SELECT now() AS now, u.name, u.last_tick, u.cron, u.timezone, u.missed
        FROM (SELECT 1) AS one
        LEFT JOIN (
            SELECT sc.name, sc.cron, sc.timezone, sc.missed,
                   (SELECT max(j.scheduled_at) FROM {s}.job AS j
                    WHERE j.namespace = $1 AND j.schedule_name = sc.name
                      AND NOT {CANCELLED_UNSTARTED}) AS last_tick
            FROM {s}.schedule AS sc
            WHERE sc.namespace = $1 AND sc.enabled
              AND NOT EXISTS (
                  SELECT 1 FROM {s}.job AS j
                  WHERE j.namespace = $1 AND j.schedule_name = sc.name
                    AND j.status IN {ACTIVE}
              )
        ) AS u ON true"""


def lock_schedules(schema: str) -> str:
    """The transaction locks of schedules $2 of namespace $1, in one order (no deadlock
    between two workers). A statement of its own: the next one then reads what a writer
    that held a lock committed."""
    return f"""
        SELECT count({LOCK.format(name="n")})
        FROM (SELECT unnest($2::text[]) AS n ORDER BY 1) AS x"""


def revive_on_conflict(alias: str) -> str:
    """The ``ON CONFLICT`` clause of every statement that writes a fire (target row
    ``alias``): a tick has one fire row for good (``job_schedule_tick_key``), so when the
    tick's row is a fire cancelled before it started (:func:`cancelled_unstarted`), that
    row is made ready again, as the schedule now declares it; any other row of the tick
    makes the insert a no-op (I10)."""
    fields = ", ".join(f"{c} = excluded.{c}" for c in ("run_at", "kind", "args", *FIRE))
    return f"""ON CONFLICT (namespace, schedule_name, scheduled_at) WHERE schedule_name IS NOT NULL
            DO UPDATE SET status = 'ready', finished_at = NULL, cancel_requested = false,
                          {fields}
            WHERE {cancelled_unstarted(alias)}"""


def enqueue_fires(schema: str) -> str:
    """Enqueue fire $3[i] (a tick) of schedule $2[i] of namespace $1, under the locks
    :func:`lock_schedules` took in the same transaction. Guard: the schedule is enabled,
    and it has no pending fire and no fire that happened at or after that tick (a fire's
    completion may have enqueued its successor meanwhile; a fire cancelled before it
    started did not happen). The tick's fire cancelled before it started is made ready
    again (:func:`revive_on_conflict`). A fire takes the schedule's stored kind, args,
    priority and keys (:data:`FIRE`). The schedules' rows are read ``FOR SHARE``
    (:func:`share_schedules`): a pause or a drop committed meanwhile is seen. Answers the
    fires enqueued (name, tick)."""
    s = quote(schema)
    return f"""
        INSERT INTO {s}.job AS j (namespace, kind, args, run_at, schedule_name, scheduled_at,
                                  {FIRE_COLUMNS})
        SELECT $1, sc.kind, sc.args, x.tick, sc.name, x.tick, {FIRE_VALUES}
        FROM unnest($2::text[], $3::timestamptz[]) AS x(name, tick)
        JOIN ({share_schedules(schema, "SELECT $1::text, unnest($2::text[])")}) AS sc
          ON sc.namespace = $1 AND sc.name = x.name
        WHERE NOT EXISTS (
            SELECT 1 FROM {s}.job AS o
            WHERE o.namespace = $1 AND o.schedule_name = x.name
              AND (o.status IN {ACTIVE}
                   OR (o.scheduled_at >= x.tick AND NOT {cancelled_unstarted("o")}))
        )
        {revive_on_conflict("j")}
        RETURNING j.schedule_name, j.scheduled_at"""


# ------------------------------------------------------------------ the operator's side


def list_schedules(schema: str) -> str:
    """``acta schedules ls``: namespace $1's schedules with their pending fire (next) and
    their latest finished fire (its tick and status), and the database's ``now()`` (whether
    a stored cron can fire is judged against it). By ``job_schedule_tick_key``."""
    s = quote(schema)
    return f"""
        SELECT now() AS now, sc.name, sc.cron, sc.timezone, sc.kind, sc.missed, sc.enabled,
               (SELECT min(j.scheduled_at) FROM {s}.job AS j
                WHERE j.namespace = $1 AND j.schedule_name = sc.name
                  AND j.status IN {ACTIVE}) AS next_fire,
               last.scheduled_at AS last_fire, last.status AS last_status
        FROM {s}.schedule AS sc
        LEFT JOIN LATERAL (
            SELECT j.scheduled_at, j.status FROM {s}.job AS j
            WHERE j.namespace = $1 AND j.schedule_name = sc.name
              AND j.status NOT IN {ACTIVE}
            ORDER BY j.scheduled_at DESC LIMIT 1
        ) AS last ON true
        WHERE sc.namespace = $1
        ORDER BY sc.name"""


def schedule_row(schema: str) -> str:
    """One stored schedule ($1 namespace, $2 name) for ``acta schedules resume``: its latest
    fire that was not cancelled before it started (``last_tick``: a pause cancels the
    pending fire, which must not count as fired), its pending fire's tick, if any, and the
    database's ``now()`` (its next fire is computed against the database clock)."""
    s = quote(schema)
    return f"""
        SELECT now() AS now, sc.name, sc.cron, sc.timezone, sc.kind, sc.args::text AS args,
               sc.missed, sc.enabled,
               (SELECT max(j.scheduled_at) FROM {s}.job AS j
                WHERE j.namespace = $1 AND j.schedule_name = sc.name
                  AND NOT {CANCELLED_UNSTARTED}) AS last_tick,
               (SELECT min(j.scheduled_at) FROM {s}.job AS j
                WHERE j.namespace = $1 AND j.schedule_name = sc.name
                  AND j.status IN {ACTIVE}) AS pending_tick
        FROM {s}.schedule AS sc WHERE sc.namespace = $1 AND sc.name = $2"""


def pause_schedule(schema: str) -> str:
    """Pause schedule $2 of namespace $1: no fire from now on (a running one finishes).
    The UPDATE locks the schedule's row, waiting for any completion that holds it
    (:func:`share_schedules`); ``schedules.pause`` then cancels its pending fire with
    :func:`cancel_unstarted_fires` in the same transaction. Answers the schedule's name."""
    s = quote(schema)
    return f"""
        UPDATE {s}.schedule SET enabled = false WHERE namespace = $1 AND name = $2
        RETURNING name"""


def resume_schedule(schema: str) -> str:
    """Resume schedule $2 of namespace $1 (its next fire is enqueued with
    :func:`enqueue_fires`, in the same transaction). Answers the schedule's name."""
    s = quote(schema)
    return f"""
        UPDATE {s}.schedule SET enabled = true WHERE namespace = $1 AND name = $2
        RETURNING name"""


def run_schedule_now(schema: str) -> str:
    """``acta schedules run``: one extra fire of schedule $2 of namespace $1, due now, its
    ``scheduled_at`` now. Not part of the chain (no ``schedule_name``): the cadence is not
    disturbed. Answers the new job's id."""
    s = quote(schema)
    return f"""
        INSERT INTO {s}.job (namespace, kind, args, scheduled_at, {FIRE_COLUMNS})
        SELECT sc.namespace, sc.kind, sc.args, now(), {FIRE_VALUES} FROM {s}.schedule AS sc
        WHERE sc.namespace = $1 AND sc.name = $2
        RETURNING id"""
