"""The benchmark's acta app: one no-op async handler (``acta worker --app benchmarks.app:acta``).

When ``LAT_FILE`` is set and a job's args carry ``ts`` (its enqueue wall time, seconds), the
handler appends ``<i> <latency_ms>`` to that file: the pickup latency of workload (c).
"""

from __future__ import annotations

import os
import time
from typing import TextIO

from acta_sqla import Acta, Context

NAMESPACE = "bench"

acta = Acta(namespace=NAMESPACE)

_latency_file: TextIO | None = None


def _lat_file() -> TextIO | None:
    global _latency_file
    if _latency_file is None:
        path = os.environ.get("LAT_FILE")
        if path:
            _latency_file = open(path, "a", buffering=1)
    return _latency_file


@acta.job
async def noop(ctx: Context, i: int = 0, ts: float | None = None) -> None:
    """Does nothing; records now - ts when asked to."""
    if ts is not None:
        f = _lat_file()
        if f is not None:
            f.write(f"{i} {(time.time() - ts) * 1000.0:.3f}\n")
