"""A burst (``acta worker --burst``, ``testing.drain``) ends when nothing is due and
nothing admission bounced waits for its slot or window; a job delayed on purpose stays.

Before: the burst ended while bounced jobs waited for their next try (5 keyed and 5
rate-limited jobs left ``ready``, exit 0).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from acta_sqla.testing import drain
from tests.e2e.app_burst import acta
from tests.harness import Sql, acta_command, insert_jobs, worker_env

APP = "tests.e2e.app_burst:acta"
NS = "burst"


def _enqueue(sql: Sql) -> int:
    """3 jobs of one concurrency key (limit 1), 5 of a rate of 20/s (all claimed at once,
    so all but the first bounce), and one job delayed by an hour; the delayed one's id."""
    insert_jobs(sql, NS, "keyed", 3, args='{"key": "k"}', concurrency_key="k")
    insert_jobs(sql, NS, "rated", 5, rate_key="rated")
    sql(
        "INSERT INTO acta.job (namespace, kind, run_at) "
        "VALUES (%s, 'later', now() + interval '1 hour')",
        NS,
    )
    return int(sql("SELECT id FROM acta.job WHERE kind = 'later'")[0][0])


def _ended(sql: Sql) -> list[tuple[str, str, int]]:
    return [
        (str(kind), str(status), int(n))
        for kind, status, n in sql(
            "SELECT kind, status, count(*) FROM acta.job GROUP BY 1, 2 ORDER BY 1, 2"
        )
    ]


EXPECTED = [("keyed", "succeeded", 3), ("later", "ready", 1), ("rated", "succeeded", 5)]


async def test_drain_runs_every_bounced_job_and_leaves_the_delayed_one(db: str, sql: Sql) -> None:
    _enqueue(sql)
    result = await drain(acta, database_url=db)
    assert not result.crashed
    assert _ended(sql) == EXPECTED
    # Each of the 8 ran once, and the bounces were real: more claims than runs.
    assert sql("SELECT count(*) FROM acta.attempt") == [(8,)]
    assert result.claimed > 8


def test_a_real_burst_worker_runs_every_bounced_job_and_exits_0(
    db: str, sql: Sql, tmp_path: Path
) -> None:
    _enqueue(sql)
    done = subprocess.run(
        [*acta_command(), "worker", "--app", APP, "--burst"],
        cwd=Path(__file__).parents[2],
        env=worker_env(db),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert _ended(sql) == EXPECTED
    assert sql("SELECT count(*) FROM acta.attempt") == [(8,)]
