"""What the dashboard's buttons do: the same session-side operations as ``acta jobs
cancel`` and ``acta jobs retry`` (one place calls them, so that moving them moves two
lines here), and the delete of finished jobs. Each runs in the caller's transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from ..session import CancelOutcome


async def cancel(
    session: AsyncSession, job_id: int, *, by: str = "dashboard", reason: str | None = None
) -> CancelOutcome:
    """As ``Acta.cancel``: "cancelled", "requested", "finished" or "missing"; ``by`` and
    ``reason`` are stored with the job."""
    from ..session import cancel as _cancel

    return await session.run_sync(lambda s: _cancel(s, job_id, reason=reason, by=by))


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


async def _driver(session: AsyncSession) -> Any:
    """The session's asyncpg connection (in the session's transaction): the schedules'
    statements are the worker's, in asyncpg's ``$n`` style."""
    raw = await (await session.connection()).get_raw_connection()
    return raw.driver_connection


def schema_of(session: AsyncSession) -> str:
    """The schema of acta's tables for this session's engine (its schema_translate_map)."""
    bind = session.get_bind()
    translate = bind.get_execution_options().get("schema_translate_map") or {}
    return str(translate.get("acta", "acta"))


async def schedule(session: AsyncSession, namespace: str, name: str, op: str) -> str:
    """As ``acta schedules pause|resume|run NAME``: a result code for the page."""
    from .. import schedules
    from ..queries import schedules as q

    conn = await _driver(session)
    schema = schema_of(session)
    if op == "pause":
        paused = await schedules.pause(conn, schema, namespace, name)
        return "paused" if paused else "schedule-missing"
    if op == "resume":
        tick = await schedules.resume(conn, schema, namespace, name)
        return "resumed" if tick is not None else "schedule-missing"
    rows = await conn.fetch(q.run_schedule_now(schema), namespace, name)
    return "fired" if rows else "schedule-missing"


async def kind(session: AsyncSession, namespace: str, name: str, op: str, by: str = "") -> str:
    """As ``acta pause|resume KIND`` and ``acta definitions close-breaker KIND`` (every
    breaker of the kind; ``by``: who, for the log line): a result code for the page."""
    from ..app import Acta
    from ..errors import ConfigurationError

    acta = Acta(namespace, allow_unknown_kinds=True)
    if op == "close-breaker":
        from .. import breakers

        closed = await session.run_sync(lambda s: breakers.close_kind(s, namespace, name, by))
        return "breaker-closed" if closed else "breaker-not-open"
    try:
        if op == "pause":
            await acta.pause(session, name)
            return "paused"
        await acta.resume(session, name)
        return "resumed"
    except ConfigurationError:
        return "kind-missing"


async def set_policy(
    session: AsyncSession, namespace: str, name: str, fields: dict[str, str]
) -> dict[str, Any]:
    """As ``acta definitions set KIND field=value ...``: the same call, so the same checks
    (``ConfigurationError`` naming the field and the value, nothing changed). Answers the
    kind's overrides now stored."""
    from ..app import Acta

    acta = Acta(namespace, allow_unknown_kinds=True)
    return await acta.set_policy(session, name, **fields)


async def reset_policy(session: AsyncSession, namespace: str, name: str) -> dict[str, Any]:
    """As ``acta definitions reset KIND``: every override of the kind dropped."""
    from ..app import Acta

    acta = Acta(namespace, allow_unknown_kinds=True)
    return await acta.reset_policy(session, name)
