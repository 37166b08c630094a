"""A worker's own path loads no SQLAlchemy and no Alembic; ``acta worker`` is parsed by its
Typer command and loads none of the other commands, no OpenTelemetry (the app imports
none) and no dashboard: start-up is part of every deploy and autoscale. Its settings are
pydantic-settings' reading of the environment and ``.env``. Start-up runs with the cyclic
garbage collector paused, and the worker, once built, runs with it again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.harness import REPO_ROOT, acta_command, run_acta, worker_env

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
UNNEEDED = ("sqlalchemy", "alembic", "typer", "opentelemetry", "starlette", "uvicorn")
print(sorted(m for m in sys.modules if m.split(".")[0] in UNNEEDED or "dashboard" in m))
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
import atexit, gc, importlib, sys
from acta_sqla import Acta, ActaSettings, Context

# The app is imported during start-up, with the collector paused (acta_sqla/cli/__init__.py).
print("collector at import:", gc.isenabled(), file=sys.stderr)

acta = Acta()

@acta.job
async def noop(ctx: Context) -> None: ...

def parsed_by() -> str:
    # The Click context of the command running now: Typer's vendored Click or Click's.
    for name in ("typer._click.globals", "click.globals"):
        try:
            ctx = importlib.import_module(name).get_current_context(silent=True)
        except ImportError:
            continue
        if ctx is not None:
            return f"{ctx.command_path} {type(ctx.command).__module__}"
    return "no Click context"

print("parsed by:", parsed_by(), file=sys.stderr)
print("settings:", [c.__module__ for c in ActaSettings.__mro__][1], file=sys.stderr)

def loaded() -> None:
    top = sorted({m.split(".")[0] for m in sys.modules} & set(UNNEEDED))
    commands = sorted(m for m in sys.modules if m.startswith("acta_sqla.cli."))
    dashboard = sorted(m for m in sys.modules if m.startswith("acta_sqla.dashboard"))
    print("loaded:", top, commands, dashboard, file=sys.stderr)
    # The worker was built: start-up's objects frozen, the collector running again.
    print("collector once built:", gc.isenabled(), gc.get_freeze_count() > 0, file=sys.stderr)

UNNEEDED = ("opentelemetry", "sqlalchemy", "alembic", "starlette", "jinja2", "uvicorn")
atexit.register(loaded)
"""


def test_acta_worker_is_the_typer_command_and_loads_nothing_else(db, sql, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Settings from ``.env`` (the app, the heartbeat, the executors) and from the
    environment (the database URL, and the executors again: the environment wins), read by
    pydantic-settings; ``--no-burst --burst`` is Click's to read (the last one wins)."""
    (tmp_path / "probe_app.py").write_text(PROBE_APP)
    (tmp_path / ".env").write_text(
        "ACTA_APP=probe_app:acta\nACTA_HEARTBEAT_INTERVAL=7\nACTA_EXECUTORS=3\nSCHEMA=nowhere\n"
    )
    done = run_acta(db, "startup-cli", tmp_path, "worker", "--no-burst", "--burst")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "parsed by: acta worker typer.core" in lines, done.stderr
    assert "settings: pydantic_settings.main" in lines, done.stderr
    assert "loaded: [] ['acta_sqla.cli._common', 'acta_sqla.cli.commands', " in done.stderr
    assert "'acta_sqla.cli.worker'] []" in done.stderr
    assert "collector at import: False" in lines, done.stderr
    assert "collector once built: True True" in lines, done.stderr
    assert sql("SELECT executors, heartbeat_seconds, status FROM acta.worker") == [
        (3, 7.0, "stopped")
    ]
    # The environment beats .env.
    done = subprocess.run(
        [*acta_command(), "worker", "--burst"],
        env=worker_env(db, ACTA_EXECUTORS="5"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert sql("SELECT executors FROM acta.worker ORDER BY id") == [(3,), (5,)]


def test_a_bad_setting_in_dotenv_is_one_line_naming_the_variable(db: str, tmp_path: Path) -> None:
    (tmp_path / "probe_app.py").write_text(PROBE_APP)
    (tmp_path / ".env").write_text("ACTA_APP=probe_app:acta\nACTA_HEARTBEAT_INTERVAL=soon\n")
    done = run_acta(db, "startup-cli", tmp_path, "worker", "--burst")
    assert done.returncode == 2
    assert done.stderr.startswith("acta worker: invalid setting ACTA_HEARTBEAT_INTERVAL='soon': ")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_help_goes_through_typer(db: str, tmp_path: Path) -> None:
    shown = run_acta(db, "startup-cli", tmp_path, "worker", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "--executors" in shown.stdout and "--burst" in shown.stdout
