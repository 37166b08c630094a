"""acta-sqla vs PgQueuer on the three workloads of docs/performance.md, in one run.

    python -m benchmarks.run                      # both systems, 3 trials, 20,000 jobs
    python -m benchmarks.run --smoke              # acta only, 500 jobs, 1 trial (< 30 s)
    python -m benchmarks.run --only drain --systems acta --executors 64 --trials 1
    python -m benchmarks.run --only drain --systems acta --acta-baseline main~1  # before/after

Needs a PostgreSQL server (``--dsn``, as a superuser: the harness drops and creates the
databases bench_acta and bench_pgqueuer, or bench_smoke_acta with --smoke, and runs
CHECKPOINT). PgQueuer is installed from PyPI into a scratch venv outside the repository on
first use (``--pgq-venv``). ``--acta-baseline REV_OR_DIR`` adds a second acta, another
revision of this repository (exported under ``--baseline-work``) or another checkout,
measured in the same trials, interleaved with this checkout's on its own database
(``<prefix>_acta_base``). Prints one line per measurement, then the table (medians with
min-max, and the ratios acta/PgQueuer and acta/baseline), then one JSON line.
Exits 1 if any measurement failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: python benchmarks/run.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg

from benchmarks.harness import Options, Runner, cpu_count
from benchmarks.measure import loadavg
from benchmarks.report import build_table, render, rows_for
from benchmarks.systems import Acta, PgQueuer, System, prepare_baseline

DEFAULT_DSN = os.environ.get("ACTA_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
WORKLOADS = ("enqueue", "drain", "latency", "startup", "features")
FEATURES = ("plain", "keyed", "laned", "fanout", "ticks")
"""The ``features`` workload: the feature drains of ``benchmarks.keyed``, and the per-tick
schedule cost of ``benchmarks.statements``."""
PG_SETTINGS = (
    "shared_buffers",
    "synchronous_commit",
    "fsync",
    "wal_sync_method",
    "max_wal_size",
    "checkpoint_timeout",
    "autovacuum",
    "jit",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--only", default=",".join(WORKLOADS), help=",".join(WORKLOADS))
    ap.add_argument(
        "--spawns", type=int, default=5, help="start-up: spawns per trial (their median)"
    )
    ap.add_argument(
        "--fanout", type=int, default=10000, help="features: children of the fan-out's parent"
    )
    ap.add_argument(
        "--ticks", type=int, default=2000, help="features: ticks in the per-tick schedule chain"
    )
    ap.add_argument("--systems", default="acta,pgqueuer", help="acta,pgqueuer")
    ap.add_argument("--trials", type=int, default=3, help="runs of each measurement (median)")
    ap.add_argument("--n", type=int, default=20000, help="jobs in (a) and (b)")
    ap.add_argument("--n-lat", type=int, default=200, help="jobs in (c)")
    ap.add_argument("--dsn", default=DEFAULT_DSN, help="PostgreSQL server (any database)")
    ap.add_argument(
        "--executors",
        default="default,64",
        help="acta drain settings: 'default' (no --executors) and/or counts, e.g. default,64",
    )
    ap.add_argument(
        "--db-prefix",
        default=None,
        help="databases are <prefix>_acta and <prefix>_pgqueuer (default bench; bench_smoke "
        "with --smoke, so that a smoke test never drops a full run's database)",
    )
    ap.add_argument(
        "--acta-baseline",
        metavar="REV_OR_DIR",
        help="also measure acta from this git revision (or checkout directory), interleaved "
        "with this checkout in every trial: the table shows both and acta/base",
    )
    ap.add_argument(
        "--baseline-work",
        type=Path,
        default=Path("/tmp/acta-bench/baselines"),
        help="where --acta-baseline revisions are exported (once per revision)",
    )
    ap.add_argument("--pgq-venv", type=Path, default=Path("/tmp/acta-bench/pgq-venv"))
    ap.add_argument("--out", type=Path, default=Path("/tmp/acta-bench/results"))
    ap.add_argument("--smoke", action="store_true", help="acta only, n=500, 1 trial, short (c)")
    ap.add_argument("--report", type=Path, help="print the table of a saved results JSON, no run")
    args = ap.parse_args(argv)
    if args.db_prefix is None:
        args.db_prefix = "bench_smoke" if args.smoke else "bench"
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,40}", args.db_prefix):
        ap.error("--db-prefix: lower-case letters, digits and '_' only")
    if args.smoke:
        args.n, args.trials, args.systems = 500, 1, "acta"
        args.n_lat = min(args.n_lat, 50)
        args.spawns, args.fanout, args.ticks = 1, 500, 100
    # Any SQLAlchemy-style URL of the server will do: postgresql+asyncpg://... -> postgresql://
    args.dsn = re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql://", args.dsn)
    args.only = [w.strip() for w in args.only.split(",") if w.strip()]
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    for w in args.only:
        if w not in WORKLOADS:
            ap.error(f"--only: unknown workload {w!r} (known: {', '.join(WORKLOADS)})")
    for s in args.systems:
        if s not in ("acta", "pgqueuer"):
            ap.error(f"--systems: unknown system {s!r} (known: acta, pgqueuer)")
    args.executors = [
        None if e.strip() == "default" else str(int(e)) for e in args.executors.split(",")
    ]
    if args.acta_baseline is not None and "acta" not in args.systems:
        ap.error("--acta-baseline compares with this checkout's acta: keep acta in --systems")
    return args


def say(msg: str) -> None:
    print(msg, flush=True)


def brief(workload: str, r: dict[str, Any]) -> str:
    if "error" in r:
        return "ERROR " + r["error"][-3000:].replace("\n", "\n    ")
    la = "load {:.2f}".format(r["loadavg"][0])
    if workload.startswith("enqueue"):
        return f"{r['jobs_per_s']:,.0f} jobs/s ({la})"
    if workload.startswith("drain"):
        return (
            f"{r['jobs_per_s']:,.0f} jobs/s, worker {r['worker_cpu_s']:.2f} s CPU "
            f"{r['rss_mb']:.0f} MB, PG {r['pg_cpu_s']:.2f} s CPU (own db {r['pg_cpu_own_s']:.2f}),"
            f" {r['commits_per_1k']:.1f} commits/1k, "
            f"{'-' if r['wal_syncs_per_1k'] is None else format(r['wal_syncs_per_1k'], '.1f')} "
            "fsyncs/1k "
            f"({la})"
        )
    if workload == "startup":
        return f"first claim {r['claim_ms']:.0f} ms, first completion {r['done_ms']:.0f} ms ({la})"
    if workload == "feature_ticks":
        return f"fire {r['fire_us']:.0f} us, plain job {r['plain_us']:.0f} us per tick ({la})"
    if workload.startswith("feature_"):
        return f"{r['jobs_per_s']:,.0f} jobs/s, PG {r['pg_us_per_job']:.0f} us/job ({la})"
    return f"p50 {r['p50']:.1f} p95 {r['p95']:.1f} p99 {r['p99']:.1f} ms ({la})"


async def server_info(admin: asyncpg.Connection) -> dict[str, Any]:
    info: dict[str, Any] = {"server_version": await admin.fetchval("SHOW server_version")}
    for name in PG_SETTINGS:
        try:
            info[name] = await admin.fetchval(f"SHOW {name}")
        except asyncpg.PostgresError:
            info[name] = None
    return info


async def measure_acta_only(args: argparse.Namespace, workload: str) -> dict[str, Any]:
    """The workloads only acta has (this checkout's): start-up from the database's own
    timestamps (``benchmarks.startup``), the feature drains (``benchmarks.keyed``, at 64
    executors, 200 keys or lanes) and the per-tick schedule cost
    (``benchmarks.statements.tick_cost``)."""
    from benchmarks import keyed, startup, statements

    la = loadavg()
    try:
        if workload == "startup":
            r: dict[str, Any] = await startup.medians(args.dsn, args.spawns, startup.REPO)
        elif workload == "feature_ticks":
            r = await statements.tick_cost(args.dsn, args.ticks, rounds=1)
        else:
            feature = workload.removeprefix("feature_")
            n = args.fanout if feature == "fanout" else args.n
            r = await keyed.trial(args.dsn, feature, n, 200, 64)
    except Exception as exc:  # recorded; the run goes on
        return {"error": f"{type(exc).__name__}: {exc}"[:4000]}
    r["loadavg"] = la
    return r


async def measure(runner: Runner, workload: str, setting: str | None) -> dict[str, Any]:
    try:
        if workload == "enqueue_single":
            return await runner.enqueue("single")
        if workload == "enqueue_bulk":
            return await runner.enqueue("bulk")
        if workload.startswith("drain"):
            return await runner.drain(setting)
        if workload == "latency":
            return await runner.latency()
    except Exception as exc:  # recorded; the run goes on
        return {"error": f"{type(exc).__name__}: {exc}"[:4000]}
    raise ValueError(workload)


def drain_key(system: System, setting: str | None) -> str:
    if not isinstance(system, Acta):
        return "drain"
    return "drain@" + (setting or "default")


ACTA_ONLY = ("startup",)


def steps_of(workload: str, order: list[System]) -> list[tuple[System, str, str | None]]:
    """One trial's measurements of ``workload``: (system, result key, setting). Drains go
    setting by setting, each system in turn, so that this checkout and its baseline run
    the same setting back to back, under about the same load. Start-up and the feature
    drains are this checkout's acta's alone."""
    if workload in ACTA_ONLY or workload.startswith("feature_"):
        return [(s, workload, None) for s in order if s.name == "acta"]
    if workload != "drain":
        return [(s, workload, None) for s in order]
    depth = max(len(s.drain_settings) for s in order)
    return [
        (s, drain_key(s, s.drain_settings[i]), s.drain_settings[i])
        for i in range(depth)
        for s in order
        if i < len(s.drain_settings)
    ]


async def main_async(args: argparse.Namespace) -> int:
    opts = Options(n=args.n, n_lat=args.n_lat, out=args.out)
    if args.smoke:
        opts.idle_s = 0.5
    opts.out.mkdir(parents=True, exist_ok=True)
    systems: list[System] = []
    if "acta" in args.systems:
        systems.append(Acta(args.executors, args.db_prefix))
    if args.acta_baseline is not None:
        baseline = await asyncio.to_thread(
            prepare_baseline, args.acta_baseline, args.baseline_work, say
        )
        systems.append(Acta(args.executors, args.db_prefix, baseline))
    if "pgqueuer" in args.systems:
        pgq = PgQueuer(args.pgq_venv, args.db_prefix)
        await asyncio.to_thread(pgq.ensure_installed, say)
        systems.append(pgq)

    admin = await asyncpg.connect(args.dsn)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    meta: dict[str, Any] = {
        "date": started,
        "n": args.n,
        "n_lat": args.n_lat,
        "trials": args.trials,
        "only": args.only,
        "systems": [s.name for s in systems],
        "cpus": cpu_count(),
        "python": platform.python_version(),
        "loadavg_start": loadavg(),
        "postgres": await server_info(admin),
        "versions": {},
    }
    for s in systems:
        meta["versions"].update(s.versions())
    say(
        f"# {started}: n={args.n}, n_lat={args.n_lat}, trials={args.trials}, "
        f"{cpu_count()} CPUs, load {' '.join(f'{x:.2f}' for x in meta['loadavg_start'])}, "
        f"PostgreSQL {meta['postgres']['server_version']}, {meta['versions']}"
    )

    runners: dict[str, Runner] = {}
    results: dict[str, dict[str, list[dict[str, Any]]]] = {s.name: {} for s in systems}
    failures = 0
    try:
        for s in systems:
            runner = Runner(s, args.dsn, admin, opts)
            await runner.setup()
            runners[s.name] = runner
        plan = [
            w
            for w, wanted in (
                ("enqueue_single", "enqueue"),
                ("enqueue_bulk", "enqueue"),
                ("drain", "drain"),
                ("latency", "latency"),
                ("startup", "startup"),
                *((f"feature_{f}", "features") for f in FEATURES),
            )
            if wanted in args.only
        ]
        for trial in range(args.trials):
            # Alternate which system goes first, so a drift in the machine's load does not
            # always fall on the same one.
            order = systems if trial % 2 == 0 else list(reversed(systems))
            for workload in plan:
                for s, key, setting in steps_of(workload, order):
                    t = time.monotonic()
                    if workload in ACTA_ONLY or workload.startswith("feature_"):
                        r = await measure_acta_only(args, workload)
                    else:
                        r = await measure(runners[s.name], key, setting)
                    failures += "error" in r
                    results[s.name].setdefault(key, []).append(r)
                    say(
                        f"[{s.name}] trial {trial + 1}/{args.trials} {key}: {brief(key, r)} "
                        f"[{time.monotonic() - t:.1f}s]"
                    )
    finally:
        for runner in runners.values():
            await runner.close()
        await admin.close()

    meta["labels"] = {s.name: s.label for s in systems}
    acta = next((s for s in systems if s.name == "acta"), None)
    if acta is not None:
        meta["drain_keys"] = [
            (drain_key(acta, st), acta.setting_label(st)) for st in acta.drain_settings
        ]
    else:
        meta["drain_keys"] = [("drain", "batch_size=10")]
    meta["loadavg_end"] = loadavg()
    records = summarize(meta, results)
    full = {"meta": meta, "results": results, "summary": records, "failures": failures}
    path = opts.out / f"results-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(full, indent=1, default=str))
    say(f"raw results: {path} (python -m benchmarks.run --report {path} prints the table again)")
    line = {
        "benchmark": "acta-sqla",
        "meta": {k: meta[k] for k in ("date", "n", "n_lat", "trials", "cpus", "versions")},
        "loadavg": [meta["loadavg_start"], meta["loadavg_end"]],
        "summary": records,
        "failures": failures,
    }
    say(json.dumps(line, default=str))
    return 1 if failures else 0


def summarize(meta: dict[str, Any], results: dict[str, Any]) -> list[dict[str, Any]]:
    """Print the table; return its figures as records."""
    drain_keys = [tuple(k) for k in meta["drain_keys"]]
    cells, records = build_table(results, rows_for(drain_keys, meta["only"]), meta["labels"])
    say("")
    say(
        f"## {' vs '.join(meta['labels'].values())}: median of {meta['trials']} (min-max), "
        f"n={meta['n']:,}, "
        f"{meta['date']}, load {meta['loadavg_start'][0]:.2f} -> {meta['loadavg_end'][0]:.2f}"
    )
    say(render(cells))
    names = list(meta["labels"])
    if len(names) > 1:
        say(
            "acta/PgQ, acta/base: ratio of the medians (this checkout's acta over the other); "
            "per trial: median (min-max) of the ratios within each trial. > 1 is better on "
            "'higher' rows, < 1 on 'lower' rows."
        )
    if "pgqueuer" in names:
        say("PgQueuer has one drain (batch_size=10, uvloop), compared with each acta setting.")
    if any(n.startswith("acta@") for n in names):
        say(
            "acta/base: the same workloads on the baseline revision, interleaved with this "
            "checkout in every trial; a change that does not move the figures reads about "
            "1.00x, within the per-trial range."
        )
    return records


def report(path: Path) -> int:
    full = json.loads(path.read_text())
    summarize(full["meta"], full["results"])
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report is not None:
        return report(args.report)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
