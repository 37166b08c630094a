"""The recovery pass: taken by whichever worker's heartbeat finds it due, run beside the loop.

Every step is its own short statement over bounded chunks, and each is fenced by status
and lease in its WHERE clause, so a worker that dies mid-pass holds nothing back: the next
pass (one lease later, on any worker) simply finds what is left. Expired rows are ended by
the completions ``completions.lease_expired`` decides, applied through the fenced finish
of complete_executions (so the same terminal effects follow); the jobs it decides to
isolate become suspects, which the claim runs alone (I5, attempt accounting).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from loguru import logger

from ..settings import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RETENTION_SECONDS,
    PRUNE_CHUNK,
    PRUNE_CHUNKS,
    PRUNE_PASS_SECONDS,
    RECOVERY_CHUNK,
)
from ..status import JobStatus
from ..values import ExpiredDecision, ExpiredLease
from . import completions

log = logger.bind(stage="recovery")


class RecoveryStore(Protocol):
    async def recover_expired(
        self, limit: int, decide: Callable[[ExpiredLease], ExpiredDecision]
    ) -> list[tuple[int, JobStatus, bool]]: ...
    async def mark_dead_workers(self) -> list[int]: ...
    async def prune_finished(self, limit: int, default_retention: float) -> int: ...
    async def recount_stranded_parents(self, limit: int) -> list[tuple[int, int, str]]: ...
    async def promote_headless_lanes(self, limit: int) -> list[tuple[str, int]]: ...
    async def fail_deadlocked(self) -> list[tuple[int, int, str, int]]: ...


@dataclass(slots=True)
class RecoveryResult:
    recovered: int = 0
    charged: int = 0
    failed: int = 0
    dead_workers: int = 0
    pruned: int = 0
    recounted: int = 0
    promoted: int = 0
    deadlocks: int = 0


def decide_expired(lost: ExpiredLease) -> ExpiredDecision:
    """What becomes of a row whose lease ran out: completions.py decides (the budget's
    default is the seed's, as a kind's stored definition gives its own)."""
    return completions.lease_expired(lost, DEFAULT_MAX_ATTEMPTS)


async def repair_waits(store: RecoveryStore, result: RecoveryResult) -> None:
    """What no job of the namespace could ever leave by itself (I11, I16: no stranded wait
    or lane): a parent counting children that no longer exist (recounted; resumed if none
    is left), a lane with no head (its oldest queued job promoted), both left by older code
    or a DELETE with triggers disabled; and a cycle of waits across lanes (one parent failed with
    ``DeadlockDetected``). Each is named in the log: it was a bug or an accident."""
    for parent, pending, status in await store.recount_stranded_parents(RECOVERY_CHUNK):
        result.recounted += 1
        log.bind(event="parent_recounted", job_id=parent).warning(
            "recovery: job {} waited for children that no longer exist (deleted without "
            "their terminal effects); recounted: {} unfinished, now {}",
            parent,
            pending,
            status,
        )
    for lane, job_id in await store.promote_headless_lanes(RECOVERY_CHUNK):
        result.promoted += 1
        log.bind(event="lane_promoted", job_id=job_id).warning(
            "recovery: lane {!r} had jobs queued and no head (deleted without its terminal "
            "effects); job {} runs next",
            lane,
            job_id,
        )
    for victim, child, lane, head in await store.fail_deadlocked():
        result.deadlocks += 1
        log.bind(event="deadlock_detected", job_id=victim).warning(
            "recovery: deadlock detected: job {} waited for its child job {}, queued in "
            "lane {!r} behind job {}, whose wait leads back to job {}; job {} failed "
            "(DeadlockDetected) so that the lanes move on",
            victim,
            child,
            lane,
            head,
            victim,
            victim,
        )


async def prune(store: RecoveryStore, result: RecoveryResult, budget: float) -> None:
    """Finished jobs past retention deleted in chunks of ``PRUNE_CHUNK``: until a chunk
    comes back short (nothing more is due), and past ``PRUNE_CHUNKS`` chunks only while
    the pass is within ``budget`` seconds. A fixed quota per pass would cap the namespace's
    prune at PRUNE_CHUNK x PRUNE_CHUNKS per recovery interval (111 jobs/s at the default
    heartbeat): a namespace finishing more would grow without bound. Each chunk is its own
    statement, so a pass cut off by a crash leaves the rest to the next one."""
    deadline = time.monotonic() + budget
    chunks = 0
    while True:
        pruned = await store.prune_finished(PRUNE_CHUNK, DEFAULT_RETENTION_SECONDS)
        chunks += 1
        result.pruned += pruned
        if pruned < PRUNE_CHUNK:
            return
        if chunks >= PRUNE_CHUNKS and time.monotonic() >= deadline:
            return


async def run_recovery(
    store: RecoveryStore, prune_budget: float = PRUNE_PASS_SECONDS
) -> RecoveryResult:
    """One recovery pass: expired leases ended, dead workers marked, finished jobs past
    retention pruned (``prune``: up to ``prune_budget`` seconds past the first
    ``PRUNE_CHUNKS`` chunks), waits and lanes nothing else could move repaired."""
    result = RecoveryResult()
    while True:
        rows = await store.recover_expired(RECOVERY_CHUNK, decide_expired)
        result.recovered += len(rows)
        result.charged += sum(1 for _, _, charged in rows if charged)
        result.failed += sum(1 for _, status, _ in rows if status is JobStatus.FAILED)
        if len(rows) < RECOVERY_CHUNK:
            break
    result.dead_workers = len(await store.mark_dead_workers())
    await prune(store, result, prune_budget)
    await repair_waits(store, result)
    if result.recovered or result.dead_workers:
        log.bind(event="recovered").info(
            "recovery: {} expired row(s) back ({} charged, {} failed for good), {} dead "
            "worker(s), {} finished job(s) pruned",
            result.recovered,
            result.charged,
            result.failed,
            result.dead_workers,
            result.pruned,
        )
    return result
