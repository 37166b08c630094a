"""The three workloads, run the same way for every system.

(a) enqueue: the system's driver enqueues N jobs one per transaction ("single") or 1,000 per
    call ("bulk"), in a process of its own; jobs/s from the driver's own timing.
(b) drain:   N jobs queued (bulk), ANALYZE, CHECKPOINT; then ONE worker process is spawned
    and the harness polls every 50 ms until no job is left non-terminal. Jobs/s from the
    spawn; the worker's CPU (utime+stime from /proc, read just before SIGTERM) and peak RSS
    (VmHWM); PostgreSQL's CPU over the drain (every postgres process, and only this
    database's backends plus the shared background processes); commits and WAL fsyncs.
(c) latency: an idle worker; N_LAT jobs enqueued 20 ms apart, one per transaction, each with
    its enqueue wall time; the handler records now - ts; p50/p95/p99.

Before each measurement the system's tables are emptied and a CHECKPOINT is taken.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from .measure import (
    CLK_TCK,
    cpu_delta_s,
    db_stats,
    loadavg,
    pids_of,
    postgres_cpu,
    proc_cpu_ticks,
    system_busy_ticks,
    vm_hwm_kb,
)
from .systems import System


class BenchError(RuntimeError):
    pass


@dataclass
class Options:
    n: int = 20000
    n_lat: int = 200
    poll_s: float = 0.05
    idle_s: float = 2.0
    """How long the latency worker sits idle after its warm-up job."""
    out: Path = Path("/tmp/acta-bench/results")


def with_database(dsn: str, database: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + database))


def percentile(sorted_vals: list[float], q: float) -> float:
    """Nearest-rank percentile (as the reference harness computes it)."""
    k = max(0, min(len(sorted_vals) - 1, round(q / 100 * len(sorted_vals) + 0.5) - 1))
    return sorted_vals[k]


class Runner:
    """One system on its own database: setup, reset, and the three workloads."""

    def __init__(self, system: System, server_dsn: str, admin: asyncpg.Connection, opts: Options):
        self.system = system
        self.admin = admin
        self.opts = opts
        self.db = system.database
        self.dsn = with_database(server_dsn, self.db)
        self.env = system.env(self.dsn)
        self.conn: asyncpg.Connection | None = None
        self.reset_statement = ""

    # ------------------------------------------------------------------ setup

    async def setup(self) -> None:
        """A fresh database with the system's schema, every run (no stale schema survives a
        change of migrations)."""
        await self.admin.execute(f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)')
        await self.admin.execute(f'CREATE DATABASE "{self.db}"')
        for cmd in self.system.setup_cmds(self.dsn):
            await self.run(cmd, f"setup {cmd}", self.env, timeout=300)
        self.conn = await asyncpg.connect(self.dsn)
        self.reset_statement = await self.system.reset_sql(self.conn)

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()

    async def reset(self) -> None:
        assert self.conn is not None
        await self.conn.execute(self.reset_statement)
        await self.conn.execute("CHECKPOINT")

    async def count(self, sql: str) -> int:
        assert self.conn is not None
        return int(await self.conn.fetchval(sql))

    # ------------------------------------------------------------------ processes

    async def driver(self, *args: str, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
        cmd = [self.system.python, str(self.system.driver), *args]
        out = await self.run(cmd, " ".join(args), dict(self.env, **(extra_env or {})), 1800)
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        return json.loads(lines[-1])

    async def run(self, cmd: list[str], what: str, env: dict[str, str], timeout: float) -> str:
        """Run one of the system's commands (in its own directory) to the end; its stdout."""
        p = await asyncio.to_thread(
            subprocess.run,
            cmd,
            env=env,
            cwd=self.system.cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if p.returncode != 0:
            raise BenchError(
                f"{self.system.name} {what} failed rc={p.returncode}\n"
                f"{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
            )
        return p.stdout

    def start_worker(self, setting: str | None, extra_env: dict[str, str] | None = None):
        cmd = self.system.worker_cmd(setting)
        env = dict(self.env, **(extra_env or {}))
        self.opts.out.mkdir(parents=True, exist_ok=True)
        logf = open(self.opts.out / f"{self.system.name}.worker.log", "a")
        logf.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n")
        logf.flush()
        p = subprocess.Popen(
            cmd, env=env, cwd=str(self.opts.out), stdout=logf, stderr=subprocess.STDOUT
        )
        return p, logf

    def worker_log_tail(self, chars: int = 1500) -> str:
        try:
            text = (self.opts.out / f"{self.system.name}.worker.log").read_text()
        except OSError:
            return ""
        return text[-chars:]

    @staticmethod
    async def stop_worker(p: subprocess.Popen[bytes], logf: Any) -> dict[str, Any]:
        t = time.monotonic()
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        deadline = t + 60
        while p.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        killed = False
        if p.poll() is None:
            p.kill()
            killed = True
            await asyncio.to_thread(p.wait, 30)
        logf.close()
        return {"exit_code": p.returncode, "stop_s": time.monotonic() - t, "killed": killed}

    # ------------------------------------------------------------------ (a) enqueue

    async def enqueue(self, mode: str) -> dict[str, Any]:
        await self.reset()
        la = loadavg()
        r = await self.driver("enqueue", "--mode", mode, "--n", str(self.opts.n))
        found = await self.count(self.system.count_sql)
        if found != self.opts.n:
            raise BenchError(f"enqueue {mode}: expected {self.opts.n} jobs, found {found}")
        out = {"jobs_per_s": self.opts.n / r["elapsed"], "elapsed_s": r["elapsed"], "loadavg": la}
        if "build_s" in r:
            out["build_s"] = r["build_s"]
        if "orm_elapsed" in r:  # acta's driver: a trivial ORM model beside it, same session
            out["orm_jobs_per_s"] = self.opts.n / r["orm_elapsed"]
            out["over_orm"] = r["orm_elapsed"] / r["elapsed"]
        return out

    # ------------------------------------------------------------------ (b) drain

    async def drain(self, setting: str | None) -> dict[str, Any]:
        n = self.opts.n
        assert self.conn is not None
        await self.reset()
        await self.driver("enqueue", "--mode", "bulk", "--n", str(n))
        if await self.count(self.system.remaining_sql) != n:
            raise BenchError("drain: the queue does not hold the jobs just enqueued")
        # Commit accounting: a backend reports its transactions to pg_stat_database at most
        # once a second (or after 10 s idle, or when it exits), so no connection of the
        # harness may hold unreported transactions across the first reading or report during
        # the drain. The control connection is closed now (it reports on exit) and reopened
        # after the last reading; ANALYZE and CHECKPOINT run on a connection of their own.
        await self.conn.close()
        try:
            m = await self._drain(setting)
        finally:
            self.conn = await asyncpg.connect(self.dsn)
        ok = await self.count(self.system.ok_sql)
        if ok != n:
            raise BenchError(f"drain: {ok} of {n} jobs succeeded")
        m["ok"] = ok
        return m

    async def _drain(self, setting: str | None) -> dict[str, Any]:
        n = self.opts.n
        prep = await asyncpg.connect(self.dsn)
        try:
            # Planner statistics: right after the bulk load the table has none, and whether
            # autovacuum's ANALYZE lands before or during the drain would change the plans.
            await prep.execute("ANALYZE")
            await prep.execute("CHECKPOINT")
        finally:
            await prep.close()
        # The poller's statement is prepared now: its first transaction, reported at once.
        # During the drain each poll is then exactly one transaction, subtracted below.
        poller = await asyncpg.connect(self.dsn)
        try:
            remaining = await poller.prepare(self.system.remaining_sql)
            await asyncio.sleep(0.5)
            own = {poller.get_server_pid(), self.admin.get_server_pid()}
            la = loadavg()
            st0 = await db_stats(self.admin, self.db)
            pg0 = postgres_cpu(own)
            busy0 = system_busy_ticks()
            t0 = time.monotonic()
            p, logf = self.start_worker(setting)
            polls = 0
            timeline: list[tuple[float, int]] = []
            t_first = t_end = None
            cpu_first = None
            hwm = 0
            deadline = t0 + max(300.0, n / 50)
            try:
                while True:
                    await asyncio.sleep(self.opts.poll_s)
                    rem = await remaining.fetchval()
                    polls += 1
                    now = time.monotonic()
                    timeline.append((round(now - t0, 3), rem))
                    hwm = max(hwm, vm_hwm_kb(p.pid) or 0)
                    if t_first is None and rem < n:
                        t_first = now
                        cpu_first = proc_cpu_ticks(p.pid)
                    if rem == 0:
                        t_end = now
                        break
                    if p.poll() is not None:
                        raise BenchError(
                            f"drain: the worker exited early, rc={p.returncode}\n"
                            + self.worker_log_tail()
                        )
                    if now > deadline:
                        raise BenchError(
                            f"drain: {rem} of {n} jobs still left after {now - t0:.0f}s"
                        )
                worker_ticks = proc_cpu_ticks(p.pid)
                hwm = max(hwm, vm_hwm_kb(p.pid) or 0)
                pg1 = postgres_cpu(own)
                busy1 = system_busy_ticks()
                attributed = await pids_of(self.admin, self.db)
            finally:
                stopped = await self.stop_worker(p, logf)
        finally:
            await poller.close()
        # Let the exiting backends and the WAL writer flush their statistics.
        await asyncio.sleep(1.2)
        st1 = await db_stats(self.admin, self.db)
        d = st1.minus(st0)
        commits = (d["xact_commit"] or 0) - polls
        assert t_first is not None and t_end is not None
        wall = t_end - t0
        worker_cpu = (worker_ticks or 0) / CLK_TCK
        pg_cpu = cpu_delta_s(pg0, pg1)
        pg_own = cpu_delta_s(pg0, pg1, only=attributed)
        busy = (busy1 - busy0) / CLK_TCK
        wal_sync = d["wal_sync"]
        return {
            "setting": setting,
            "jobs_per_s": n / wall,
            "wall_s": wall,
            "first_completion_s": t_first - t0,
            "jobs_per_s_steady": n / (t_end - t_first) if t_end > t_first else None,
            "worker_cpu_s": worker_cpu,
            "worker_cpu_at_first_s": (cpu_first or 0) / CLK_TCK,
            "worker_us_per_job": worker_cpu / n * 1e6,
            # Less the start-up (imports, connections, registration): CPU from the first poll
            # that saw a completion to the end, per job.
            "worker_us_per_job_steady": (worker_cpu - (cpu_first or 0) / CLK_TCK) / n * 1e6,
            "rss_mb": hwm / 1024,
            "pg_cpu_s": pg_cpu,
            "pg_us_per_job": pg_cpu / n * 1e6,
            "pg_cpu_own_s": pg_own,
            "pg_own_us_per_job": pg_own / n * 1e6,
            "machine_busy_s": busy,
            "other_cpu_s": busy - worker_cpu - pg_cpu,
            "commits": commits,
            "commits_per_1k": commits / n * 1000,
            "rollbacks": d["xact_rollback"],
            "wal_syncs": wal_sync,
            "wal_syncs_per_1k": None if wal_sync is None else wal_sync / n * 1000,
            "wal_mb": None if d["wal_bytes"] is None else d["wal_bytes"] / 2**20,
            "polls": polls,
            "timeline": timeline,
            "loadavg": la,
            "worker": stopped,
        }

    # ------------------------------------------------------------------ (c) latency

    async def latency(self) -> dict[str, Any]:
        n_lat = self.opts.n_lat
        await self.reset()
        self.opts.out.mkdir(parents=True, exist_ok=True)
        latfile = self.opts.out / f"{self.system.name}.lat.txt"
        latfile.write_text("")
        p, logf = self.start_worker(None, extra_env={"LAT_FILE": str(latfile)})
        vals: list[float] = []
        try:
            # Warm-up: one job; once the worker has run it, let it sit idle.
            await self.driver("enqueue", "--mode", "warmup", "--n", "1")
            deadline = time.monotonic() + 120
            while not latfile.read_text().strip():
                if p.poll() is not None:
                    raise BenchError(
                        f"latency: the worker exited, rc={p.returncode}\n" + self.worker_log_tail()
                    )
                if time.monotonic() > deadline:
                    raise BenchError("latency: the warm-up job never ran")
                await asyncio.sleep(0.05)
            await asyncio.sleep(self.opts.idle_s)
            la = loadavg()
            r = await self.driver("enqueue", "--mode", "latency", "--n", str(n_lat))
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                vals = [
                    float(parts[1])
                    for parts in (ln.split() for ln in latfile.read_text().splitlines())
                    if len(parts) == 2 and int(parts[0]) >= 0
                ]
                if len(vals) >= n_lat:
                    break
                await asyncio.sleep(0.1)
        finally:
            stopped = await self.stop_worker(p, logf)
        if len(vals) < n_lat:
            raise BenchError(f"latency: only {len(vals)} of {n_lat} jobs ran")
        vals.sort()
        return {
            "p50": percentile(vals, 50),
            "p95": percentile(vals, 95),
            "p99": percentile(vals, 99),
            "max": vals[-1],
            "mean": statistics.fmean(vals),
            "enqueue_s": r["elapsed"],
            "loadavg": la,
            "worker": stopped,
        }


def cpu_count() -> int:
    return os.cpu_count() or 1
