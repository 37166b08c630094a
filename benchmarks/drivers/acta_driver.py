"""acta's driver: schema setup and the enqueue workloads, as an application would write them.

setup   : ``acta_sqla.migrate.upgrade`` (acta's own Alembic migrations)
enqueue : single  = ``session.add(noop.job(i=i))`` + ``await session.commit()`` per job on an
                    ``AsyncSession`` (asyncpg): one job per transaction
          bulk    = ``await acta.enqueue_many(session, noop.jobs([1,000 args]))`` + commit per call
          latency = one job per transaction, ``BENCH_LAT_SPACING`` apart, each carrying ``ts``
The worker is the real ``acta worker --app benchmarks.app:acta`` (started by the harness).
"""

from __future__ import annotations

import asyncio
import time

from _lib import BULK_CHUNK, DSN, emit, parse_args, run_latency_enqueue
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from benchmarks.app import acta, noop


def async_url(dsn: str) -> str:
    return make_url(dsn).set(drivername="postgresql+asyncpg").render_as_string(False)


async def enqueue(mode: str, n: int) -> dict[str, float]:
    engine = create_async_engine(async_url(DSN))
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    try:
        async with sessions() as session:
            # Connect first (as the other drivers do): the timing is of enqueueing only.
            await session.execute(text("SELECT 1"))
            await session.commit()
            if mode == "single":
                t = time.monotonic()
                for i in range(n):
                    session.add(noop.job(i=i))
                    await session.commit()
                return {"elapsed": time.monotonic() - t}
            if mode == "bulk":
                build = 0.0
                t = time.monotonic()
                for start in range(0, n, BULK_CHUNK):
                    b = time.monotonic()
                    jobs = noop.jobs([{"i": i} for i in range(start, min(n, start + BULK_CHUNK))])
                    build += time.monotonic() - b
                    await acta.enqueue_many(session, jobs)
                    await session.commit()
                elapsed = time.monotonic() - t
                # elapsed includes building the Job objects (validation), which the caller
                # pays too; build_s says how much of it that was.
                return {"elapsed": elapsed, "build_s": build}
            if mode == "warmup":
                session.add(noop.job(i=-1, ts=time.time()))
                await session.commit()
                return {"elapsed": 0.0}
            if mode == "latency":

                async def one(i: int, ts: float) -> None:
                    session.add(noop.job(i=i, ts=ts))
                    await session.commit()

                return {"elapsed": await run_latency_enqueue(one, n)}
    finally:
        await engine.dispose()
    raise SystemExit(f"unknown mode {mode}")


def main() -> None:
    a = parse_args()
    if a.cmd == "setup":
        from acta_sqla import migrate

        migrate.upgrade(DSN)
        emit(revision=migrate.current(DSN))
    elif a.cmd == "enqueue":
        emit(**asyncio.run(enqueue(a.mode, a.n)), n=a.n, mode=a.mode)
    else:
        raise SystemExit("the acta worker is `acta worker --app benchmarks.app:acta`")


if __name__ == "__main__":
    main()
