"""The test run's order (tests/ordering.py): longest first, dealt across the workers."""

from __future__ import annotations

import json
from pathlib import Path

from tests import ordering


def test_the_slices_are_the_ones_worksteal_hands_out() -> None:
    # xdist's worksteal: node i of n gets len(pending) // (n - i) of what is left, in order.
    assert ordering.slice_sizes(1546, 6) == [257, 257, 258, 258, 258, 258]
    assert ordering.slice_sizes(3, 6) == [0, 0, 0, 1, 1, 1]
    assert sum(ordering.slice_sizes(1546, 8)) == 1546


def test_every_test_runs_once_each_slice_longest_first_and_the_long_ones_spread() -> None:
    seconds = [30.0, 25.0, 20.0, 15.0] + [0.1] * 96 + [10.0, 5.0]
    items = [f"t{i}" for i in range(len(seconds))]
    order = ordering.arrange(items, seconds, 4)
    assert sorted(order) == sorted(items)
    cut = 0
    for size in ordering.slice_sizes(len(items), 4):
        chunk = [seconds[items.index(t)] for t in order[cut : cut + size]]
        assert chunk == sorted(chunk, reverse=True)
        assert chunk[0] >= 15.0  # each worker starts on one of the four longest
        cut += size
    assert ordering.arrange(items, seconds, 4) == order  # the same in every worker


def test_one_worker_runs_the_longest_first_ties_in_collection_order() -> None:
    assert ordering.arrange(["a", "b", "c", "d"], [1.0, 2.0, 1.0, 3.0], 1) == ["d", "b", "a", "c"]
    assert ordering.arrange([], [], 6) == []


def test_an_unknown_test_is_estimated_by_its_tier() -> None:
    known = {"tests/db/test_x.py::test_slow": 9.0}
    assert ordering.estimate("tests/db/test_x.py::test_slow", known) == 9.0
    assert ordering.estimate("tests/faults/test_new.py::test_a", known) > ordering.estimate(
        "tests/e2e/test_new.py::test_a", known
    )
    assert ordering.estimate("tests/unit/test_new.py::test_a", known) < ordering.estimate(
        "tests/db/test_new.py::test_a", known
    )
    assert ordering.estimate("elsewhere.py::test_a", known) == ordering.OTHER_SECONDS


def test_a_missing_or_broken_file_only_costs_the_estimates(tmp_path: Path) -> None:
    assert ordering.load_durations(tmp_path / "absent.json") == {}
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    assert ordering.load_durations(tmp_path / "bad.json") == {}
    (tmp_path / "odd.json").write_text(json.dumps({"durations": [1, 2]}), encoding="utf-8")
    assert ordering.load_durations(tmp_path / "odd.json") == {}


def test_recording_keeps_what_did_not_run_and_drops_what_is_gone_or_quick(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    for name in ("test_a.py", "test_b.py"):
        (tmp_path / "tests" / name).write_text("", encoding="utf-8")
    a, b, c = "tests/test_a.py::a", "tests/test_b.py::b", "tests/test_b.py::c"
    old = {a: 3.0, b: 4.0, "tests/test_gone.py::x": 5.0}
    new = ordering.recorded(old, {b: 0.2, c: 7.123}, root=tmp_path)
    assert new == {c: 7.12, a: 3.0}
    assert list(new) == [c, a]  # slowest first
    path = tmp_path / "durations.json"
    ordering.write_durations(new, path)
    assert ordering.load_durations(path) == new


def test_the_checked_in_file_reads() -> None:
    durations = ordering.load_durations()
    assert durations and all(v >= ordering.RECORD_MIN_SECONDS for v in durations.values())


def test_a_slice_spreads_its_busy_tests_between_its_waiting_ones() -> None:
    # Four waiting tests (40 s in all) and four busy ones (4 s): one slice.
    seconds = [20.0, 10.0, 6.0, 4.0, 1.0, 1.0, 1.0, 1.0]
    busy = [False] * 4 + [True] * 4
    order = ordering.spread(list(range(8)), seconds, busy)
    assert sorted(order) == list(range(8))
    waiting = [i for i in order if not busy[i]]
    working = [i for i in order if busy[i]]
    assert waiting == [0, 1, 2, 3] and working == [4, 5, 6, 7]  # each kind longest first
    # A test's place is the share of its kind's time before it (busy first on a tie):
    # waiting 0, .5, .75, .9; busy 0, .25, .5, .75. The busy ones are dealt out between the
    # waiting ones, not bunched at the end as longest-first put them.
    assert order == [4, 0, 5, 6, 1, 7, 2, 3]


def test_arrange_spreads_only_with_workers_and_busy_flags() -> None:
    seconds = [5.0, 1.0, 4.0, 1.0]
    busy = [False, True, False, True]
    items = ["w5", "b1", "w4", "b1'"]
    assert ordering.arrange(items, seconds, 1, busy) == ["w5", "w4", "b1", "b1'"]
    two = ordering.arrange(items, seconds, 2, busy)
    assert sorted(two) == sorted(items)
    assert two[:2] in (["b1", "w5"], ["b1'", "w5"])  # the first slice: busy one beside the longest
    assert ordering.is_busy("tests/db/test_x.py::test_a") and not ordering.is_busy(
        "tests/faults/test_x.py::test_a"
    )
