"""The feature drains beside the plain drain, in one run (issues 11 and 12).

    python -m benchmarks.keyed    # 20,000 jobs, 64 executors; 200 keys of limit 5; 200 lanes
    python -m benchmarks.keyed --n 2000 --trials 1
    python -m benchmarks.keyed --workloads plain,fanout --n 10000   # the 10,000-child fan-out

Each trial drops and creates the database ``bench_keyed`` (``--dsn`` must be a superuser),
migrates it, inserts the jobs in one statement, starts ONE ``acta worker --app
benchmarks.keyed:acta --executors E`` and times it from its start until no job is left.
Workloads, alternating within each trial so that machine noise hits both:

* ``plain``: no-op jobs with no key;
* ``keyed``: no-op jobs over ``--keys`` concurrency keys (job i has key i % keys) with
  ``concurrency_limit`` 5;
* ``laned``: no-op jobs in ``--keys`` lanes (job i in lane i % keys): one at a time per
  lane, each hand-on made by the completion that ends the lane's job;
* ``fanout``: ONE parent job whose handler returns ``WaitForChildren`` of ``--n`` no-op
  children (spawned by its completion), then resumes once they have all ended: timed from
  the worker's start until the parent has succeeded. The children are built as one batch
  (``plain.jobs([...])``), as ``plain`` inserts its jobs in one statement;
* ``fanout_job``: the same, each child built by ``plain.job(...)`` (one ORM object each).

Reported per workload (medians): jobs/s, bounces per job (claims minus jobs: every claim
mints one execution id, so the sequence counts them), PostgreSQL CPU per job (every
``postgres`` process on the machine, so run it on a quiet one), and the keyed/plain ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg

from acta_sqla import Acta, Context, WaitForChildren

NAMESPACE = "bench-keyed"
acta = Acta(namespace=NAMESPACE)


@acta.job
async def plain(ctx: Context, i: int = 0) -> None:
    """Does nothing."""


@acta.job(concurrency_key="k{k}", concurrency_limit=5)
async def keyed(ctx: Context, k: int = 0, i: int = 0) -> None:
    """Does nothing, holding one of its key's slots."""


@acta.job(lane="l{k}")
async def laned(ctx: Context, k: int = 0, i: int = 0) -> None:
    """Does nothing, one at a time in its lane."""


@acta.job
async def fan(ctx: Context, n: int = 0, one_by_one: bool = False) -> int:
    """Spawns ``n`` no-op children and waits for them; then counts them."""
    if ctx.resumed is None:
        if one_by_one:
            return WaitForChildren([plain.job(i=i) for i in range(n)])  # type: ignore[return-value]
        return WaitForChildren(plain.jobs({"i": i} for i in range(n)))  # type: ignore[return-value]
    return len(ctx.children)


INSERTS = {
    "fanout": "INSERT INTO acta.job (namespace, kind, args) "
    "SELECT $1, 'fan', jsonb_build_object('n', $2::int)",
    "fanout_job": "INSERT INTO acta.job (namespace, kind, args) "
    "SELECT $1, 'fan', jsonb_build_object('n', $2::int, 'one_by_one', true)",
    "plain": "INSERT INTO acta.job (namespace, kind, args) "
    "SELECT $1, 'plain', jsonb_build_object('i', i) FROM generate_series(1, $2) AS i",
    "keyed": "INSERT INTO acta.job (namespace, kind, args, concurrency_key) "
    "SELECT $1, 'keyed', jsonb_build_object('k', i % $3, 'i', i), 'k' || (i % $3) "
    "FROM generate_series(1, $2) AS i",
    "laned": "INSERT INTO acta.job (namespace, kind, args, lane_key) "
    "SELECT $1, 'laned', jsonb_build_object('k', i % $3, 'i', i), 'l' || (i % $3) "
    "FROM generate_series(1, $2) AS i",
}


async def trial(dsn: str, workload: str, n: int, keys: int, executors: int) -> dict[str, float]:
    from acta_sqla import migrate
    from benchmarks.measure import cpu_delta_s, postgres_cpu

    admin = await asyncpg.connect(dsn)
    db = "bench_keyed"
    await admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    await admin.execute(f"CREATE DATABASE {db}")
    # Count calls of acta's functions (admit, the terminal-effects trigger).
    await admin.execute(f"ALTER DATABASE {db} SET track_functions = 'pl'")
    url = dsn.rsplit("/", 1)[0] + f"/{db}"
    await asyncio.to_thread(migrate.upgrade, url)
    conn = await asyncpg.connect(url)
    try:
        keyless = workload in ("plain", "fanout", "fanout_job")
        args = (NAMESPACE, n) if keyless else (NAMESPACE, n, keys)
        await conn.execute(INSERTS[workload], *args)
        await conn.execute("ANALYZE")
        await conn.execute("CHECKPOINT")
        seq0 = await conn.fetchval(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM acta.execution_id_seq"
        )
        remaining = await conn.prepare(
            "SELECT count(*) FROM acta.job WHERE status NOT IN ('succeeded', 'failed')"
        )
        own = {conn.get_server_pid(), admin.get_server_pid()}
        env = dict(os.environ, ACTA_DATABASE_URL=url)
        cmd = [sys.executable, "-m", "acta_sqla.cli", "worker", "--app", "benchmarks.keyed:acta"]
        cmd += ["--executors", str(executors)]
        wal0 = await conn.fetchval("SELECT pg_current_wal_lsn()")
        pg0 = postgres_cpu(own)
        t0 = time.monotonic()
        proc = subprocess.Popen(  # noqa: ASYNC220 - started once, polled below
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            while await remaining.fetchval() > 0:
                if proc.poll() is not None:
                    raise RuntimeError(f"worker exited: {proc.stderr.read()[-2000:]!r}")  # type: ignore[union-attr]
                await asyncio.sleep(0.1)
            wall = time.monotonic() - t0
            pg = cpu_delta_s(pg0, postgres_cpu(own))
            wal = await conn.fetchval("SELECT pg_current_wal_lsn() - $1::pg_lsn", wal0)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        await asyncio.sleep(1.0)  # the worker's backends report their statistics on exit
        funcs = {
            r[0]: (r[1], r[2])
            for r in await conn.fetch(
                "SELECT funcname, calls, total_time FROM pg_stat_user_functions"
            )
        }
        admit_calls = funcs.get("admit", (0, 0.0))[0]
        if os.environ.get("ACTA_BENCH_DEBUG"):
            for r in await conn.fetch(
                "SELECT relname, seq_scan, seq_tup_read, idx_scan, n_dead_tup "
                "FROM pg_stat_user_tables WHERE schemaname = 'acta'"
            ):
                print(dict(r))
        seq1 = await conn.fetchval(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM acta.execution_id_seq"
        )
        claims = seq1 - seq0
        return {
            "jobs_per_s": n / wall,
            "bounces_per_job": max(0, claims - n) / n,
            "pg_us_per_job": pg / n * 1e6,
            # The server's WAL over the drain (every database's: run it on a quiet server).
            "wal_bytes_per_job": float(wal) / n,
            "jobs_per_admit_call": n / float(admit_calls) if admit_calls else 0.0,
            "admit_us_per_job": funcs.get("admit", (0, 0.0))[1] * 1000 / n,
            "trigger_us_per_job": funcs.get("job_terminal_effects", (0, 0.0))[1] * 1000 / n,
        }
    finally:
        await conn.close()
        await admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        await admin.close()


async def main_async(a: argparse.Namespace) -> int:
    results: dict[str, list[dict[str, float]]] = {w: [] for w in a.workloads.split(",")}
    for t in range(a.trials):
        for workload in results:
            r = await trial(a.dsn, workload, a.n, a.keys, a.executors)
            results[workload].append(r)
            print(f"trial {t + 1} {workload}: {json.dumps({k: round(v, 2) for k, v in r.items()})}")
    summary = {
        w: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for w, rs in results.items()
    }
    print(f"\n{'workload':<10} {'jobs/s':>9} {'bounces/job':>12} {'PG us/job':>10}")
    for w, s in summary.items():
        jobs, bounces, pg = s["jobs_per_s"], s["bounces_per_job"], s["pg_us_per_job"]
        print(f"{w:<10} {jobs:>9.0f} {bounces:>12.3f} {pg:>10.0f}")
    for w in ("keyed", "laned", "fanout", "fanout_job"):
        if "plain" in summary and w in summary:
            ratio = summary[w]["jobs_per_s"] / summary["plain"]["jobs_per_s"]
            print(f"{w} / plain: {ratio:.0%}")
    print(json.dumps({"n": a.n, "executors": a.executors, "keys": a.keys, "summary": summary}))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.keyed", description=__doc__)
    ap.add_argument(
        "--dsn",
        default=os.environ.get("ACTA_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--keys", type=int, default=200)
    ap.add_argument("--executors", type=int, default=64)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--workloads", default="plain,keyed,laned")
    return asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
