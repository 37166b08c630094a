"""A worker's own path loads no SQLAlchemy, no Alembic, no pydantic-settings and no
python-dotenv (no .env here): start-up is part of every deploy and autoscale."""

from __future__ import annotations

import subprocess
import sys

from tests.harness import REPO_ROOT

SCRIPT = """
import sys, asyncio
from acta_sqla import Acta, Context
from acta_sqla.settings import load_settings
from acta_sqla.worker import Worker

acta = Acta(namespace="startup")

@acta.job
async def noop(ctx: Context) -> None: ...

async def main() -> None:
    settings = load_settings(database_url=sys.argv[1], namespace="startup")
    worker = Worker(acta, settings, burst=True)
    await worker.run()
    assert not worker.crashed

asyncio.run(main())
UNNEEDED = ("sqlalchemy", "alembic", "pydantic_settings", "dotenv")
print(sorted(m for m in sys.modules if m.split(".")[0] in UNNEEDED))
"""


def test_a_worker_runs_without_loading_what_it_does_not_need(db: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, db],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
