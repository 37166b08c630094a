"""Is every dashboard page fast on a big table? Loads a scratch database with 1,000,000
finished and 100,000 queued jobs (INSERT ... SELECT generate_series, in seconds), then
times each page through the real ASGI app (httpx, no network): the median of several
requests after one warm-up, against the 200 ms budget of issue 15.

    python -m benchmarks.dashboard                      # 1,000,000 + 100,000
    python -m benchmarks.dashboard --finished 20000 --queued 2000 --repeat 3   # quick

Needs a PostgreSQL server (``--dsn``, a role that may CREATE DATABASE); the scratch
database ``acta_dash_bench`` is dropped first and, unless ``--keep``, at the end. Prints
one line per page and exits 1 if any page is over budget (or answered an error).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: python benchmarks/dashboard.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg

DEFAULT_DSN = os.environ.get("ACTA_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
DATABASE = "acta_dash_bench"
BUDGET_MS = 200.0
KINDS = 10
ERROR_TYPES = ("ValueError", "TimeoutError", "KeyError", "ConnectionError", "RuntimeError")

# Finished jobs spread over 30 days (so "the last hour" and "the last 24 h" hold what a
# steady load leaves there): 92% succeeded, 6% failed, 2% cancelled; then the backlog.
LOAD_FINISHED = """
INSERT INTO acta.job (namespace, kind, args, status, attempts, run_at, created_at,
                      finished_at, result, last_error)
SELECT 'default', 'kind_' || (i % {kinds}),
       jsonb_build_object('user_id', i, 'email', 'user' || i || '@example.com'),
       s.status, 1, f.at - interval '2 seconds', f.at - interval '3 seconds', f.at,
       CASE WHEN s.status = 'succeeded' THEN jsonb_build_object('ok', true) END,
       CASE WHEN s.status = 'failed' THEN jsonb_build_object(
            'type', (ARRAY{errors})[1 + i % {n_errors}], 'message', 'failure #' || i) END
FROM generate_series(1, $1::int) AS i
CROSS JOIN LATERAL (SELECT now() - (($1::int - i) * interval '30 days' / $1::int) AS at) f
CROSS JOIN LATERAL (SELECT CASE WHEN i % 50 = 7 THEN 'cancelled'
                                WHEN i % 100 < 6 THEN 'failed'
                                ELSE 'succeeded' END AS status) s
"""
LOAD_QUEUED = """
INSERT INTO acta.job (namespace, kind, args, status, run_at, lane_key, concurrency_key)
SELECT 'default', 'kind_' || (i % {kinds}),
       jsonb_build_object('user_id', i, 'email', 'queued' || i || '@example.com'),
       'ready', now() + (i % 600) * interval '1 second',
       -- a tenth in 500 lanes, a tenth over 200 concurrency keys
       CASE WHEN i % 10 = 0 THEN 'lane-' || (i % 500) END,
       CASE WHEN i % 10 = 1 THEN 'acct-' || (i % 200) END
FROM generate_series(1, $1::int) AS i
"""


async def load(dsn: str, finished: int, queued: int) -> str:
    from sqlalchemy.engine import make_url

    from acta_sqla import migrate

    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{DATABASE}"')
    finally:
        await admin.close()
    url = make_url(dsn).set(database=DATABASE).render_as_string(hide_password=False)
    await asyncio.to_thread(migrate.upgrade, url)
    conn = await asyncpg.connect(url)
    try:
        errors = "[" + ", ".join(f"'{e}'" for e in ERROR_TYPES) + "]"
        fill = {"kinds": KINDS, "errors": errors, "n_errors": len(ERROR_TYPES)}
        started = time.perf_counter()
        await conn.execute(LOAD_FINISHED.format(**fill), finished)
        await conn.execute(LOAD_QUEUED.format(**fill), queued)
        await conn.execute(
            "INSERT INTO acta.namespace (name) VALUES ('default') ON CONFLICT DO NOTHING"
        )
        await conn.execute(
            "INSERT INTO acta.worker (namespace, hostname, pid, status, executors) "
            "SELECT 'default', 'host-' || i, 1000 + i, "
            "CASE WHEN i <= 4 THEN 'running' ELSE 'stopped' END, 16 "
            "FROM generate_series(1, 40) i"
        )
        await conn.execute(
            "INSERT INTO acta.definition (namespace, kind, declared) "
            "SELECT 'default', 'kind_' || i, jsonb_build_object('concurrency_limit', 3) "
            f"FROM generate_series(0, {KINDS - 1}) i"
        )
        await conn.execute(
            "INSERT INTO acta.schedule (namespace, name, cron, kind) "
            "SELECT 'default', 'every-' || i, '*/5 * * * *', 'kind_' || (i % 5) "
            "FROM generate_series(1, 20) i"
        )
        await conn.execute("VACUUM ANALYZE acta.job")
        print(
            f"loaded {finished:,} finished + {queued:,} queued in "
            f"{time.perf_counter() - started:.1f} s"
        )
    finally:
        await conn.close()
    return url


def pages(finished: int) -> list[tuple[str, str]]:
    deep = finished // 2
    return [
        ("overview", "/"),
        ("jobs", "/jobs"),
        ("jobs, status=ready", "/jobs?status=ready"),
        ("jobs, status=failed", "/jobs?status=failed"),
        ("jobs, kind=kind_3", "/jobs?kind=kind_3"),
        ("jobs, failed + kind_3", "/jobs?status=failed&kind=kind_3"),
        ("jobs, deep page", f"/jobs?before={deep}"),
        ("jobs, args search", "/jobs?q=user4242%40"),
        ("job detail", f"/jobs/{deep}"),
        ("failures, 24h", "/failures"),
        ("failures, 7d", "/failures?window=7d"),
        ("workers", "/workers"),
        ("locks", "/locks"),
        ("lanes", "/lanes"),
        ("a lane", "/lanes/lane-10"),
        ("keys", "/keys"),
        ("a key", "/keys/acct-11"),
        ("schedules", "/schedules"),
        ("kinds", "/definitions"),
    ]


async def measure(url: str, finished: int, repeat: int) -> bool:
    import httpx

    from acta_sqla.dashboard import acta_dashboard

    app = acta_dashboard(url, namespace="default")
    ok = True
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            for name, path in pages(finished):
                times = []
                status = 0
                for _ in range(repeat + 1):  # the first warms the connection and caches
                    started = time.perf_counter()
                    response = await client.get(path)
                    times.append((time.perf_counter() - started) * 1000)
                    status = response.status_code
                median = statistics.median(times[1:])
                verdict = "under" if median < BUDGET_MS and status == 200 else "OVER"
                ok = ok and verdict == "under"
                print(
                    f"{name:<24} {median:8.1f} ms  (min {min(times[1:]):.1f}, "
                    f"max {max(times[1:]):.1f}, HTTP {status})  {verdict} {BUDGET_MS:.0f} ms"
                )
    finally:
        await app.state.acta.engine.dispose()
    return ok


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = parser.parse_args()
    url = await load(args.dsn, args.finished, args.queued)
    try:
        ok = await measure(url, args.finished, args.repeat)
    finally:
        if not args.keep:
            admin = await asyncpg.connect(args.dsn)
            try:
                await admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
            finally:
                await admin.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
