"""This checkout's acta against another revision's, on the drain, in one run: a shorthand
for ``python -m benchmarks.run --only drain --systems acta --acta-baseline REV``.

    python -m benchmarks.compare --baseline ea6f902              # drain at default and 64
    python -m benchmarks.compare --baseline main~3 --trials 5 --n 20000

Everything else (how the baseline is built, the interleaving, the table with acta/base)
is benchmarks/run.py's; see docs/performance.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: python benchmarks/compare.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--baseline", required=True, help="a git revision or a checkout directory")
    ap.add_argument("--trials", default="3")
    ap.add_argument("--n", default="20000")
    ap.add_argument("--executors", default="default,64")
    ap.add_argument("--dsn", default=run.DEFAULT_DSN)
    args = ap.parse_args(argv)
    return run.main(
        [
            *("--only", "drain", "--systems", "acta", "--acta-baseline", args.baseline),
            *("--trials", args.trials, "--n", args.n, "--executors", args.executors),
            *("--dsn", args.dsn),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
