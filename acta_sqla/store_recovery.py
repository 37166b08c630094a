"""The recovery pass's statements (``worker/recovery.py`` decides and calls them): a part
of ``store.WorkerStore``, run on its admin connection. Each statement is fenced by status
and lease in its WHERE clause, over bounded chunks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .connections import RoleConnection
from .queries import complete
from .queries.catalogue import WorkerSQL
from .settings import WORKER_DEAD_BEATS
from .status import JobStatus
from .values import ExpiredDecision, ExpiredLease


class Admin(Protocol):
    """What the recovery statements use of the store."""

    admin_conn: RoleConnection
    sql: WorkerSQL
    namespace: str


class RecoveryStatements:
    """The recovery and repair steps' reads and writes (``worker/recovery.RecoveryStore``)."""

    async def recover_expired(
        self: Admin, limit: int, decide: Callable[[ExpiredLease], ExpiredDecision]
    ) -> list[tuple[int, JobStatus, bool]]:
        """Recovery, step 1: up to ``limit`` rows whose lease ran out, each ended by the
        completion ``decide`` builds for it (worker/completions.py), applied through the
        completion's own fenced finish, which also makes the jobs ``decide`` isolates
        suspects; (id, status, charged) of those applied. Two statements, no transaction
        between them: the finish is fenced by execution, status and the lease still
        expired, so a row renewed or written in between is left alone."""
        found = await self.admin_conn.fetch(self.sql.select_expired, self.namespace, limit)
        if not found:
            return []
        decisions = [decide(ExpiredLease._make(r)) for r in found]
        batch = [d.completion for d in decisions]
        isolate = [d.completion.job_id for d in decisions if d.isolate]
        core, features = complete.encode(batch)
        rows = await self.admin_conn.fetch(self.sql.finish_expired, core, None, features, isolate)
        charged = {c.job_id: not c.refund for c in batch}
        return [(r[0], JobStatus(r[1]), charged[r[0]]) for r in rows]

    async def mark_dead_workers(self: Admin) -> list[int]:
        rows = await self.admin_conn.fetch(
            self.sql.mark_dead_workers, self.namespace, float(WORKER_DEAD_BEATS)
        )
        return [r["id"] for r in rows]

    async def prune_finished(self: Admin, limit: int, default_retention: float) -> int:
        rows = await self.admin_conn.fetch(
            self.sql.prune_finished, self.namespace, limit, default_retention
        )
        return int(rows[0][0]) if rows else 0

    async def recount_stranded_parents(self: Admin, limit: int) -> list[tuple[int, int, str]]:
        """Up to ``limit`` waiting parents counting more children than they have unfinished
        (one deleted without its terminal effects) recounted, each under its row lock, in a
        snapshot taken after the lock (``queries.recovery.recount_parents``): (id, count,
        status); one with none left is ``ready``."""
        found = await self.admin_conn.fetch(self.sql.stranded_parents, self.namespace, limit)
        if not found:
            return []
        ids = [r[0] for r in found]
        _, rows = await self.admin_conn.fetch_together(
            [(self.sql.lock_parents, (ids,)), (self.sql.recount_parents, (ids,))]
        )
        return [(r[0], r[1], r[2]) for r in rows]

    async def promote_headless_lanes(self: Admin, limit: int) -> list[tuple[str, int]]:
        """Up to ``limit`` lanes with jobs queued and no head: each one's oldest queued job
        made ``ready``, under the lane's lock, one transaction per lane. (lane, job id)."""
        found = await self.admin_conn.fetch(self.sql.headless_lanes, self.namespace, limit)
        promoted = []
        for (lane,) in found:
            _, rows = await self.admin_conn.fetch_together(
                [
                    (self.sql.lock_lane, (self.namespace, lane)),
                    (self.sql.promote_lane, (self.namespace, lane)),
                ]
            )
            promoted += [(lane, r[0]) for r in rows]
        return promoted

    async def fail_deadlocked(self: Admin) -> list[tuple[int, int, str, int]]:
        """One waiting parent of each wait cycle across lanes failed with
        ``DeadlockDetected``: (victim, its queued child, that child's lane, the lane's
        head)."""
        rows = await self.admin_conn.fetch(self.sql.fail_deadlocked, self.namespace)
        return [(r[0], r[1], r[2], r[3]) for r in rows]
