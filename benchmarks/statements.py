"""What the hot claim and the batched completion cost per job, statement by statement, with
and without the columns and parts the feature wave added: the worker's own SQL on ONE
connection (no executors, no event loop contention), so the figure is the two statements'
round trips and PostgreSQL's work, with far less noise than a whole drain.

    python -m benchmarks.statements                # 20,000 jobs, 5 rounds
    python -m benchmarks.statements --rounds 9

Variants, alternating within each round (the table is emptied and refilled before each):

* ``full``: the statements a worker with an OpenTelemetry SDK runs on a batch carrying a
  feature (``claim_plain``, ``complete_executions``): what every plain batch ran before
  the lean variants;
* ``lean``: what a worker with no SDK runs on a plain batch: ``claim_plain_lean`` (no
  ``trace_context``, no server-computed ``waited``) and ``complete_plain`` (no feature
  parts: ``spawn``, ``next_fire``);
* ``no_parts``: only the completion without its feature parts;
* ``no_columns``: only the lean claim.

Then the per-tick schedule cost (``--ticks``, :func:`tick_cost`): a chain of ticks run one
at a time, each claimed alone and completed, as a schedule's fires (each completion
enqueues the next tick through its ``next_fire`` part) and as plain jobs (all inserted
beforehand, completed by ``complete_plain``); the difference is what a fire costs beyond a
plain job.

Prints microseconds per job for each round and the medians. Needs a PostgreSQL server
(``--dsn``, a role that may CREATE DATABASE); the scratch database ``acta_statements_bench``
is dropped first and at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

if __package__ in (None, ""):  # run as a file: python benchmarks/statements.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg

from acta_sqla.queries import claim, complete
from acta_sqla.values import ClaimedJob
from acta_sqla.worker import completions
from benchmarks.run import DEFAULT_DSN
from benchmarks.scratch import scratch_database

DATABASE = "acta_statements_bench"
BATCH = 64


def variants(schema: str) -> dict[str, tuple[str, str]]:
    claim_full, claim_lean = claim.claim_plain(schema), claim.claim_plain_lean(schema)
    done_full, done_plain = complete.complete_executions(schema), complete.complete_plain(schema)
    return {
        "full": (claim_full, done_full),
        "lean": (claim_lean, done_plain),
        "no_parts": (claim_full, done_plain),
        "no_columns": (claim_lean, done_full),
    }


async def drain(
    conn: asyncpg.Connection, worker: int, claim_sql: str, done_sql: str, n: int
) -> float:
    """Microseconds per job to claim and complete ``n`` ready jobs in batches of BATCH."""
    await conn.execute("TRUNCATE acta.job, acta.execution")
    await conn.execute(
        "INSERT INTO acta.job (namespace, kind, args) "
        "SELECT 'default', 'noop', '{}' FROM generate_series(1, $1)",
        n,
    )
    await conn.execute("VACUUM ANALYZE acta.job")
    done = 0
    t0 = time.perf_counter()
    while rows := await conn.fetch(claim_sql, "default", BATCH, worker, 180.0):
        batch = [completions.succeeded(ClaimedJob._make(r), None, 0.0) for r in rows]
        core, features = complete.encode(batch)
        await conn.fetch(done_sql, core, worker, features)
        done += len(rows)
    elapsed = time.perf_counter() - t0
    if done != n:
        raise RuntimeError(f"drained {done} of {n}")
    return elapsed / n * 1e6


TICK = timedelta(seconds=1)


async def tick_chain(conn: asyncpg.Connection, worker: int, n: int, fires: bool) -> float:
    """Microseconds per tick over a chain of ``n`` ticks, each claimed alone and completed:
    schedule fires whose completions enqueue the next (``fires``), or plain jobs."""
    await conn.execute("TRUNCATE acta.job, acta.execution")
    start = datetime.now(UTC) - timedelta(days=1)  # every tick of the chain is due
    if fires:
        await conn.execute(
            "INSERT INTO acta.job (namespace, kind, args, run_at, schedule_name, scheduled_at) "
            "VALUES ('default', 'noop', '{}', $1, 'tick', $1)",
            start,
        )
    else:
        await conn.execute(
            "INSERT INTO acta.job (namespace, kind, args) "
            "SELECT 'default', 'noop', '{}' FROM generate_series(1, $1)",
            n,
        )
    await conn.execute("VACUUM ANALYZE acta.job")
    claim_sql = claim.claim_plain_lean("acta")
    done_sql = complete.complete_executions("acta") if fires else complete.complete_plain("acta")
    t0 = time.perf_counter()
    for _ in range(n):
        [row] = await conn.fetch(claim_sql, "default", 1, worker, 180.0)
        job = ClaimedJob._make(row)
        done = completions.succeeded(job, None, 0.0)
        if fires:
            assert job.scheduled_at is not None
            nxt = {
                "namespace": "default",
                "schedule": "tick",
                "after": job.scheduled_at.isoformat(),
                "tick": (job.scheduled_at + TICK).isoformat(),
            }
            done = done._replace(features={"next": nxt})
        core, features = complete.encode([done])
        await conn.fetch(done_sql, core, worker, features)
    elapsed = time.perf_counter() - t0
    left = await conn.fetchval("SELECT count(*) FROM acta.job WHERE status = 'succeeded'")
    if left != n:
        raise RuntimeError(f"{left} of {n} ticks ran")
    return elapsed / n * 1e6


async def a_worker(conn: asyncpg.Connection) -> int:
    return int(
        await conn.fetchval(
            "INSERT INTO acta.worker (namespace, hostname, pid, executors, status) "
            "VALUES ('default', 'bench', 1, $1, 'running') RETURNING id",
            BATCH,
        )
    )


async def tick_cost(dsn: str, ticks: int, rounds: int = 3) -> dict[str, float]:
    """``benchmarks.run``'s per-tick schedule figure: medians of ``rounds`` chains of
    ``ticks`` fires and of plain jobs, alternating; microseconds per tick."""
    async with scratch_database(dsn, DATABASE) as url:
        conn = await asyncpg.connect(url)
        try:
            worker = await a_worker(conn)
            await conn.execute(
                "INSERT INTO acta.schedule (namespace, name, cron, kind) "
                "VALUES ('default', 'tick', '* * * * * *', 'noop')"
            )
            fire, plain = [], []
            for _ in range(rounds):
                fire.append(await tick_chain(conn, worker, ticks, True))
                plain.append(await tick_chain(conn, worker, ticks, False))
        finally:
            await conn.close()
    f, p = statistics.median(fire), statistics.median(plain)
    return {"fire_us": f, "plain_us": p, "extra_us": f - p}


async def main_async(dsn: str, n: int, rounds: int) -> None:
    async with scratch_database(dsn, DATABASE) as url:
        conn = await asyncpg.connect(url)
        try:
            worker = await a_worker(conn)
            shapes = variants("acta")
            times: dict[str, list[float]] = {name: [] for name in shapes}
            for i in range(rounds):
                for name, (claim_sql, done_sql) in shapes.items():
                    times[name].append(await drain(conn, worker, claim_sql, done_sql, n))
                line = "  ".join(f"{k} {v[-1]:.1f}" for k, v in times.items())
                print(f"round {i + 1}: us/job  {line}", flush=True)
            full = statistics.median(times["full"])
            print(f"\nmedians of {rounds} rounds, {n:,} jobs each, batches of {BATCH}:")
            for name, values in times.items():
                m = statistics.median(values)
                print(f"  {name:<11} {m:6.1f} us/job  ({m / full:.2f}x full)")
        finally:
            await conn.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.statements",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--dsn", default=DEFAULT_DSN, help="PostgreSQL server (any database)")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ticks", type=int, default=2000, help="per-tick cost: ticks per chain")
    args = ap.parse_args(argv)
    asyncio.run(main_async(args.dsn, args.n, args.rounds))
    r = asyncio.run(tick_cost(args.dsn, args.ticks, args.rounds))
    print(
        f"\nper tick, medians of {args.rounds} chains of {args.ticks:,} (one claimed and "
        f"completed at a time): schedule fire {r['fire_us']:.0f} us, plain job "
        f"{r['plain_us']:.0f} us, the fire's own cost {r['extra_us']:.0f} us"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
