"""The app of the circuit-breaker tests (tests/e2e/test_breaker.py,
tests/faults/test_breaker_faults.py), run in real `acta worker` processes.

``call_dependency`` calls a "dependency" that is down while the file named by
``BREAKER_DEPENDENCY_DOWN`` exists (the handler raises), and hangs while the file named by
``BREAKER_DEPENDENCY_HANGS`` exists. Every handler start, end and error goes to the run
log (``tests.harness.record``); every breaker transition a worker logs goes to the file
named by ``BREAKER_TRANSITIONS_LOG``, in the run log's format (``breaker_open``,
``breaker_half_open``, ``breaker_closed``; job id 0), with the same monotonic clock: the
oracle of what started while the breaker was open.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from loguru import logger

from acta_sqla import Acta, Breaker, Context
from tests.harness import record

acta = Acta(namespace="breaker")

OPEN_FOR = 1.5


def _flag(name: str) -> bool:
    path = os.environ.get(name)
    return bool(path) and Path(path).exists()  # type: ignore[arg-type]


@acta.job(
    breaker=Breaker(failure_rate=0.5, min_calls=4, window=30, open_for=OPEN_FOR, probes=1),
    max_attempts=50,
    backoff_base=0.1,
    backoff_max=0.3,
)
async def call_dependency(ctx: Context, n: int = 0) -> None:
    record("start", ctx)
    while _flag("BREAKER_DEPENDENCY_HANGS"):
        await asyncio.sleep(0.05)
    if _flag("BREAKER_DEPENDENCY_DOWN"):
        record("error", ctx)
        raise ConnectionError("the dependency is down")
    await asyncio.sleep(0.01)
    record("end", ctx)


def _transitions(message: Any) -> None:
    extra = message.record["extra"]
    path = os.environ.get("BREAKER_TRANSITIONS_LOG")
    if path and extra.get("event") == "breaker":
        line = f"breaker_{extra['state']} 0 0 0 {os.getpid()} {time.monotonic():.6f}\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


logger.add(_transitions, level="DEBUG", filter=lambda r: r["extra"].get("event") == "breaker")
