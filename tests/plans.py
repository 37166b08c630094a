"""Reading a JSON ``EXPLAIN (ANALYZE, FORMAT JSON)`` plan in tests that assert which index a
statement reads and how many rows it examines (tests/db/test_prune.py,
tests/db/test_finished_index.py)."""

from __future__ import annotations

from typing import Any


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan's nodes, the root first, depth first."""
    return [plan, *(n for child in plan.get("Plans", []) for n in nodes(child))]


def outline(plan: dict[str, Any], depth: int = 0) -> str:
    """The plan as indented lines (node, relation, index, rows x loops): for failure messages."""
    line = "  " * depth + " ".join(
        str(plan[key])
        for key in ("Node Type", "Relation Name", "Index Name", "Actual Rows", "Actual Loops")
        if key in plan
    )
    return "\n".join([line, *(outline(c, depth + 1) for c in plan.get("Plans", []))])


def examined(node: dict[str, Any]) -> int:
    """Rows a scan node read: returned plus filtered out, over all loops (EXPLAIN gives
    per-loop averages, rounded: a small overcount at most)."""
    per_loop = (
        node.get("Actual Rows", 0)
        + node.get("Rows Removed by Filter", 0)
        + node.get("Rows Removed by Index Recheck", 0)
    )
    return int(per_loop * node.get("Actual Loops", 1))
