"""What the harness reads from the machine: /proc (CPU, memory, load) and PostgreSQL's
statistics views. Linux only."""

from __future__ import annotations

import os
from dataclasses import dataclass

import asyncpg

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_ticks(pid: int, children: bool = True) -> int | None:
    """utime + stime of ``pid`` (every thread), plus its waited-for children's when asked."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    # Fields after "(comm) ": state is [0]; utime, stime, cutime, cstime are [11]..[14].
    fields = data[data.rindex(")") + 2 :].split()
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks


def vm_hwm_kb(pid: int) -> int | None:
    """Peak resident set size of ``pid`` so far (VmHWM), in KiB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def postgres_cpu(exclude: set[int]) -> dict[int, int]:
    """CPU ticks of every ``postgres`` process on this machine (all clusters, all databases),
    by pid, less ``exclude`` (the harness's own backends)."""
    out: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        pid = int(d)
        if pid in exclude:
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm.startswith(("postgres", "postmaster")):
            ticks = proc_cpu_ticks(pid, children=False)
            if ticks is not None:
                out[pid] = ticks
    return out


def cpu_delta_s(
    before: dict[int, int], after: dict[int, int], only: set[int] | None = None
) -> float:
    """Seconds of CPU between two ``postgres_cpu`` snapshots (a process that started in
    between counts from zero; one that ended in between is lost, as with any /proc view)."""
    total = 0
    for pid, ticks in after.items():
        if only is None or pid in only:
            total += ticks - before.get(pid, 0)
    return total / CLK_TCK


def system_busy_ticks() -> int:
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest is already in user)
    return sum(vals[:8]) - vals[3] - vals[4]


def loadavg() -> tuple[float, float, float]:
    with open("/proc/loadavg") as f:
        a, b, c = f.read().split()[:3]
    return float(a), float(b), float(c)


@dataclass(frozen=True, slots=True)
class DbStats:
    xact_commit: int
    xact_rollback: int
    wal_records: int | None
    wal_bytes: int | None
    wal_sync: int | None
    wal_write: int | None

    def minus(self, other: DbStats) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for name in self.__dataclass_fields__:
            a, b = getattr(self, name), getattr(other, name)
            out[name] = None if a is None or b is None else a - b
        return out


async def db_stats(admin: asyncpg.Connection, database: str) -> DbStats:
    """``database``'s transaction counters (pg_stat_database) and the cluster's WAL counters
    (pg_stat_wal, PostgreSQL 14+; None before). Read on a connection to another database, so
    that reading them adds no transaction to ``database``."""
    x = await admin.fetchrow(
        "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = $1", database
    )
    wal: asyncpg.Record | None = None
    try:
        wal = await admin.fetchrow(
            "SELECT wal_records, wal_bytes::bigint, wal_sync, wal_write FROM pg_stat_wal"
        )
    except asyncpg.UndefinedTableError:
        wal = None
    return DbStats(
        xact_commit=int(x["xact_commit"]),
        xact_rollback=int(x["xact_rollback"]),
        wal_records=None if wal is None else int(wal["wal_records"]),
        wal_bytes=None if wal is None else int(wal["wal_bytes"]),
        wal_sync=None if wal is None else int(wal["wal_sync"]),
        wal_write=None if wal is None else int(wal["wal_write"]),
    )


async def pids_of(admin: asyncpg.Connection, database: str) -> set[int]:
    """Backends of ``database`` plus PostgreSQL's shared background processes (WAL writer,
    checkpointer, background writer, launchers): the part of PostgreSQL's CPU that this
    benchmark caused, without other databases' clients (tests running beside it)."""
    rows = await admin.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = $1 OR datname IS NULL", database
    )
    return {int(r["pid"]) for r in rows}
