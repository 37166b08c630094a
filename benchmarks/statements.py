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
from pathlib import Path

if __package__ in (None, ""):  # run as a file: python benchmarks/statements.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg
from sqlalchemy.engine import make_url

from acta_sqla import migrate
from acta_sqla.queries import claim, complete
from acta_sqla.values import ClaimedJob
from acta_sqla.worker import completions
from benchmarks.run import DEFAULT_DSN

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


async def main_async(dsn: str, n: int, rounds: int) -> None:
    admin = await asyncpg.connect(dsn)
    await admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
    await admin.execute(f'CREATE DATABASE "{DATABASE}"')
    url = make_url(dsn).set(database=DATABASE)
    try:
        sa_url = url.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)
        await asyncio.to_thread(migrate.upgrade, sa_url)
        conn = await asyncpg.connect(url.render_as_string(hide_password=False))
        try:
            worker = await conn.fetchval(
                "INSERT INTO acta.worker (namespace, hostname, pid, executors, status) "
                "VALUES ('default', 'bench', 1, $1, 'running') RETURNING id",
                BATCH,
            )
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
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        await admin.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.statements",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--dsn", default=DEFAULT_DSN, help="PostgreSQL server (any database)")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    asyncio.run(main_async(args.dsn, args.n, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
