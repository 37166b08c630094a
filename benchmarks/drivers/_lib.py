"""Helpers shared by the driver scripts (stdlib only: the PgQueuer driver runs in its own venv).

Every driver has the same command line:

    <driver> setup                                           create the system's schema
    <driver> enqueue --mode single|bulk|warmup|latency --n N  prints one JSON line {"elapsed": s}
    <driver> worker                                           runs until SIGTERM (if it has no CLI)

The database is ``BENCH_DSN`` (a plain ``postgresql://`` URL).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

DSN = os.environ.get("BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
BULK_CHUNK = int(os.environ.get("BENCH_BULK_CHUNK", "1000"))
LAT_SPACING = float(os.environ.get("BENCH_LAT_SPACING", "0.020"))


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["setup", "enqueue", "worker"])
    ap.add_argument("--mode", choices=["single", "bulk", "latency", "warmup"], default="single")
    ap.add_argument("--n", type=int, default=20000)
    return ap.parse_args()


class LatencyRecorder:
    """Called by a job handler: appends ``<i> <now - ts in ms>`` to ``LAT_FILE``."""

    def __init__(self) -> None:
        path = os.environ.get("LAT_FILE")
        self.f = open(path, "a", buffering=1) if path else None

    def record(self, args: dict[str, Any] | None) -> None:
        if self.f is None or not args or args.get("ts") is None:
            return
        self.f.write(f"{args.get('i', 0)} {(time.time() - args['ts']) * 1000.0:.3f}\n")


async def run_latency_enqueue(
    enqueue_one: Callable[[int, float], Awaitable[None]], n: int
) -> float:
    """Enqueue n jobs ``LAT_SPACING`` apart, one per transaction; each carries its wall time."""
    start = time.monotonic()
    for i in range(n):
        delay = start + i * LAT_SPACING - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await enqueue_one(i, time.time())
    return time.monotonic() - start


def emit(**kw: Any) -> None:
    print(json.dumps(kw), flush=True)


def chunks(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(seq), size):
        yield seq[i : i + size]
