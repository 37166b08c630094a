"""Does a recovery pass cost what it prunes, or what the table holds? Fills a scratch
database with N finished jobs inside their retention (INSERT ... SELECT generate_series;
one execution row each, as a real history has), then times the recovery pass
(``run_recovery``, whose prune step is ``store.prune_finished`` in chunks) with the prune
statement before issue 10 item 5 and with the current one: the median of several passes,
with nothing due, and with some rows due (inserted fresh before each pass, vacuumed after).

    python -m benchmarks.prune --rows 1000000,5000000          # the figures in the docs
    python -m benchmarks.prune --rows 20000 --repeat 3         # quick

Needs a PostgreSQL server (``--dsn``, a role that may CREATE DATABASE); the scratch
database ``acta_prune_bench`` is dropped first and, unless ``--keep``, at the end. The rows
are loaded cumulatively (1M, then 4M more for 5M). Prints one line per measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a file: python benchmarks/prune.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg

DEFAULT_DSN = os.environ.get("ACTA_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
DATABASE = "acta_prune_bench"
KINDS = 10

# The statement recovery ran before issue 10 item 5 (acta_sqla/queries/recovery.py at
# 53170fe): each finished row compared with its own kind's cutoff, so with nothing due it
# read every finished row of the namespace through job_finished_idx.
OLD_PRUNE = """
        WITH doomed AS (
            SELECT j.id FROM "acta".job j
            LEFT JOIN "acta".definition d ON d.namespace = j.namespace AND d.kind = j.kind
            CROSS JOIN LATERAL (
                SELECT coalesce(d.overrides -> 'retention', d.declared -> 'retention') AS eff
            ) r
            WHERE j.namespace = $1
              AND j.status IN ('succeeded', 'failed', 'cancelled')
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
            DELETE FROM "acta".job WHERE id IN (SELECT id FROM doomed) RETURNING id
        ),
        history AS (
            DELETE FROM "acta".execution WHERE job_id IN (SELECT id FROM gone) RETURNING 1
        )
        SELECT count(*) FROM gone"""

# Kinds as a namespace has them: most follow the default retention (7 days; kind_9 has no
# definition at all), kind_0 keeps 30 days, kind_1 forever (null), kind_2 three days. Every
# loaded row finished within the last two days: inside every retention.
DEFINITIONS = """
INSERT INTO acta.namespace (name) VALUES ('default') ON CONFLICT DO NOTHING;
INSERT INTO acta.definition (namespace, kind, declared, overrides)
SELECT 'default', 'kind_' || k,
       CASE k WHEN 0 THEN '{"retention": 2592000}' WHEN 2 THEN '{"retention": 259200}'
              ELSE '{"timeout": 300}' END::jsonb,
       CASE k WHEN 1 THEN '{"retention": null}' ELSE '{}' END::jsonb
FROM generate_series(0, 8) k;
"""
LOAD_JOBS = """
INSERT INTO acta.job (id, namespace, kind, status, attempts, run_at, created_at, finished_at)
OVERRIDING SYSTEM VALUE
SELECT i, 'default', 'kind_' || (i % {kinds}),
       CASE WHEN i % 50 = 7 THEN 'cancelled' WHEN i % 100 < 6 THEN 'failed'
            ELSE 'succeeded' END,
       1, f.at, f.at, f.at
FROM generate_series($1::bigint, $2::bigint) AS i
CROSS JOIN LATERAL (SELECT now() - random() * interval '2 days' AS at) f
"""
LOAD_EXECUTIONS = """
INSERT INTO acta.execution (job_id, id, attempt, finished_at, outcome)
SELECT i, i, 1, now(), 'succeeded' FROM generate_series($1::bigint, $2::bigint) AS i
"""
# Rows due: finished 8-9 days ago, in the kinds on the default retention.
LOAD_DUE = """
WITH due AS (
    INSERT INTO acta.job (namespace, kind, status, attempts, finished_at)
    SELECT 'default', 'kind_' || (3 + i % 7), 'succeeded', 1,
           now() - interval '8 days' - random() * interval '1 day'
    FROM generate_series(1, $1::int) AS i
    RETURNING id
)
INSERT INTO acta.execution (job_id, id, attempt, outcome)
SELECT id, id, 1, 'succeeded' FROM due
"""


async def admin_execute(dsn: str, sql: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def create(dsn: str) -> str:
    from sqlalchemy.engine import make_url

    from acta_sqla import migrate

    await admin_execute(dsn, f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
    await admin_execute(dsn, f'CREATE DATABASE "{DATABASE}"')
    url = make_url(dsn).set(database=DATABASE).render_as_string(hide_password=False)
    await asyncio.to_thread(migrate.upgrade, url)
    await admin_execute(url, DEFINITIONS)
    return url


async def fill(url: str, have: int, want: int) -> None:
    """Rows have+1 .. want (finished within two days), then VACUUM ANALYZE."""
    conn = await asyncpg.connect(url)
    try:
        started = time.perf_counter()
        await conn.execute(LOAD_JOBS.format(kinds=KINDS), have + 1, want)
        await conn.execute(LOAD_EXECUTIONS, have + 1, want)
        await conn.execute(f"SELECT setval(pg_get_serial_sequence('acta.job', 'id'), {want})")
        await conn.execute("VACUUM ANALYZE acta.job, acta.execution")
        size = await conn.fetchval("SELECT pg_size_pretty(pg_database_size(current_database()))")
        print(
            f"\n{want:,} finished rows inside retention ({want - have:,} loaded in "
            f"{time.perf_counter() - started:.1f} s; database {size})"
        )
        started = time.perf_counter()
        await conn.execute(
            "CREATE INDEX job_prune_idx_probe ON acta.job (namespace, kind, finished_at) "
            "WHERE status IN ('succeeded', 'failed', 'cancelled')"
        )
        built = time.perf_counter() - started
        await conn.execute("DROP INDEX acta.job_prune_idx_probe")
        print(f"  building job_prune_idx on them (migration 0004): {built:.1f} s")
    finally:
        await conn.close()


async def timed(
    run: Callable[[], Awaitable[int]], repeat: int, before: Callable[[], Awaitable[None]]
) -> tuple[list[float], int]:
    """``repeat`` passes after one warm-up (each after ``before``, untimed): ms each, and
    the rows the last pass pruned."""
    times = []
    pruned = 0
    for i in range(repeat + 1):
        await before()
        started = time.perf_counter()
        pruned = await run()
        if i:
            times.append((time.perf_counter() - started) * 1000)
    return times, pruned


def line(label: str, times: list[float], pruned: int) -> str:
    return (
        f"  {label:<34} {statistics.median(times):9.1f} ms  (min {min(times):.1f}, "
        f"max {max(times):.1f}; pruned {pruned:,})"
    )


async def measure(url: str, repeat: int, due: int) -> dict[str, float]:
    from acta_sqla.settings import Timings
    from acta_sqla.store import WorkerStore
    from acta_sqla.worker.recovery import run_recovery

    timings = Timings.from_heartbeat(45.0)
    stores = {"old": WorkerStore(url, "acta", "default", timings)}
    stores["old"].sql.prune_finished = OLD_PRUNE
    stores["new"] = WorkerStore(url, "acta", "default", timings)
    conn = await asyncpg.connect(url)
    medians: dict[str, float] = {}

    async def nothing() -> None:
        pass

    async def add_due() -> None:
        await conn.execute("VACUUM acta.job, acta.execution")
        await conn.execute(LOAD_DUE, due)

    try:
        for name, store in stores.items():

            async def recovery_pass(store: WorkerStore = store) -> int:
                return (await run_recovery(store)).pruned

            times, pruned = await timed(recovery_pass, repeat, nothing)
            medians[f"{name}, nothing due"] = statistics.median(times)
            print(line(f"{name} statement, nothing due", times, pruned))
            if due:
                times, pruned = await timed(recovery_pass, repeat, add_due)
                medians[f"{name}, {due:,} due"] = statistics.median(times)
                print(line(f"{name} statement, {due:,} due", times, pruned))
        await conn.execute("VACUUM acta.job, acta.execution")
    finally:
        await conn.close()
        for store in stores.values():
            await store.close()
    return medians


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument(
        "--rows", default="1000000,5000000", help="finished rows, comma-separated, ascending"
    )
    parser.add_argument("--repeat", type=int, default=5, help="timed passes per figure")
    parser.add_argument("--due", type=int, default=5000, help="rows due before each pass")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = parser.parse_args()
    sizes = [int(n.replace("_", "")) for n in args.rows.split(",")]
    if sizes != sorted(sizes) or sizes[0] <= 0:
        parser.error(f"--rows must be positive and ascending, got {args.rows!r}")
    url = await create(args.dsn)
    results: dict[int, dict[str, float]] = {}
    try:
        have = 0
        for n in sizes:
            await fill(url, have, n)
            have = n
            results[n] = await measure(url, args.repeat, args.due)
    finally:
        if not args.keep:
            await admin_execute(args.dsn, f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
    print("\nmedian ms of a recovery pass:")
    for n, medians in results.items():
        print(f"  {n:>10,} rows: " + ", ".join(f"{k} {v:.1f}" for k, v in medians.items()))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
