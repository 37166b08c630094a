"""Soak: many rounds of random faults over a long drain (deselected by default).

Run with ``pytest -m soak tests/faults``; ``ACTA_SOAK_SECONDS`` (default 120) sets how long
faults are injected, ``ACTA_SOAK_SEED`` replays a run (the seed is printed).

Three workers with short clocks drain a stream of short and slow jobs while, every 0.5-3 s,
one of them is SIGKILLed (and replaced), SIGSTOPped for 0.5-5 s (past its lease or not)
then SIGCONTed, SIGTERMed (and replaced), or has one of its connections terminated by the
server. At the end every fault is lifted and the checker runs over every job.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import pytest

from tests.harness import Sql, WorkerProcess, Workers
from tests.waiting import wait_for

from . import oracle
from .conftest import all_terminal, count_status, enqueue

ROLES = ("claim", "complete", "heartbeat", "listen")


def hold(seconds: float) -> None:
    """Keep the current fault in place this long (a fault's duration, not a wait for an
    outcome: outcomes are polled for with deadlines)."""
    time.sleep(seconds)


@pytest.mark.soak
@pytest.mark.timeout(1800)
def test_random_kills_stops_terms_and_dropped_connections_over_a_long_drain(
    sql: Sql, workers: Workers, runs_log: Path
) -> None:
    seed = int(os.environ.get("ACTA_SOAK_SEED", time.time_ns() % 1_000_000))
    seconds = float(os.environ.get("ACTA_SOAK_SECONDS", "120"))
    print(f"soak seed {seed}, {seconds:g}s of faults")
    rng = random.Random(seed)
    pool: list[WorkerProcess] = [workers() for _ in range(3)]
    killed: dict[int, float] = {}
    faults: list[str] = []
    ids: list[int] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if count_status(sql, "ready") < 300:
            ids += enqueue(sql, "quick", 400, json.dumps({"pause": rng.choice([0, 0.005, 0.02])}))
            ids += enqueue(sql, "quick", 5, json.dumps({"pause": rng.uniform(1.0, 4.0)}))
        victim = rng.choice(pool)
        action = rng.choice(["kill", "stop", "term", "connection", "connection"])
        faults.append(f"{action} {victim.pid}")
        if action == "kill":
            killed[victim.pid] = victim.kill()
            pool[pool.index(victim)] = workers()
        elif action == "stop":
            victim.signal(signal.SIGSTOP)
            hold(rng.uniform(0.5, 5.0))
            victim.signal(signal.SIGCONT)
        elif action == "term":
            victim.signal(signal.SIGTERM)
            assert victim.wait(60) == 0, victim.output()[-3000:]
            pool[pool.index(victim)] = workers()
        else:
            pid = victim.backend(rng.choice(ROLES))
            if pid is not None:
                sql("SELECT pg_terminate_backend(%s)", pid)
        hold(rng.uniform(0.5, 3.0))
    print(f"{len(faults)} faults over {len(ids)} jobs")
    wait_for(lambda: all_terminal(sql, len(ids)), 300, "every job to finish")
    report = oracle.check(sql, runs_log, jobs=ids, attempts=None, killed=killed)
    counts: dict[str, int] = {}
    for status, *_ in report.final.values():
        counts[status] = counts.get(status, 0) + 1
    print(f"final statuses {counts}; {len(report.overlaps)} legitimate overlaps")
    assert all(w.alive() for w in pool), [w.output()[-2000:] for w in pool if not w.alive()]
