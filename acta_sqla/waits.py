"""Durable waits: what a handler returns to park its job (docs/waits.md).

``return WaitForSignal("approved", timeout=3600)`` parks the job ``waiting`` until
``acta.signal(session, job_id, "approved", payload)`` commits (or the timeout passes);
``return WaitForChildren([child.job(...), ...])`` spawns the children and parks the job
until each has reached a terminal state. Either way the job holds no executor, lease or
worker while it waits, the attempt is not charged, and the handler runs again from its top,
told why by ``ctx.resumed`` (``"signal"``, ``"timeout"``, ``"children"``) and what came in
by ``ctx.signals`` and ``ctx.children``. The completion that parks the job is written by
the same batched statement as every other completion (queries/complete.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import durations
from .errors import ActaError, InvalidJob
from .policy import Refused, check_key, shown

if TYPE_CHECKING:
    from .handler import JobBatch
    from .models import Job


MAX_CHILDREN = 100_000
"""The most children one ``WaitForChildren`` may spawn (they travel in one completion)."""


def check_signal_name(name: object, error: type[ActaError], where: str = "") -> str:
    """THE rule for a signal's name, the sender's (``acta.signal``: ``InvalidSignal``) and
    the waiter's (``WaitForSignal``: ``InvalidJob``, the attempt fails under its budget):
    :func:`~acta_sqla.policy.check_key`'s, so that the completion can store it. The message
    says ``signal name <name> <why>``, after ``where``."""
    try:
        return check_key(name)
    except Refused as why:
        raise error(f"{where}signal name {shown(name)} {why}") from None


@dataclass(frozen=True, slots=True)
class WaitForSignal:
    """Returned by a handler: park the job until signal ``name`` arrives, or ``timeout``
    seconds pass (None: wait as long as it takes)."""

    name: str
    timeout: float | None = None

    def __post_init__(self) -> None:
        # A name the completion could not store (a NUL, a lone surrogate) failed the job
        # for good at its completion; refused here, the attempt fails under its budget.
        check_signal_name(self.name, InvalidJob, "WaitForSignal: ")
        t = self.timeout
        if t is not None:
            checked = durations.seconds(t, positive=True)
            if checked is None:
                raise InvalidJob(
                    f"WaitForSignal({self.name!r}): timeout "
                    f"{durations.rule(positive=True)}, or None for no timeout; "
                    f"got {shown(t)}"
                )
            object.__setattr__(self, "timeout", checked)


@dataclass(frozen=True, slots=True)
class WaitForChildren:
    """Returned by a handler: spawn ``children`` (jobs built by ``handler.job(...)``, any
    kind and options but a unique key) and park the job until every one of them has
    succeeded, failed or been cancelled.

    Many children of one kind are cheaper as ``handler.jobs([...])`` (a ``JobBatch``,
    validated in one pass with no ORM object per job, as for ``acta.enqueue_many``): give
    the batch itself, or batches and jobs together in one list, spawned in that order."""

    children: Sequence[Job | JobBatch] | JobBatch
    rows: list[dict[str, Any]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from .handler import JobBatch

        given = self.children
        items = [given] if isinstance(given, JobBatch) else list(given)
        count = sum(len(item) if isinstance(item, JobBatch) else 1 for item in items)
        if not count:
            raise InvalidJob("WaitForChildren: give at least one child job")
        if count > MAX_CHILDREN:
            raise InvalidJob(
                f"WaitForChildren: {count} children; at most {MAX_CHILDREN} per wait "
                "(wait for them in waves, or give each wave its own parent)"
            )
        rows: list[dict[str, Any]] = []
        for item in items:
            if isinstance(item, JobBatch):
                rows += batch_rows(item, len(rows))
            else:
                rows.append(child_row(item, len(rows)))
        object.__setattr__(self, "rows", rows)


def held_lane(
    held: Sequence[tuple[str, str]], rows: Sequence[dict[str, Any]], holder: str
) -> str | None:
    """Why a parent cannot wait for these children (rows as :func:`child_row` builds them),
    or None: a child in a lane ``held`` ((namespace, lane) pairs) by ``holder`` (the parent
    itself, or an ancestor waiting for it through the chain:
    ``WorkerStore.lanes_held_above``) would queue ``waiting`` behind a job that waits for
    that very child, so none of them would ever run and the lane would be stranded."""
    holders = set(held)
    for index, row in enumerate(rows):
        if row["lane_key"] is not None and (row["namespace"], row["lane_key"]) in holders:
            return (
                f"WaitForChildren: child {index} ({row['kind']}) is in lane "
                f"{row['lane_key']!r}, which {holder} holds while it waits: the child would "
                "queue behind it and none of them would ever run. Give the child another "
                "lane, or none"
            )
    return None


def has_lanes(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether any of these children is in a lane: only then, and only for a parent that is
    itself a child, are its ancestors' lanes read (:func:`held_lane`)."""
    return any(row["lane_key"] is not None for row in rows)


def unique_child(index: int, kind: str, key: str) -> InvalidJob:
    """The refusal of a child given a unique key (a job or one of a batch)."""
    return InvalidJob(
        f"WaitForChildren: child {index} ({kind}) has unique_key={key!r}; a child cannot be "
        "unique (its parent must know how many it waits for)"
    )


def child_row(job: Job, index: int) -> dict[str, Any]:
    """One child as the completion's spawn part reads it (``features["children"]``)."""
    from .models import Job

    if not isinstance(job, Job):
        raise InvalidJob(
            f"WaitForChildren: child {index} is {type(job).__name__}, not a Job; build each "
            "child with handler.job(...)"
        )
    d = job.__dict__
    if d.get("id") is not None:
        raise InvalidJob(f"WaitForChildren: child {index} (job {d['id']}) is already enqueued")
    if d.get("unique_key") is not None:
        raise unique_child(index, job.kind, d["unique_key"])
    run_at = d.get("run_at")
    return {
        "namespace": d.get("namespace") or "default",
        "kind": job.kind,
        "args": job.args,
        "priority": d.get("priority") or 0,
        "run_at": run_at.isoformat() if isinstance(run_at, datetime) else None,
        "delay": d.get("_delay_seconds"),
        "max_attempts": d.get("max_attempts"),
        "concurrency_key": d.get("concurrency_key"),
        "rate_key": d.get("rate_key"),
        "lane_key": d.get("lane_key"),
    }


def batch_rows(batch: JobBatch, first: int) -> list[dict[str, Any]]:
    """The children of ``batch`` as :func:`child_row` gives a child (``first``: the index of
    its first child among the wait's, for messages)."""
    if batch.unique_keys is not None:
        for i, key in enumerate(batch.unique_keys):
            if key is not None:
                raise unique_child(first + i, batch.kind, key)
    run_at = batch.run_at.isoformat() if batch.run_at is not None else None
    n = len(batch)
    lanes = batch.lane_keys or [None] * n
    concurrency = batch.concurrency_keys or [None] * n
    rates = batch.rate_keys or [None] * n
    loads = json.loads
    return [
        {
            "namespace": batch.namespace or "default",
            "kind": batch.kind,
            "args": loads(batch.args_json[i]),
            "priority": batch.priority or 0,
            "run_at": run_at,
            "delay": batch.delay,
            "max_attempts": batch.max_attempts,
            "concurrency_key": concurrency[i],
            "rate_key": rates[i],
            "lane_key": lanes[i],
        }
        for i in range(n)
    ]


@dataclass(frozen=True, slots=True)
class Child:
    """One child as its parent's next run sees it (``ctx.children``, in spawn order)."""

    id: int
    kind: str
    status: str
    result: Any = None
    error: dict[str, Any] | None = None
    """The child's last error (``{"type": ..., "message": ...}``), None if it had none."""


def children_from_json(text: str | None) -> tuple[Child, ...]:
    """``ctx.children`` from the store's JSON answer (one array per child)."""
    if not text:
        return ()
    return tuple(Child(*row) for row in json.loads(text))
