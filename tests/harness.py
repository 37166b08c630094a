"""Helpers for tests that drive real `acta worker` processes against a real database:
the command to run, spawning a worker with its output in a log file, and inserting jobs
straight into the ledger (as another application's transaction would)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

Sql = Callable[..., list[tuple[object, ...]]]


def acta_command() -> list[str]:
    script = Path(sys.executable).parent / "acta"
    return [str(script)] if script.exists() else [sys.executable, "-m", "acta_sqla.cli"]


def spawn_worker(
    app: str, args: tuple[str, ...], env: Mapping[str, str], log_path: Path
) -> subprocess.Popen[str]:
    """Start `acta worker --app APP ARGS` from the repository root, stdout and stderr into
    ``log_path``."""
    with log_path.open("w") as out:
        return subprocess.Popen(
            [*acta_command(), "worker", "--app", app, *args],
            cwd=REPO_ROOT,
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )


def insert_jobs(
    sql: Sql, namespace: str, kind: str, n: int = 1, args: str = "{}", **cols: object
) -> list[int]:
    """Insert ``n`` jobs of ``kind`` in one committed statement; their ids, in order."""
    names = "".join(f", {k}" for k in cols)
    values = "".join(", %s" for _ in cols)
    rows = sql(
        f"INSERT INTO acta.job (namespace, kind, args{names}) "
        f"SELECT %s, %s, %s::jsonb{values} FROM generate_series(1, %s) RETURNING id",
        namespace,
        kind,
        args,
        *cols.values(),
        n,
    )
    return sorted(int(r[0]) for r in rows)  # type: ignore[call-overload]
