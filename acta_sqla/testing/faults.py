"""Fault injection for your tests: what your handlers do when acta's worker dies, loses a
lease, cannot write a completion or loses the database (docs/testing.md).

The faults act on workers running in the test's process (``drain``, the ``acta_worker``
fixture, ``testing.running_worker``), never on ``acta worker`` processes:

* ``crash_at(point)``: the next worker stage to reach ``point`` (``"after_claim"``,
  ``"in_handler"``, ``"before_completion_commit"``) stops its worker dead, as SIGKILL would.
* ``fail_completion_writes(n)``: the next ``n`` completion writes fail (then succeed).
* ``await database_outage(seconds)``: the workers' connections are cut and refused.
* ``await expire_lease(session, job_id)``: the job's lease ends now.
* ``await make_due(session)``: everything waiting for its time is due now.

Each seam in the worker is one ``is None`` check while no fault is armed.
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import _faults
from ..app import Acta
from ..errors import ConfigurationError, StoreUnavailable
from ..queries import admin
from ..settings import load_settings

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

__all__ = [
    "POINTS",
    "Crash",
    "FailedWrites",
    "crash_at",
    "database_outage",
    "expire_lease",
    "fail_completion_writes",
    "make_due",
]

POINTS = _faults.POINTS


@dataclass
class Crash:
    """What ``crash_at`` yields: filled in when the crash happens."""

    point: str
    happened: bool = False
    worker_id: int | None = None
    """The killed worker's id (its row stays ``running`` until recovery marks it dead)."""
    job_ids: list[int] = field(default_factory=list)
    """The jobs the worker held when it died (their rows stay ``executing``)."""


@dataclass
class FailedWrites:
    """What ``fail_completion_writes`` yields."""

    left: int
    failed: int = 0


class _Plan:
    """The armed faults (``_faults.active`` while any is armed)."""

    def __init__(self) -> None:
        self.crashes: list[Crash] = []
        self.writes: list[FailedWrites] = []
        self.refused_until = 0.0

    def idle(self) -> bool:
        return not self.crashes and not self.writes and time.monotonic() >= self.refused_until

    async def reached(self, point: str) -> None:
        if point == "before_completion_commit":
            for writes in self.writes:
                if writes.left > 0:
                    writes.left -= 1
                    writes.failed += 1
                    raise StoreUnavailable(
                        "complete: the write failed (acta_sqla.testing.faults."
                        "fail_completion_writes)"
                    )
        crash = next((c for c in self.crashes if c.point == point and not c.happened), None)
        if crash is None:
            return
        worker = _faults.current.get()
        if worker is None:
            return
        crash.happened = True
        crash.worker_id = worker.worker_id
        crash.job_ids = sorted({e.job.id for e in worker.registry})
        if point == "in_handler":
            # The attempt has started: a heartbeat records it, as one would while the
            # handler ran, so the loss is known to be of a started attempt.
            try:
                await worker.heartbeat.run_once()
            except Exception:  # as a beat that did not land before the crash
                pass
        worker.kill()
        await asyncio.Future()  # the kill cancelled this stage's task: it ends here

    def connecting(self, application_name: str) -> None:
        if time.monotonic() < self.refused_until:
            raise ConnectionRefusedError(
                errno.ECONNREFUSED,
                f"{application_name}: connection refused (acta_sqla.testing.faults."
                "database_outage)",
            )


_plan = _Plan()


def _arm() -> None:
    _faults.active = _plan


def _disarm() -> None:
    if _plan.idle():
        _faults.active = None


@contextmanager
def crash_at(point: str) -> Iterator[Crash]:
    """While the block runs, the first in-process worker stage to reach ``point`` kills its
    worker as SIGKILL would: nothing more is written (no hand-back, no completion, no stop
    of the worker row), its connections are cut (the server rolls back what was open), its
    rows stay ``executing`` until their leases run out. ``drain`` returns (its result says
    ``killed=True``); an ``acta_worker`` is dead until the test ends.

    * ``"after_claim"``: the claim committed, no handler started.
    * ``"in_handler"``: an attempt started (a heartbeat recorded it) and died before its
      handler's code returned; the handler's code does not run in this attempt.
    * ``"before_completion_commit"``: handlers ran to their end, their completions were
      never written.

    Yields a :class:`Crash` (``happened``, ``worker_id``, ``job_ids``); then
    ``await expire_lease(session, *crash.job_ids)`` and a ``drain`` take the jobs back."""
    if point not in POINTS:
        raise ConfigurationError(
            f"crash_at({point!r}): the points are {', '.join(repr(p) for p in POINTS)}"
        )
    crash = Crash(point)
    _plan.crashes.append(crash)
    _arm()
    try:
        yield crash
    finally:
        _plan.crashes.remove(crash)
        _disarm()


@contextmanager
def fail_completion_writes(n: int) -> Iterator[FailedWrites]:
    """While the block runs, the next ``n`` completion writes of in-process workers fail as
    a lost connection fails them (before the statement reaches the database); the worker
    repeats each failed write after its back-off (1 s, then 2 s, 4 s... up to 30 s), and
    the write after the ``n``-th lands. Yields a :class:`FailedWrites` (``failed``)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ConfigurationError(f"fail_completion_writes({n!r}): n must be an int >= 0")
    writes = FailedWrites(n)
    _plan.writes.append(writes)
    _arm()
    try:
        yield writes
    finally:
        _plan.writes.remove(writes)
        _disarm()


async def database_outage(seconds: float, *, database_url: str | None = None) -> None:
    """Cut every acta worker connection to the test database now (``pg_terminate_backend``
    of the connections named ``acta:*``: in-process workers, and ``acta worker`` processes
    on the same database alike) and refuse the in-process workers' new connections for
    ``seconds``; returns when the outage ends. What your test can then assert: the jobs
    still complete (at least once), their completions were written once the database came
    back, and a handler that ran past its lease may have run twice."""
    if not isinstance(seconds, int | float) or seconds < 0 or seconds != seconds:
        raise ConfigurationError(f"database_outage({seconds!r}): seconds must be >= 0")
    import asyncpg

    from ..database import asyncpg_dsn
    from ..database import database_url as resolve_url

    url = resolve_url(load_settings(database_url=database_url))
    _plan.refused_until = max(_plan.refused_until, time.monotonic() + seconds)
    _arm()
    try:
        conn = await asyncpg.connect(asyncpg_dsn(url))
        try:
            await conn.execute(admin.terminate_worker_connections())
        finally:
            await conn.close()
        await asyncio.sleep(max(0.0, _plan.refused_until - time.monotonic()))
    finally:
        _disarm()


@asynccontextmanager
async def _connection(session: AsyncSession) -> AsyncIterator[tuple[Any, str]]:
    """An asyncpg connection to the session's database (autocommit), and acta's schema."""
    import asyncpg

    from ..database import asyncpg_dsn

    engine = getattr(session, "bind", None)
    if engine is None:
        raise ConfigurationError(
            "acta_sqla.testing.faults: the session has no bind (AsyncSession(engine)); "
            "pass a session bound to the test database's engine"
        )
    url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    schema = load_settings(database_url=url).db_schema
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        yield conn, schema
    finally:
        await conn.close()


async def expire_lease(session: AsyncSession, *job_ids: int) -> None:
    """End the lease of each job now (on a connection of its own to the session's database,
    committed at once), as if its worker had stopped renewing it long ago: the next
    ``drain`` (which runs a recovery pass first) or a worker's recovery pass takes the
    job back, recording the lost attempt (``LeaseExpired``). A live worker that still
    runs it learns at its next beat that it lost the lease. Raises ``ValueError`` for a
    job that is not ``executing``."""
    if not job_ids:
        raise ConfigurationError("expire_lease(session, job_id, ...): name at least one job")
    async with _connection(session) as (conn, schema):
        rows = await conn.fetch(admin.expire_leases(schema), list(job_ids))
    done = {r[0] for r in rows}
    missing = sorted(set(job_ids) - done)
    if missing:
        raise ValueError(
            f"expire_lease: job(s) {missing} are not executing (no lease to expire): only a "
            "job a worker holds has a lease"
        )


async def make_due(session: AsyncSession, acta: Acta | str | None = None) -> int:
    """Time travel: every job waiting for a time is due now (in a transaction of its own, on
    a connection to the session's database): retries in their back-off, delayed and
    ``run_at`` jobs, bounced jobs, the schedules' pending fires, and signal waits with a timeout
    (woken as timed out: ``ctx.resumed == "timeout"``). ``acta`` (or a namespace name)
    narrows it to one namespace. Returns how many jobs it moved. Run a ``drain`` next."""
    namespace = acta.namespace if isinstance(acta, Acta) else acta
    async with _connection(session) as (conn, schema), conn.transaction():
        ready = await conn.fetch(admin.make_due_later(schema), namespace)
        woken = await conn.fetch(admin.time_out_waits(schema), namespace)
    return len(ready) + len(woken)
