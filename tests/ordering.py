"""The order the tests run in: longest first, dealt across the pytest-xdist workers.

Why: ``--dist worksteal`` (pytest-xdist's ``scheduler/worksteal.py``) hands each worker one
contiguous slice of the collection order at the start (``len(pending) // nodes_remaining``
tests each, in order), and a worker left with fewer than two tests steals the *last* half
of the longest queue (by count, not by time). In collection order the slow tests (real
``acta worker`` processes, leases, SIGKILLs: tests/faults and tests/e2e) sit together, so
they landed in one or two slices and those workers ran on alone at the end.

What: :func:`arrange` estimates each test's duration (:data:`DURATIONS_FILE`, the measured
slow tests, else a default by tier folder), cuts the run into as many slices as there are
workers, each as long as pytest-xdist will make it, fills them longest test first into the
slice with the least estimated time so far (with room left), orders each slice longest
first, and concatenates them. Each worker starts on its own share of the long tests and
ends on short ones, and stealing (from the end of a queue) moves short tests.

Robustness: the order only costs or saves time. A stale or missing file, an unknown or
renamed test, a different ``-n``: every test still runs, once. The order is a pure
function of the collection, the file and ``PYTEST_XDIST_WORKER_COUNT``, so every xdist
worker computes the same one (xdist aborts a run whose workers collected different
orders); ties keep the collection order. ``-n 0``: one slice, longest first.

Keeping the file fresh: ``.venv/bin/pytest --record-durations`` (the run's usual options;
best the full default run, whose durations under six workers on two cores are the ones
that matter) rewrites :data:`DURATIONS_FILE` with the tests that took at least
:data:`RECORD_MIN_SECONDS` (setup + call + teardown); tests the run did not run keep
their entries (unless their file is gone), tests it ran under the threshold lose theirs.
The entry of a renamed test lingers, harmless (delete the file and record a full run to
start clean).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

TESTS = Path(__file__).resolve().parent
DURATIONS_FILE = TESTS / "durations.json"
RECORD_MIN_SECONDS = 0.5

TIER_SECONDS: Mapping[str, float] = {
    "faults": 5.0,
    "e2e": 2.0,
    "model": 1.5,
    "kit": 1.0,
    "typing": 1.0,
    "examples": 1.0,
    "docs": 0.5,
    "dashboard": 0.4,
    "db": 0.2,
    "unit": 0.02,
}
"""The estimate of a test the file does not list, by its folder under tests/ (the file
lists the tests of at least :data:`RECORD_MIN_SECONDS`, so a listed folder's unlisted
tests are usually quicker; these are for new tests): the tiers that wait on real processes
and leases first."""
OTHER_SECONDS = 0.2

BUSY_TIERS = frozenset({"db", "unit", "dashboard", "docs", "model", "typing"})
"""The folders whose tests keep a core busy while they run (the test's own process and the
server, or a browser), unlike those that mostly wait on `acta worker` processes, leases
and timeouts (faults, e2e, examples, kit): :func:`spread` mixes the two in each slice."""

T = TypeVar("T")


def load_durations(path: Path = DURATIONS_FILE) -> dict[str, float]:
    """The recorded durations by node id; empty when the file is missing or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {str(k): float(v) for k, v in data["durations"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def tier(nodeid: str) -> str | None:
    """The folder under tests/ of a test (``tests/<tier>/...``), None elsewhere."""
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) >= 3 and parts[0] == "tests" else None


def estimate(nodeid: str, durations: Mapping[str, float]) -> float:
    if nodeid in durations:
        return durations[nodeid]
    return TIER_SECONDS.get(tier(nodeid) or "", OTHER_SECONDS)


def is_busy(nodeid: str) -> bool:
    return tier(nodeid) in BUSY_TIERS


def worker_count() -> int:
    """The number of pytest-xdist workers of this run (1 without xdist or with ``-n 0``)."""
    try:
        return max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    except ValueError:
        return 1


def slice_sizes(total: int, workers: int) -> list[int]:
    """The sizes of the slices ``--dist worksteal`` hands its workers at the start."""
    sizes = []
    left = total
    for i in range(workers):
        size = left // (workers - i)
        sizes.append(size)
        left -= size
    return sizes


def arrange(
    items: Sequence[T],
    seconds: Sequence[float],
    workers: int,
    busy: Sequence[bool] | None = None,
) -> list[T]:
    """``items`` in the order described in the module's docstring; ``seconds[i]`` is the
    estimate of ``items[i]``, ``busy[i]`` whether it keeps a core busy (:func:`is_busy`;
    None: none does). A permutation: every item once."""
    order = sorted(range(len(items)), key=lambda i: (-seconds[i], i))
    sizes = [s for s in slice_sizes(len(items), workers) if s > 0] or [0]
    slices: list[list[int]] = [[] for _ in sizes]
    loads = [0.0] * len(sizes)
    for i in order:
        open_ = [k for k in range(len(sizes)) if len(slices[k]) < sizes[k]]
        k = min(open_, key=lambda k: (loads[k], k))
        slices[k].append(i)
        loads[k] += seconds[i]
    if busy is not None and len(slices) > 1:
        slices = [spread(s, seconds, busy) for s in slices]
    return [items[i] for s in slices for i in s]


def spread(chunk: list[int], seconds: Sequence[float], busy: Sequence[bool]) -> list[int]:
    """One worker's slice (longest first) with its busy tests spread over it instead of
    bunched at its end: each kind keeps its own longest-first order, and a test's place is
    the share of its kind's time that runs before it. Every worker then keeps about the
    same share of the cores busy from start to end, rather than all waiting together
    first and all competing for the cores together last; each kind still ends on its
    quickest tests, which stealing moves."""
    waiting = [i for i in chunk if not busy[i]]
    working = [i for i in chunk if busy[i]]

    def starts(kind: list[int]) -> list[tuple[float, int]]:
        total = sum(seconds[i] for i in kind) or 1.0
        keyed, before = [], 0.0
        for i in kind:
            keyed.append((before / total, i))
            before += seconds[i]
        return keyed

    merged = sorted(starts(waiting) + starts(working), key=lambda kv: (kv[0], not busy[kv[1]]))
    return [i for _, i in merged]


def recorded(
    old: Mapping[str, float], ran: Mapping[str, float], root: Path = TESTS.parent
) -> dict[str, float]:
    """The file's new durations: what ran, at least :data:`RECORD_MIN_SECONDS`, and the old
    entries of the tests that did not run, unless their file is gone; slowest first."""
    merged = {k: v for k, v in old.items() if k not in ran and (root / k.split("::")[0]).is_file()}
    merged.update({k: round(v, 2) for k, v in ran.items() if v >= RECORD_MIN_SECONDS})
    return dict(sorted(merged.items(), key=lambda kv: (-kv[1], kv[0])))


def write_durations(durations: Mapping[str, float], path: Path = DURATIONS_FILE) -> None:
    data = {
        "about": f"the tests of at least {RECORD_MIN_SECONDS} s (setup + call + teardown) "
        "of a full run; tests/ordering.py reads it to run the longest first, "
        "`pytest --record-durations` writes it",
        "durations": dict(durations),
    }
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


class DurationRecorder:
    """The plugin of ``--record-durations``, in the controller (or the only process): adds
    up each test's phases as their reports come in, and writes the file after a green run."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self, exitstatus: int) -> None:
        if exitstatus == 0:
            write_durations(recorded(load_durations(), self.seconds))
