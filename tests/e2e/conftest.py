"""Real `acta worker` processes for the end-to-end tests."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from tests.harness import REPO_ROOT as REPO_ROOT
from tests.harness import acta_command as acta_command
from tests.harness import spawn_worker
from tests.waiting import wait_for as wait_for


class WorkerProcess:
    def __init__(self, proc: subprocess.Popen[str], log_path: Path) -> None:
        self.proc = proc
        self.log_path = log_path

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 60.0) -> int:
        return self.proc.wait(timeout=timeout)

    def output(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""


@pytest.fixture
def oracle_log(tmp_path: Path) -> Path:
    return tmp_path / "runs.log"


def read_runs(path: Path) -> list[tuple[str, int, int, int]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        event, job_id, attempt, pid = line.split()
        out.append((event, int(job_id), int(attempt), int(pid)))
    return out


@pytest.fixture
def start_worker(
    db: str, oracle_log: Path, tmp_path: Path
) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        full_env = dict(os.environ)
        full_env.update(
            ACTA_DATABASE_URL=db,
            ACTA_E2E_LOG=str(oracle_log),
            PYTHONPATH=str(REPO_ROOT),
        )
        full_env.update(env or {})
        log_path = tmp_path / f"worker-{len(started)}.log"
        proc = spawn_worker("tests.e2e.app:acta", args, full_env, log_path)
        worker = WorkerProcess(proc, log_path)
        started.append(worker)
        return worker

    yield start
    for w in started:
        if w.proc.poll() is None:
            w.proc.send_signal(signal.SIGKILL)
            w.proc.wait(timeout=10)


@pytest.fixture
def sql(db: str) -> Iterator[Callable[..., list[tuple[object, ...]]]]:
    conn = psycopg.connect(db, autocommit=True)

    def run(query: str, *params: object) -> list[tuple[object, ...]]:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []

    yield run
    conn.close()
