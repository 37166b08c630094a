"""What the dashboard's buttons do: the same session-side operations as ``acta jobs
cancel`` and ``acta jobs retry`` (one place calls them, so that moving them moves two
lines here), and the delete of finished jobs. Each runs in the caller's transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from ..session import CancelOutcome


async def cancel(session: AsyncSession, job_id: int) -> CancelOutcome:
    """As ``Acta.cancel``: "cancelled", "requested", "finished" or "missing"."""
    from ..session import cancel as _cancel

    return await session.run_sync(lambda s: _cancel(s, job_id))


async def retry(session: AsyncSession, job_id: int) -> bool:
    """As ``Acta.retry``: True when the finished job is ready again."""
    from ..session import retry as _retry

    return await session.run_sync(lambda s: _retry(s, job_id))


async def delete_finished(session: AsyncSession, job_ids: list[int]) -> list[int]:
    """Delete the given jobs that are finished, with their recorded attempts; the ids
    deleted (an active job in the list is left alone)."""
    from ..queries import inspect as q

    if not job_ids:
        return []
    gone = [int(i) for i in (await session.execute(q.delete_finished_jobs(job_ids))).scalars()]
    if gone:
        await session.execute(q.delete_history(gone))
    return gone
