"""This checkout's acta against another revision's, on the drain, in one run.

    python -m benchmarks.compare --baseline ea6f902              # drain at default and 64
    python -m benchmarks.compare --baseline main~3 --trials 5 --n 20000

The baseline is checked out (``git worktree add --detach``) under ``--work`` with a venv
of its own (``pip install -e``), once; later runs reuse it. The trials alternate, baseline
then this checkout, each a one-trial ``benchmarks.run --only drain`` of that checkout's
own harness and worker on its own database, so both sides see about the same load on a
shared machine. Prints each side's median (min-max) jobs/s, worker and PostgreSQL CPU per
job, and the ratio this/baseline within each round (median and range): a change that
"does not move the figures" shows ratios around 1.0 within the spread.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_DSN = os.environ.get("ACTA_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
METRICS = (
    ("jobs_per_s", "jobs/s", "{:,.0f}"),
    ("worker_cpu_s", "worker CPU s", "{:.2f}"),
    ("pg_cpu_own_s", "PG CPU s (its own database)", "{:.2f}"),
    ("commits_per_1k", "commits per 1,000 jobs", "{:.1f}"),
)


def sh(cmd: list[str], cwd: Path | None = None) -> str:
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout


def prepare_baseline(rev: str, work: Path) -> tuple[Path, Path]:
    """The baseline's checkout and its venv's python (made once, then reused)."""
    sha = sh(["git", "-C", str(REPO), "rev-parse", "--short", rev]).strip()
    tree = work / f"base-{sha}"
    if not tree.exists():
        work.mkdir(parents=True, exist_ok=True)
        sh(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), sha])
    python = tree / ".venv" / "bin" / "python"
    if not python.exists():
        sh([sys.executable, "-m", "venv", str(tree / ".venv")])
        sh([str(python), "-m", "pip", "install", "--quiet", "-e", str(tree)])
    return tree, python


def one_trial(
    checkout: Path, python: Path, args: argparse.Namespace, prefix: str, out: Path
) -> dict[str, Any]:
    cmd = [
        str(python),
        "-m",
        "benchmarks.run",
        "--only",
        "drain",
        "--systems",
        "acta",
        "--trials",
        "1",
        "--n",
        str(args.n),
        "--executors",
        args.executors,
        "--dsn",
        args.dsn,
        "--db-prefix",
        prefix,
        "--out",
        str(out),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTA_")}
    env["PYTHONPATH"] = str(checkout)
    done = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True)
    found = re.search(r"^raw results: (\S+)", done.stdout, re.M)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{checkout}: benchmark failed:\n{done.stdout[-3000:]}{done.stderr}")
    results = json.loads(Path(found.group(1)).read_text())["results"]["acta"]
    return {key: trials[0] for key, trials in results.items()}


def spread(values: list[float], fmt: str) -> str:
    if not values:
        return "-"
    return (
        f"{fmt.format(statistics.median(values))} "
        f"({fmt.format(min(values))}-{fmt.format(max(values))})"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--baseline", required=True, help="a git revision of this repository")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--executors", default="default,64")
    ap.add_argument("--dsn", default=DEFAULT_DSN)
    ap.add_argument("--work", type=Path, default=Path("/tmp/acta-bench/compare"))
    args = ap.parse_args(argv)

    base_tree, base_python = prepare_baseline(args.baseline, args.work)
    sides = {"baseline": (base_tree, base_python), "this": (REPO, Path(sys.executable))}
    rounds: list[dict[str, dict[str, Any]]] = []
    for i in range(args.trials):
        got: dict[str, dict[str, Any]] = {}
        for side, (tree, python) in sides.items():
            got[side] = one_trial(tree, python, args, f"bench_cmp_{side}", args.work / side)
            figures = ", ".join(
                f"{k} {v.get('jobs_per_s', 0):,.0f} jobs/s" for k, v in got[side].items()
            )
            print(f"round {i + 1} {side}: {figures}", flush=True)
        rounds.append(got)

    this_rev = sh(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]).strip()
    print(f"\n## drain, n={args.n:,}: this checkout ({this_rev}) vs {args.baseline}")
    print(f"median of {args.trials} (min-max); ratio = this/baseline within each round\n")
    print("| setting | metric | baseline | this | ratio |")
    print("|---|---|---|---|---|")
    keys = sorted({k for r in rounds for k in r["this"]})
    for key in keys:
        for metric, label, fmt in METRICS:
            base = [r["baseline"][key][metric] for r in rounds if key in r["baseline"]]
            mine = [r["this"][key][metric] for r in rounds if key in r["this"]]
            ratios = [
                r["this"][key][metric] / r["baseline"][key][metric]
                for r in rounds
                if key in r["this"] and key in r["baseline"] and r["baseline"][key][metric]
            ]
            print(
                f"| {key} | {label} | {spread(base, fmt)} | {spread(mine, fmt)} | "
                f"{spread(ratios, '{:.2f}')} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
