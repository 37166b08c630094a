"""The worker protocol model-checked against the real statements (tests/model/protocol.py).

A bounded run is part of the default suite (``-m model`` selects it alone); set
``ACTA_MODEL_EXAMPLES=N`` for a longer one (``ACTA_MODEL_STEPS`` for longer sequences).
A failure prints the shrunk sequence of rules as a runnable test, and the
``@reproduce_failure`` blob that replays it; Hypothesis keeps failing examples in its
database under ``.hypothesis/acta-model`` of the checkout, so the next run tries them first.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import asyncpg
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.stateful import run_state_machine_as_test
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from acta_sqla.database import asyncpg_dsn
from acta_sqla.settings import Timings
from acta_sqla.store import WorkerStore
from tests.model.protocol import STATS, Bench, count_rules, machine_for
from tests.model.schedules import schedule_machine_for

pytestmark = pytest.mark.model

EXAMPLES = int(os.environ.get("ACTA_MODEL_EXAMPLES", "30"))
STEPS = int(os.environ.get("ACTA_MODEL_STEPS", "80"))

DATABASE = Path(__file__).resolve().parents[2] / ".hypothesis" / "acta-model"


@pytest.fixture
def bench(database_url: str, _reset_sql: str) -> Bench:
    loop = asyncio.new_event_loop()
    stores = [
        WorkerStore(database_url, "acta", "default", Timings.from_heartbeat(45.0)) for _ in range(2)
    ]
    conn = loop.run_until_complete(asyncpg.connect(asyncpg_dsn(database_url)))
    engine = create_engine(make_url(database_url).set(drivername="postgresql+psycopg"))
    made = Bench(loop, database_url, _reset_sql, conn, stores, engine)
    try:
        yield made
    finally:
        for s in stores:
            loop.run_until_complete(s.close())
        for extra in made.extra:
            loop.run_until_complete(extra.close())
        loop.run_until_complete(conn.close())
        engine.dispose()
        loop.close()


@pytest.mark.timeout(600)
def test_the_worker_protocol_keeps_its_invariants(bench: Bench) -> None:
    machine = machine_for(bench)
    if os.environ.get("ACTA_MODEL_STATS"):
        count_rules()
    # Trying a mutation by hand (docs/reliability.md, "Model check"): ACTA_MODEL_NO_SHRINK=1
    # reports the first failing sequence as found, and how long finding it took.
    shrink = () if os.environ.get("ACTA_MODEL_NO_SHRINK") else (Phase.shrink,)
    began = time.monotonic()
    try:
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=EXAMPLES,
                stateful_step_count=STEPS,
                deadline=None,
                database=DirectoryBasedExampleDatabase(DATABASE),
                print_blob=True,
                suppress_health_check=list(HealthCheck),
                phases=(Phase.explicit, Phase.reuse, Phase.generate, *shrink),
            ),
        )
    finally:
        if os.environ.get("ACTA_MODEL_STATS"):
            print(f"{time.monotonic() - began:.1f}s", dict(STATS))


SCHEDULE_EXAMPLES = int(os.environ.get("ACTA_MODEL_SCHEDULE_EXAMPLES", "20"))
SCHEDULE_STEPS = int(os.environ.get("ACTA_MODEL_SCHEDULE_STEPS", "30"))


@pytest.mark.timeout(600)
def test_schedules_dead_workers_and_live_limits_keep_their_invariants(bench: Bench) -> None:
    """tests/model/schedules.py: a schedule's fires, pause, resume, drop and re-planting;
    dead-worker marking; a key's limit changed live."""
    shrink = () if os.environ.get("ACTA_MODEL_NO_SHRINK") else (Phase.shrink,)
    began = time.monotonic()
    try:
        run_state_machine_as_test(
            schedule_machine_for(bench),
            settings=settings(
                max_examples=SCHEDULE_EXAMPLES,
                stateful_step_count=SCHEDULE_STEPS,
                deadline=None,
                database=DirectoryBasedExampleDatabase(DATABASE),
                print_blob=True,
                suppress_health_check=list(HealthCheck),
                phases=(Phase.explicit, Phase.reuse, Phase.generate, *shrink),
            ),
        )
    finally:
        if os.environ.get("ACTA_MODEL_STATS"):
            print(f"{time.monotonic() - began:.1f}s", dict(STATS))
