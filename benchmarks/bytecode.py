"""Byte-compile a checkout before its start-up is timed, as ``pip install`` does.

A shell that sets ``PYTHONDONTWRITEBYTECODE`` (this machine's does) never writes the
``__pycache__`` of an editable checkout, so every worker start compiled acta's modules from
source (about 0.6 s instead of 0.2 s here) while PgQueuer and graphile-worker ran from
installed packages. ``benchmarks.startup`` and the shared harness's acta driver call
:func:`byte_compile`; ``benchmarks.systems`` compiles the same ``PACKAGES`` with the
stdlib's ``python -m compileall`` in its setup for ``benchmarks.run`` (any tree, a
baseline's too)."""

from __future__ import annotations

import compileall
from pathlib import Path

PACKAGES = ("acta_sqla", "benchmarks")


def byte_compile(tree: Path) -> None:
    """Write the ``.pyc`` files of the checkout ``tree``'s packages (those up to date are
    left alone)."""
    for package in PACKAGES:
        if not compileall.compile_dir(tree / package, quiet=1):
            raise RuntimeError(f"byte-compiling {tree / package} failed")
