"""``WaitForChildren`` of a ``JobBatch`` (``handler.jobs([...])``): the same children, and the
same refusals, as the same jobs built one by one with ``handler.job(...)`` (issue 30: a
10,000-child fan-out built its children as ORM objects, ~30-45 µs each)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from acta_sqla import Acta, Context, InvalidJob, WaitForChildren
from acta_sqla.waits import MAX_CHILDREN

acta = Acta(namespace="kids")


@acta.job(lane="l{k}", concurrency_key="c{k}", concurrency_limit=2, rate="5/s")
async def keyed(ctx: Context, k: int = 0, note: str = "") -> None:
    """A kind whose keys are templates of its args."""


@acta.job(unique_key="u{k}")
async def unique(ctx: Context, k: int = 0) -> None:
    """A kind with a unique key: never a child."""


ARGS = [{"k": i % 3, "note": f"n{i}"} for i in range(7)]


@pytest.mark.parametrize(
    "options",
    [{}, {"priority": -3, "max_attempts": 4}, {"delay": 2.5}],
)
def test_a_batch_gives_the_rows_of_the_same_jobs_built_one_by_one(options: dict) -> None:  # type: ignore[type-arg]
    one_by_one = WaitForChildren([keyed.job(**a, **options) for a in ARGS]).rows
    batch = WaitForChildren(keyed.jobs(ARGS, **options)).rows
    assert batch == one_by_one
    assert [r["lane_key"] for r in batch] == [f"l{a['k']}" for a in ARGS]


def test_a_batch_at_a_set_time_gives_that_time() -> None:
    when = datetime(2030, 1, 1, tzinfo=UTC)
    assert (
        WaitForChildren(keyed.jobs(ARGS, run_at=when)).rows
        == WaitForChildren([keyed.job(**a, run_at=when) for a in ARGS]).rows
    )


def test_batches_and_jobs_together_spawn_in_the_order_given() -> None:
    rows = WaitForChildren(
        [keyed.job(k=9), keyed.jobs(ARGS[:2]), keyed.job(k=8), keyed.jobs(ARGS[2:4])]
    ).rows
    assert [r["args"]["k"] for r in rows] == [9, 0, 1, 8, 2, 0]


def test_a_batch_is_refused_as_its_jobs_would_be() -> None:
    with pytest.raises(InvalidJob, match=r"child 1 \(unique\) has unique_key='u1'"):
        WaitForChildren([keyed.job(k=0), unique.jobs([{"k": 1}])])
    with pytest.raises(InvalidJob, match="at least one child"):
        WaitForChildren(keyed.jobs([]))
    with pytest.raises(InvalidJob, match=f"{MAX_CHILDREN + 1} children; at most"):
        WaitForChildren([keyed.jobs([{"k": 0}] * MAX_CHILDREN), keyed.job(k=1)])
