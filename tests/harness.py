"""The one harness for tests that drive real `acta worker` processes against a real
database, shared by the e2e and fault tiers (and anything else that spawns workers):

* :func:`acta_command` and :func:`spawn_worker`: the `acta` command, a worker with its
  output in a log file;
* :func:`run_acta` and :func:`invoke_acta`: one `acta` command of a test, in a process of
  its own or in the test's process (below);
* :func:`worker_env`: the ONE way to build a worker's environment (only the test's
  ``ACTA_*`` settings, the test database, the run log, the checkout on ``PYTHONPATH``);
* :class:`WorkerProcess`: one running worker (signal, kill, wait, alive, output,
  readiness, the server pid of one of its connections); :class:`Workers` starts them for
  one test (one app, one database, one run log) and kills what is left at the end;
* the run log: handlers call :func:`record` at each start and end, and :func:`read_runs`
  reads it back as :class:`Run` values (the oracle's input): the ONE run-log format of
  every test app;
* :class:`SqlRunner`: an autocommit connection that runs one statement, rows back (and
  reconnects, if asked, for a database that restarts under the test);
* :func:`insert_jobs`: jobs straight into the ledger, as another application would.

Real processes, and commands in-process
---------------------------------------

An `acta` process spends about half a second of CPU importing SQLAlchemy, pydantic, loguru
and Typer before it does anything; the suite ran some 150 of them for operators' commands.
So the commands that are not `acta worker` (``db``, ``jobs``, ``schedules``,
``definitions``, ``status``, ``pause``, ``resume``, ``signal``, ``demo``, ``doctor``) run
in the test's own process through :func:`invoke_acta`: the real Typer app under
``typer.testing.CliRunner``'s isolation, parsed, run and its errors made one line by the
console script's own ``run_app``, with the environment and the working folder the process
would have had; the result has a process's shape (exit code, stdout, stderr).

A real process (:func:`run_acta`, :func:`spawn_worker`, or ``subprocess`` in the test) stays
where the process is what is tested:

* `acta worker`, always (signals, its exit status, what its start-up loads, the process
  mark that refuses ``testing.inline``, the ``--app`` module it imports);
* each command group's one-line error and non-zero exit status from the console script
  itself, an argv byte that is not UTF-8 among them
  (tests/e2e/test_cli_db.py::test_every_command_group_fails_in_one_line_from_a_real_process);
* a command that starts the embedded PostgreSQL (its first command in
  tests/e2e/test_cli_db.py and test_cli_doctor.py: the server is started by, and
  outlives, a process of its own; the commands after it find it running, in-process);
* a command inside an async test (its ``asyncio.run`` cannot run inside the test's loop:
  :func:`invoke_acta` refuses it).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.waiting import wait_for

if TYPE_CHECKING:
    import psycopg

    from acta_sqla import Context

REPO_ROOT = Path(__file__).resolve().parent.parent

Sql = Callable[..., list[tuple[Any, ...]]]

RUNS_LOG_VAR = "ACTA_RUNS_LOG"
"""The environment variable naming the run log the test apps' handlers append to."""


# ---------------------------------------------------------------------------- the run log


@dataclass(frozen=True, slots=True)
class Run:
    """One line of the run log: a handler's start or end, as the handler itself saw it."""

    event: str
    """``start``, ``end`` (returned), ``cancel`` (cancelled) or ``error`` (raised)."""
    job_id: int
    execution_id: int
    attempt: int
    pid: int
    t: float
    """CLOCK_MONOTONIC seconds: one clock for every process on the machine."""
    key: str = ""
    """What the handler grouped the run under (a concurrency key, a lane), if anything."""


def record(event: str, ctx: Context, key: str = "") -> None:
    """Append one run-log line for ``ctx``'s attempt (no-op without ``ACTA_RUNS_LOG``):
    ``<event> <job> <execution> <attempt> <pid> <monotonic seconds> [<key>]``.

    One ``write`` on an ``O_APPEND`` descriptor per line, so lines from several processes
    never interleave; ``time.monotonic()`` lets the checker compare times across workers.
    """
    path = os.environ.get(RUNS_LOG_VAR)
    if not path:
        return
    if key and len(key.split()) != 1:
        raise ValueError(f"record: key {key!r} must be one word (the log splits on spaces)")
    line = (
        f"{event} {ctx.job_id} {ctx.execution_id} {ctx.attempt} {os.getpid()} "
        f"{time.monotonic():.6f}{' ' + key if key else ''}\n"
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_runs(path: Path) -> list[Run]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        event, job, execution, attempt, pid, t, *key = line.split()
        out.append(Run(event, int(job), int(execution), int(attempt), int(pid), float(t), *key))
    return out


# ------------------------------------------------------------------------------ database


class SqlRunner:
    """``run(query, *params)``: one statement on this runner's own autocommit connection,
    rows back ([] for none). The ONE way tests run SQL on the side of the code under test.

    ``reconnect``: for a database that restarts under the test (tests/faults/cluster.py),
    or a connection kept for a whole session (``db``'s reset, tests/conftest.py): a call
    reconnects as needed, and while the server is down it raises
    ``psycopg.OperationalError``."""

    def __init__(self, url: str, *, reconnect: bool = False) -> None:
        self.url = url
        self.reconnect = reconnect
        self.conn: psycopg.Connection | None = None if reconnect else self._connect()

    def _connect(self) -> psycopg.Connection:
        # psycopg is imported here, not with the module: the test apps' handlers import
        # this module (``record``) in every `acta worker` process of the suite, which would
        # otherwise each spend ~50 ms of CPU importing a driver they never use.
        import psycopg

        # Where the server may be down, a connect must give up quickly so that the caller's
        # wait_for polls again instead of hanging on a server that is restarting.
        timeout = {"connect_timeout": 3} if self.reconnect else {}
        return psycopg.connect(self.url, autocommit=True, **timeout)

    def __call__(self, query: str, *params: object) -> list[tuple[Any, ...]]:
        return self._run(query, params)

    def script(self, statements: str) -> None:
        """Run a text of one or more statements, without parameters (its ``%`` are the
        server's, as in ``format('%I', ...)``)."""
        self._run(statements, None)

    def _run(self, query: str, params: tuple[object, ...] | None) -> list[tuple[Any, ...]]:
        import psycopg

        for attempt in (1, 2):
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = self._connect()
                cur = self.conn.execute(query, params)
                return cur.fetchall() if cur.description else []
            except psycopg.OperationalError:
                if not self.reconnect or attempt == 2:
                    raise
                self.close()
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None


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
    return sorted(int(r[0]) for r in rows)


# ------------------------------------------------------------------------------ processes


def acta_command() -> list[str]:
    script = Path(sys.executable).parent / "acta"
    return [str(script)] if script.exists() else [sys.executable, "-m", "acta_sqla.cli"]


def run_acta(
    url: str, namespace: str, cwd: Path, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """One `acta` command of a test against ``url`` in ``namespace``, run in ``cwd``; its
    exit code and output."""
    return subprocess.run(
        [*acta_command(), *args],
        env=worker_env(url, ACTA_NAMESPACE=namespace),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def invoke_acta(
    url: str | None,
    namespace: str | None,
    cwd: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """:func:`run_acta` without the process: the same `acta` command (the real Typer app,
    parsed, run and its errors turned into one line exactly as the console script does:
    ``configure_logging`` then ``run_app``), run inside this test process, in ``cwd``, with
    ``os.environ`` set to exactly ``env`` (default ``worker_env(url,
    ACTA_NAMESPACE=namespace)``; a None namespace sets none) for the call, under
    ``typer.testing.CliRunner``'s isolation (its own stdin, stdout and stderr). The result
    has the shape of a subprocess's: exit code, stdout, stderr.

    Never for `acta worker` (see the module's docstring). What a command leaves in the
    process is put back: the loguru sink it logs to (and acta's logs disabled again, as
    the library keeps them), Typer's ``sys.excepthook``, the working folder, the
    environment. A traceback in a command (a bug, not a user's mistake) is raised into the
    test, as it is: the test fails showing it (and the command's stderr). No timeout of its
    own: pytest-timeout's (the suite's ``timeout``, SIGALRM) stops a command that hangs,
    showing where."""
    import typer.testing
    from loguru import logger

    from acta_sqla.cli import app
    from acta_sqla.cli._common import add_cli_sink, run_app

    assert not args or args[0] != "worker", "acta worker runs in its own process: run_acta"
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise AssertionError("invoke_acta inside a running event loop (an async test): run_acta")
    if env is None:
        env = worker_env(url) if namespace is None else worker_env(url, ACTA_NAMESPACE=namespace)
    else:
        assert url is None and namespace is None, "give the environment or url and namespace"
    # Exactly ``env``: what the process has beyond it (the caller's ACTA_* settings) is unset.
    overrides: dict[str, str | None] = {k: None for k in os.environ if k not in env}
    overrides.update(env)

    runner = typer.testing.CliRunner()
    hook, folder = sys.excepthook, Path.cwd()
    try:
        with runner.isolation(env=overrides) as (out, err, _):
            os.chdir(cwd)
            # configure_logging's sink, without its logger.remove(): the test process's
            # own sinks stay, and only this one is removed after.
            sink = add_cli_sink()
            try:
                run_app(app, list(args))
            except SystemExit as exc:
                code = exc.code
            except BaseException as exc:
                sys.stderr.flush()
                exc.add_note(f"stderr of acta {' '.join(args)}:\n{err.getvalue().decode()}")
                raise
            else:  # run_app always exits
                raise AssertionError("run_app returned")
            finally:
                logger.remove(sink)
                logger.disable("acta_sqla")
                sys.stdout.flush()
                sys.stderr.flush()
            stdout, stderr = out.getvalue(), err.getvalue()
    finally:
        sys.excepthook = hook
        os.chdir(folder)
    if code is None:
        returncode = 0
    elif isinstance(code, int):
        returncode = code
    else:  # SystemExit("message"): Python prints it and exits 1
        stderr += f"{code}\n".encode()
        returncode = 1
    return subprocess.CompletedProcess(
        ["acta", *args], returncode, stdout.decode(), stderr.decode("utf-8", "replace")
    )


def worker_env(url: str | None, runs_log: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of an `acta` process of a test: the machine's environment without
    any ``ACTA_*`` setting of the caller's shell (so a developer's ACTA_NAMESPACE or
    ACTA_EXECUTORS never leaks into a test), then the test database (None: no URL, the
    process falls back to the embedded server), the run log, the checkout on
    ``PYTHONPATH`` (the test apps import ``tests.*``), then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTA_")}
    if url is not None:
        env["ACTA_DATABASE_URL"] = url
    if runs_log is not None:
        env[RUNS_LOG_VAR] = str(runs_log)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    env.update(extra)
    return env


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


class WorkerProcess:
    """One `acta worker` process of a test."""

    def __init__(self, proc: subprocess.Popen[str], output_path: Path, sql: Sql) -> None:
        self.proc = proc
        self.output_path = output_path
        self.sql = sql
        self.killed_at: float | None = None
        self.id: int | None = None
        """The worker's id once :meth:`wait_ready` saw it registered."""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, sig: int) -> None:
        if sig == signal.SIGKILL:
            self.killed_at = time.monotonic()
        self.proc.send_signal(sig)

    def kill(self) -> float:
        """SIGKILL; the CLOCK_MONOTONIC time of the kill (for the checker)."""
        self.signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        assert self.killed_at is not None
        return self.killed_at

    def wait(self, timeout: float = 60.0) -> int:
        return self.proc.wait(timeout=timeout)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return self.output_path.read_text() if self.output_path.exists() else ""

    def wait_ready(self, timeout: float = 30.0) -> int:
        """Wait until the worker has registered and LISTENs; its worker id."""

        def ready() -> int | None:
            if not self.alive():
                raise AssertionError(f"worker {self.pid} exited early:\n{self.output()}")
            rows = self.sql(
                "SELECT w.id FROM acta.worker w JOIN pg_stat_activity a "
                "ON a.application_name = 'acta:listen:' || w.id "
                "AND a.datname = current_database() WHERE w.pid = %s AND w.status = 'running'",
                self.pid,
            )
            return int(rows[0][0]) if rows else None

        self.id = int(wait_for(ready, timeout, f"worker {self.pid} to be ready"))  # type: ignore[arg-type]
        return self.id

    def backend(self, role: str, *, or_unnamed: bool = False) -> int | None:
        """The server pid of this worker's connection of ``role`` (None: not connected).

        ``or_unnamed``: also accept ``acta:<role>`` without the worker id (the admin
        connection is opened before the worker has an id); only meaningful while this
        worker is the only one on the database."""
        names = [f"acta:{role}:{self.id}"] + ([f"acta:{role}"] if or_unnamed else [])
        rows = self.sql(
            "SELECT pid FROM pg_stat_activity WHERE application_name = ANY(%s) "
            "AND datname = current_database()",
            names,
        )
        return int(rows[0][0]) if rows else None


class Workers:
    """Starts `acta worker --app APP` processes of one test on ``url``, each with
    ``worker_env(url, runs_log, **defaults, **env)`` and its output in ``tmp_path``;
    :meth:`kill_all` (or leaving the ``with`` block) SIGKILLs every one still alive, so no
    test leaves a worker behind to claim the next test's jobs.

    ``ready``: by default, wait until each has registered and LISTENs."""

    def __init__(
        self,
        app: str,
        url: str,
        sql: Sql,
        runs_log: Path,
        tmp_path: Path,
        defaults: Mapping[str, str] | None = None,
        ready: bool = False,
    ) -> None:
        self.app = app
        self.url = url
        self.sql = sql
        self.runs_log = runs_log
        self.tmp_path = tmp_path
        self.defaults = dict(defaults or {})
        self.ready = ready
        self.started: list[WorkerProcess] = []

    def __call__(
        self, *args: str, env: Mapping[str, str] | None = None, ready: bool | None = None
    ) -> WorkerProcess:
        full_env = worker_env(self.url, self.runs_log, **{**self.defaults, **(env or {})})
        out_path = self.tmp_path / f"worker-{len(self.started)}.log"
        worker = WorkerProcess(spawn_worker(self.app, args, full_env, out_path), out_path, self.sql)
        self.started.append(worker)
        if self.ready if ready is None else ready:
            worker.wait_ready()
        return worker

    def together(
        self, n: int, *args: str, env: Mapping[str, str] | None = None
    ) -> list[WorkerProcess]:
        """Start ``n`` workers at once, then wait until each is ready: their imports and
        registrations overlap instead of queueing one behind the other."""
        started = [self(*args, env=env, ready=False) for _ in range(n)]
        for worker in started:
            worker.wait_ready()
        return started

    def kill_all(self) -> None:
        """SIGKILL every worker of the test still alive."""
        for w in self.started:
            if w.alive():
                w.kill()

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill_all()


def one_line_error(result: subprocess.CompletedProcess[str], command: str) -> str:
    """The one line an `acta COMMAND` mistake prints (non-zero exit, no traceback): the
    project's rule for every user error on the command line."""
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"acta {command}: "), lines[0]
    return lines[0]
