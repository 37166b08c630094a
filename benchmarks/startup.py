"""How long a worker takes from spawn to its first claim and its first completion, read from
the database's own timestamps (no polling interval in the figure).

    python -m benchmarks.startup                       # 15 spawns
    python -m benchmarks.startup --spawns 25
    python -m benchmarks.startup --checkout /tmp/acta-old --checkout .   # before/after

Each checkout is byte-compiled first (``benchmarks.bytecode``), as an installed package is.
Each spawn: one no-op job is enqueued (``benchmarks.app``), the wall clock is read, ``acta
worker --app benchmarks.app:acta`` is started (the ``acta`` script of this interpreter's
environment, run from the checkout given, so a second checkout's code is measured with the
same interpreter and dependencies); once the job has succeeded the worker is stopped and
the job's ``claimed_at`` and ``finished_at`` (server clock, same machine) give spawn to
first claim and spawn to first completion; the worker's CPU (user + sys, from ``wait4``,
start to exit) is read too. With several ``--checkout``, spawns alternate between them (the
order reversed every other round), so machine noise hits each alike, and the medians of the
per-round ratios to the first checkout are printed.

Also printed: the import of the worker command's module alone (``-X importtime``'s total:
``acta_sqla.cli.worker``, or ``acta_sqla.cli.launch`` in a checkout that had the worker's
own Typer-free parser, issue 16 to issue 28), the part of start-up that is imports.

Needs a PostgreSQL server (``--dsn``, a role that may CREATE DATABASE); the scratch
database ``acta_startup_bench`` is dropped first and at the end. Each checkout's schema
must be the same revision (it is migrated from the first checkout).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

if __package__ in (None, ""):  # run as a file: python benchmarks/startup.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg

from benchmarks.bytecode import byte_compile
from benchmarks.run import DEFAULT_DSN
from benchmarks.scratch import scratch_database

DATABASE = "acta_startup_bench"
REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "bench"


def acta_command() -> list[str]:
    script = Path(sys.executable).parent / "acta"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from acta_sqla.cli import main; main()"]


def worker_module(checkout: Path) -> str:
    """The module ``acta worker`` runs from: ``acta_sqla.cli.worker`` (its Typer command),
    or ``acta_sqla.cli.launch`` in a checkout between the third pass of issue 16 and issue
    28, when a hand-written parser started the worker without Typer."""
    launch = checkout / "acta_sqla" / "cli" / "launch.py"
    return "acta_sqla.cli.launch" if launch.exists() else "acta_sqla.cli.worker"


def import_ms(checkout: Path) -> float:
    """The worker command module's cumulative import time, from ``-X importtime``."""
    module = worker_module(checkout)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
    )
    for line in reversed(done.stderr.splitlines()):
        m = re.match(r"import time:\s+\d+\s+\|\s+(\d+)\s+\|\s+(\S+)$", line)
        if m and m.group(2) == module:
            return int(m.group(1)) / 1000
    raise RuntimeError(f"no import time for {module} in:\n{done.stderr[-2000:]}")


async def one_spawn(
    conn: asyncpg.Connection, url: str, checkout: Path
) -> tuple[float, float, float]:
    """(spawn to first claim, spawn to first completion, the worker's CPU), seconds."""
    await conn.execute("TRUNCATE acta.job, acta.execution")
    job = await conn.fetchval(
        "INSERT INTO acta.job (namespace, kind, args) VALUES ($1, 'noop', '{}') RETURNING id",
        NAMESPACE,
    )
    env = dict(os.environ, ACTA_DATABASE_URL=url, PYTHONPATH=str(checkout))
    t0 = time.time()
    proc = subprocess.Popen(  # noqa: ASYNC220 - started once, polled below
        [*acta_command(), "worker", "--app", "benchmarks.app:acta"],
        cwd=checkout,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            row = await conn.fetchrow(
                "SELECT extract(epoch FROM claimed_at)::float8 AS claimed, "
                "extract(epoch FROM finished_at)::float8 AS finished "
                "FROM acta.job WHERE id = $1 AND status = 'succeeded'",
                job,
            )
            if row is not None:
                break
            if proc.poll() is not None:
                raise RuntimeError(f"the worker exited: {proc.stderr.read()[-2000:]!r}")  # type: ignore[union-attr]
            if time.monotonic() > deadline:
                raise RuntimeError("no completion within 30 s")
            await asyncio.sleep(0.01)
    finally:
        if proc.returncode is None:  # not reaped by poll() above
            proc.send_signal(signal.SIGTERM)
            wait = asyncio.to_thread(os.wait4, proc.pid, 0)
            _, status, usage = await asyncio.wait_for(wait, 30)
            proc.returncode = os.waitstatus_to_exitcode(status)
    return row["claimed"] - t0, row["finished"] - t0, usage.ru_utime + usage.ru_stime


Spawn = Callable[[Path], Awaitable[tuple[float, float, float]]]
"""Spawns a worker from a checkout: (spawn to first claim, spawn to first completion, the
worker's CPU), s."""


@asynccontextmanager
async def spawner(dsn: str) -> AsyncIterator[Spawn]:
    """A scratch database (``acta_startup_bench``, migrated) and the spawns measured on it:
    ``async with spawner(dsn) as spawn: claim_s, done_s = await spawn(checkout)``."""
    async with scratch_database(dsn, DATABASE) as url:
        conn = await asyncpg.connect(url)
        try:
            yield lambda checkout: one_spawn(conn, url, checkout)
        finally:
            await conn.close()


async def medians(dsn: str, spawns: int, checkout: Path) -> dict[str, float]:
    """``benchmarks.run``'s start-up workload: one warm-up spawn, then ``spawns`` spawns;
    the medians in milliseconds."""
    byte_compile(checkout)
    async with spawner(dsn) as spawn:
        await spawn(checkout)  # warm the page cache
        got = [await spawn(checkout) for _ in range(spawns)]
    return {
        "claim_ms": statistics.median(c for c, _, _ in got) * 1000,
        "done_ms": statistics.median(d for _, d, _ in got) * 1000,
    }


async def main_async(dsn: str, spawns: int, checkouts: list[Path]) -> None:
    for checkout in checkouts:
        byte_compile(checkout)
    async with spawner(dsn) as spawn:
        figures: dict[Path, dict[str, list[float]]] = {
            c: {"claim": [], "done": [], "cpu": [], "import": []} for c in checkouts
        }
        await spawn(checkouts[0])  # warm the page cache
        for i in range(spawns):
            for c in checkouts if i % 2 == 0 else checkouts[::-1]:
                claim, done, cpu = await spawn(c)
                figures[c]["claim"].append(claim * 1000)
                figures[c]["done"].append(done * 1000)
                figures[c]["cpu"].append(cpu * 1000)
                figures[c]["import"].append(import_ms(c))
            print(
                f"spawn {i + 1}: "
                + "  ".join(
                    f"{c.name or c}: claim {f['claim'][-1]:.0f} ms, done {f['done'][-1]:.0f}"
                    f" ms, cpu {f['cpu'][-1]:.0f} ms, import {f['import'][-1]:.0f} ms"
                    for c, f in figures.items()
                ),
                flush=True,
            )
    print(f"\nmedians of {spawns} spawns (min-max):")
    labels = (
        ("claim", "spawn to first claim"),
        ("done", "spawn to first completion"),
        ("cpu", "worker CPU"),
        ("import", "import of the worker command"),
    )
    first = figures[checkouts[0]]
    for c, f in figures.items():
        cells = []
        for key, label in labels:
            v = f[key]
            cell = f"{label} {statistics.median(v):.0f} ms ({min(v):.0f}-{max(v):.0f})"
            if c != checkouts[0]:
                ratios = [x / y for x, y in zip(v, first[key], strict=True)]
                cell += (
                    f" = {statistics.median(ratios):.2f}x per round"
                    f" ({min(ratios):.2f}-{max(ratios):.2f})"
                )
            cells.append(cell)
        print(f"  {c}: " + "; ".join(cells))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.startup",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--dsn", default=DEFAULT_DSN, help="PostgreSQL server (any database)")
    ap.add_argument("--spawns", type=int, default=15)
    ap.add_argument(
        "--checkout",
        action="append",
        type=Path,
        help="a checkout of acta-sqla to run the worker from (repeatable; default: this one)",
    )
    args = ap.parse_args(argv)
    checkouts = [c.resolve() for c in (args.checkout or [REPO])]
    asyncio.run(main_async(args.dsn, args.spawns, checkouts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
