"""A worker's own path loads no SQLAlchemy, no Alembic, no pydantic-settings and no
python-dotenv (no .env here); ``acta worker`` itself loads no Typer, none of the other
commands and no OpenTelemetry (the app imports none): start-up is part of every deploy and
autoscale."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.harness import REPO_ROOT, run_acta

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


PROBE_APP = """
import atexit, sys
from acta_sqla import Acta, Context

acta = Acta()

@acta.job
async def noop(ctx: Context) -> None: ...

def loaded() -> None:
    top = sorted({m.split(".")[0] for m in sys.modules} & set(UNNEEDED))
    commands = sorted(m for m in sys.modules if m.startswith("acta_sqla.cli."))
    print("loaded:", top, commands, file=sys.stderr)

UNNEEDED = ("typer", "rich", "opentelemetry", "sqlalchemy", "alembic", "pydantic_settings")
atexit.register(loaded)
"""


def test_acta_worker_starts_without_typer_the_other_commands_or_opentelemetry(
    db: str, tmp_path: Path
) -> None:
    (tmp_path / "probe_app.py").write_text(PROBE_APP)
    done = run_acta(db, "startup-cli", tmp_path, "worker", "--app", "probe_app:acta", "--burst")
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stderr.splitlines() if x.startswith("loaded:"))
    assert line == "loaded: [] ['acta_sqla.cli._common', 'acta_sqla.cli.launch']", line
    # Help (and anything the plain path does not parse) still goes through Typer.
    shown = run_acta(db, "startup-cli", tmp_path, "worker", "--app", "probe_app:acta", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "--executors" in shown.stdout and "--burst" in shown.stdout
