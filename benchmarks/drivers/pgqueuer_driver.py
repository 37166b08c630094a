"""PgQueuer's driver, run with the scratch venv's Python (PgQueuer 1.6.0 from PyPI).

setup   : ``pgq install`` (run by the harness)
enqueue : single  = ``Queries.enqueue("noop", payload)`` per job (autocommit: one per transaction)
          bulk    = ``Queries.enqueue([1,000 entrypoints], [payloads], [priorities])`` per call
worker  : ``PgQueuer(AsyncpgDriver(asyncpg.connect()))`` with one async entrypoint,
          ``pgq.run(batch_size=10)`` (the library and CLI default) under uvloop, as ``pgq run``
          does; the entrypoint's concurrency is unlimited (the default).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import asyncpg
from _lib import BULK_CHUNK, DSN, LatencyRecorder, chunks, emit, parse_args, run_latency_enqueue
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries

BATCH_SIZE = int(os.environ.get("BENCH_PGQ_BATCH", "10"))


async def enqueue(mode: str, n: int) -> float:
    conn = await asyncpg.connect(DSN)
    q = Queries(AsyncpgDriver(conn))
    try:
        if mode == "single":
            t = time.monotonic()
            for i in range(n):
                await q.enqueue("noop", json.dumps({"i": i}).encode(), 0)
            return time.monotonic() - t
        if mode == "bulk":
            payloads = [json.dumps({"i": i}).encode() for i in range(n)]
            t = time.monotonic()
            for c in chunks(payloads, BULK_CHUNK):
                await q.enqueue(["noop"] * len(c), list(c), [0] * len(c))
            return time.monotonic() - t
        if mode == "warmup":
            await q.enqueue("noop", json.dumps({"i": -1, "ts": time.time()}).encode(), 0)
            return 0.0
        if mode == "latency":

            async def one(i: int, ts: float) -> None:
                await q.enqueue("noop", json.dumps({"i": i, "ts": ts}).encode(), 0)

            return await run_latency_enqueue(one, n)
    finally:
        await conn.close()
    raise SystemExit(f"unknown mode {mode}")


async def worker() -> None:
    rec = LatencyRecorder()
    conn = await asyncpg.connect(DSN)
    pgq = PgQueuer(AsyncpgDriver(conn))

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        if rec.f is not None and job.payload:
            rec.record(json.loads(job.payload))

    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, pgq.shutdown.set)
    await pgq.run(batch_size=BATCH_SIZE)
    await conn.close()


def main() -> None:
    a = parse_args()
    if a.cmd == "enqueue":
        emit(elapsed=asyncio.run(enqueue(a.mode, a.n)), n=a.n, mode=a.mode)
    elif a.cmd == "worker":
        import uvloop

        uvloop.run(worker())
    else:
        raise SystemExit("PgQueuer's schema is installed with `pgq install`")


if __name__ == "__main__":
    main()
