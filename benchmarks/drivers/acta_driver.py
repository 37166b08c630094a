"""acta's driver: schema setup and the enqueue workloads, as an application would write them.

setup   : ``acta_sqla.migrate.upgrade`` (acta's own Alembic migrations)
enqueue : single  = ``session.add(noop.job(i=i))`` + ``await session.commit()`` per job on an
                    ``AsyncSession`` (asyncpg): one job per transaction; interleaved, in
                    blocks of ORM_BLOCK, with the same loop adding a trivial ORM model
                    (``TrivialRow``: an identity key, a kind, JSON args) to a table of its
                    own, in the same session: the ORM's own ceiling (``orm_elapsed``)
          bulk    = ``await acta.enqueue_many(session, noop.jobs([1,000 args]))`` + commit per call
          latency = one job per transaction, ``BENCH_LAT_SPACING`` apart, each carrying ``ts``
The worker is the real ``acta worker --app benchmarks.app:acta`` (started by the harness).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from _lib import BULK_CHUNK, DSN, emit, parse_args, run_latency_enqueue
from sqlalchemy import BigInteger, Identity, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from benchmarks.app import acta, noop

ORM_BLOCK = 500


class TrivialBase(DeclarativeBase):
    pass


class TrivialRow(TrivialBase):
    """The trivial ORM model acta's one-per-transaction enqueue is measured beside."""

    __tablename__ = "bench_trivial_orm"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    kind: Mapped[str]
    args: Mapped[dict[str, Any]] = mapped_column(JSONB)


async def single_beside_orm(session: AsyncSession, n: int) -> dict[str, float]:
    """n jobs, one per transaction, and n trivial rows the same way, in alternating blocks
    (machine noise falls on both alike); the elapsed time of each."""
    await session.run_sync(lambda s: TrivialBase.metadata.create_all(s.connection()))
    await session.execute(text("TRUNCATE bench_trivial_orm"))
    await session.commit()
    acta_s = orm_s = 0.0
    for start in range(0, n, ORM_BLOCK):
        block = range(start, min(n, start + ORM_BLOCK))
        t = time.monotonic()
        for i in block:
            session.add(noop.job(i=i))
            await session.commit()
        acta_s += time.monotonic() - t
        t = time.monotonic()
        for i in block:
            session.add(TrivialRow(kind="noop", args={"i": i}))
            await session.commit()
        orm_s += time.monotonic() - t
    return {"elapsed": acta_s, "orm_elapsed": orm_s}


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
                return await single_beside_orm(session, n)
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
        from benchmarks.bytecode import byte_compile

        byte_compile(Path(__file__).resolve().parents[2])  # the worker starts as installed
        migrate.upgrade(DSN)
        emit(revision=migrate.current(DSN))
    elif a.cmd == "enqueue":
        emit(**asyncio.run(enqueue(a.mode, a.n)), n=a.n, mode=a.mode)
    else:
        raise SystemExit("the acta worker is `acta worker --app benchmarks.app:acta`")


if __name__ == "__main__":
    main()
