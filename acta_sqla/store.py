"""The worker's one door to PostgreSQL: a connection per role (``connections.py``: driver
errors turned into ``StoreUnavailable`` and ``StatementRefused``), the statements of
``queries.catalogue`` run on them, rows turned into frozen values, so that no stage of the
worker needs to know asyncpg's exceptions. asyncpg only: a worker never loads SQLAlchemy.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from .connections import RoleConnection, app_name, connection_lost
from .database import asyncpg_dsn
from .errors import ConfigurationError, StatementRefused, StoreUnavailable, brief
from .queries import complete
from .queries.catalogue import WorkerSQL
from .settings import Timings
from .store_lifecycle import Definitions, LifecycleStatements
from .store_recovery import RecoveryStatements
from .store_schedules import Declared, ScheduleStatements
from .values import (
    Claim,
    ClaimedJob,
    Completion,
    HeartbeatReport,
)

__all__ = [
    "Declared",
    "Definitions",
    "RoleConnection",
    "StatementRefused",
    "StoreUnavailable",
    "WorkerStore",
    "app_name",
    "brief",
    "connection_lost",
]


MAX_CHANNEL_BYTES = 63
"""PostgreSQL's longest channel name (NAMEDATALEN - 1); a worker's is ``<schema>.<namespace>``
(the namespace rule leaves room for the default schema, ``acta``)."""


class WorkerStore(LifecycleStatements, ScheduleStatements, RecoveryStatements):
    """What a worker's stages call. Each stage has its own connection, so a busy claim never
    delays a completion write or a heartbeat. The connections are this class's; the
    statements of start-up and stop (``store_lifecycle.py``), of the schedules
    (``store_schedules.py``) and of the recovery pass (``store_recovery.py``) are its
    parts, run on its admin connection."""

    def __init__(self, url: str, schema: str, namespace: str, timings: Timings) -> None:
        channel = f"{schema}.{namespace}"
        if len(channel.encode()) > MAX_CHANNEL_BYTES:
            # Every insert of a job notifies this channel: PostgreSQL would refuse each
            # enqueue at its commit ("channel name too long"), and the LISTEN hear nothing.
            raise ConfigurationError(
                f"schema {schema!r} and namespace {namespace!r} name the NOTIFY channel "
                f"{channel!r}, {len(channel.encode())} bytes; PostgreSQL takes at most "
                f"{MAX_CHANNEL_BYTES}: shorten the namespace or the schema"
            )
        dsn = asyncpg_dsn(url)
        self.sql = WorkerSQL(schema)
        self.namespace = namespace
        self.timings = timings
        self.worker_id: int | None = None
        self.measure_depth = False
        """Take the namespace's queue-depth turn in the heartbeat (a metrics SDK is set)."""
        self.telemetry = True
        """Claim each job's trace context and wait (an OpenTelemetry SDK reads them). The
        worker sets it False when no SDK is configured: the hot claim is then
        ``claim_plain_lean``."""
        self.paused: list[str] = []
        """Kinds an operator paused (the last definitions loaded): the claim skips them."""
        self.clock_offset = 0.0
        """The database's clock minus this host's, in seconds (:meth:`db_now`)."""
        self.wall: Callable[[], float] = time.time
        """This host's clock (a test skews it)."""
        # The claim commits durably (the server's synchronous_commit) before any handler
        # starts: an asynchronous commit saved a WAL flush per claim, but a database crash
        # could then lose a claim whose handler already ran, and another worker would run
        # the same job at the same time (tests/faults/test_lost_claim.py).
        # The claim and the completion run thousands of times with the same plan: plan
        # them once (generic plans) instead of at every call. Both look their rows up by
        # primary key whatever the plan; tests/db/test_worker_sql.py checks the plans.
        # Once means with the statistics of the worker's start, kept until the next
        # ANALYZE: a generic plan made while the table held a few rows (a worker started
        # on an empty queue, a parent about to spawn 10,000 children) read the whole
        # table and sorted it at every claim, and hash-joined it at every completion
        # (issue 30: 8-15 ms per claim over 10,000 fresh rows instead of ~1). No sequential
        # scan on these two connections: their plans take the claim index in order and
        # the primary key whatever the statistics said (tests/db/test_fresh_plans.py).
        generic = {"plan_cache_mode": "force_generic_plan", "enable_seqscan": "off"}
        self.claim_conn = RoleConnection(dsn, "claim", timeout=30.0, settings=generic)
        self.complete_conn = RoleConnection(dsn, "complete", timeout=60.0, settings=generic)
        self.heartbeat_conn = RoleConnection(dsn, "heartbeat", timeout=max(10.0, timings.heartbeat))
        self.admin_conn = RoleConnection(dsn, "admin", timeout=30.0)
        self.lock_conn = RoleConnection(dsn, "lock", timeout=30.0)
        # Admission of keyed jobs (worker/admission.py): its own connection, so a batch
        # waiting on a busy key's lock never delays a named lock or a claim.
        self.admission_conn = RoleConnection(dsn, "admission", timeout=30.0)
        self.dsn = dsn
        self.channel = f"{schema}.{namespace}"

    def twin(self, role: str = "lifeline") -> WorkerStore:
        """A second store of this worker for another thread's event loop (the lifeline):
        the same worker id and statements, connections of its own (opened on first use,
        named ``acta:<role>:<id>``). asyncpg connections and locks belong to one loop."""
        twin = WorkerStore(self.dsn, self.sql.schema, self.namespace, self.timings)
        twin.sql, twin.worker_id = self.sql, self.worker_id
        for rc in twin._roles():
            rc.role = role if rc is twin.heartbeat_conn else f"{role}-{rc.role}"
        if self.worker_id is not None:
            twin._name(self.worker_id)
        return twin

    def _name(self, worker_id: int) -> None:
        for rc in self._roles():
            rc.application_name = app_name(rc.role, worker_id)

    async def close(self) -> None:
        for rc in self._roles():
            await rc.close()

    def _roles(self) -> tuple[RoleConnection, ...]:
        return (
            self.claim_conn,
            self.complete_conn,
            self.heartbeat_conn,
            self.admin_conn,
            self.lock_conn,
            self.admission_conn,
        )

    # -------------------------------------------------------------- connections

    def preconnect(self) -> asyncio.Future[Any]:
        """Start connecting the claim, complete and heartbeat roles now, in the background,
        while start-up runs on the admin connection (a failure only means the role
        connects on first use)."""
        return asyncio.gather(
            self.claim_conn.get(),
            self.complete_conn.get(),
            self.heartbeat_conn.get(),
            return_exceptions=True,
        )

    async def open_stage_connections(self) -> None:
        """Name the stage connections after the worker, and prepare the hot statements by
        running them on nothing (a claim of 0 rows, an empty batch)."""

        async def ready(rc: RoleConnection, sql: str | None = None, *args: Any) -> None:
            await rc.get()
            await rc.rename()
            if sql is not None:
                await rc.fetch(sql, *args)

        lease, ns = self.timings.lease, self.namespace
        await asyncio.gather(
            # alone=False: the prepared claim never takes a suspect (nor anything: limit 0).
            ready(self.claim_conn, self.sql.claim_jobs, ns, 0, self.worker_id, lease, False),
            ready(self.claim_conn, self._claim_plain_sql, ns, 0, self.worker_id, lease),
            ready(
                self.complete_conn,
                self.sql.complete_plain,
                "[]",
                self.worker_id,
                complete.NO_FEATURES,
            ),
            ready(self.heartbeat_conn),
        )

    # -------------------------------------------------------------- the hot path

    async def claim(self, limit: int, alone: bool) -> Claim:
        """Up to ``limit`` due rows; ``alone``: this worker has nothing in flight, so it may
        take a due suspect (and then only that one). See ``queries.claim.claim_jobs``."""
        args: tuple[Any, ...] = (self.namespace, limit, self.worker_id, self.timings.lease, alone)
        if self.paused:
            rows = await self.claim_conn.fetch(self.sql.claim_jobs_unpaused, *args, self.paused)
        else:
            rows = await self.claim_conn.fetch(self.sql.claim_jobs, *args)
        make = ClaimedJob._make
        # The last column is the statement's suspect_due; a row of NULLs means no job.
        jobs = [make(r[:-1]) for r in rows if r[0] is not None]
        return Claim(jobs, bool(rows[0][-1]) if rows else False)

    async def claim_plain(self, limit: int) -> list[ClaimedJob]:
        """Up to ``limit`` due rows that are not suspects, without asking whether a suspect
        is due (the hot claim; see ``queries.claim.claim_plain``)."""
        if self.paused:
            rows = await self.claim_conn.fetch(
                self.sql.claim_plain_unpaused,
                self.namespace,
                limit,
                self.worker_id,
                self.timings.lease,
                self.paused,
            )
        else:
            rows = await self.claim_conn.fetch(
                self._claim_plain_sql, self.namespace, limit, self.worker_id, self.timings.lease
            )
        make = ClaimedJob._make
        return [make(r) for r in rows]

    @property
    def _claim_plain_sql(self) -> str:
        return self.sql.claim_plain if self.telemetry else self.sql.claim_plain_lean

    async def claim_jobs(self, limit: int, alone: bool = False) -> list[ClaimedJob]:
        """The rows of :meth:`claim` (tests and tools that only want the jobs)."""
        return (await self.claim(limit, alone)).jobs

    async def next_due_in(self) -> float | None:
        if self.paused:
            rows = await self.claim_conn.fetch(
                self.sql.next_due_in_unpaused, self.namespace, self.paused
            )
        else:
            rows = await self.claim_conn.fetch(self.sql.next_due_in, self.namespace)
        return rows[0][0] if rows else None

    async def bounced_due_in(self, kinds: Sequence[str]) -> float | None:
        """Seconds until the earliest job of ``kinds`` that admission bounced is due again
        (negative: due now), None when none waits (``queries.claim.bounced_due_in``)."""
        active = [k for k in kinds if k not in self.paused]
        if not active:
            return None
        rows = await self.admin_conn.fetch(self.sql.bounced_due_in, self.namespace, active)
        return rows[0][0] if rows else None

    async def complete_executions(self, batch: Sequence[Completion]) -> set[int]:
        """Write every completion of ``batch`` in one round trip; the ids of the jobs whose
        write applied (the others' leases were lost, or an earlier try landed)."""
        core, features = complete.encode(batch)
        # A batch with no feature input runs the statement without the feature parts.
        plain = features == complete.NO_FEATURES
        sql = self.sql.complete_plain if plain else self.sql.complete_executions
        rows = await self.complete_conn.fetch(sql, core, self.worker_id, features)
        return {r[0] for r in rows}

    # -------------------------------------------------------------- heartbeat, locks, admission

    async def heartbeat(
        self,
        held: Sequence[tuple[int, int, bool]],
        locks: Sequence[tuple[str, int, int]] = (),
    ) -> HeartbeatReport:
        """ONE call: renew ``held`` (job, execution, started) triples and the ``locks``
        (name, job, execution) they hold, refresh the worker row, take the recovery pass
        if due, and read the definitions version."""
        timings = self.timings
        [r] = await self.heartbeat_conn.fetch(
            self.sql.heartbeat,
            self.namespace,
            [h[0] for h in held],
            [h[1] for h in held],
            [h[2] for h in held],
            timings.lease,
            self.worker_id,
            timings.recovery_interval,
            [lk[0] for lk in locks],
            [lk[1] for lk in locks],
            [lk[2] for lk in locks],
            # Recovery intervals are counted in beats, so the statement can move the pass
            # on by the shortest interval of any running worker of the namespace.
            timings.recovery_interval / timings.heartbeat,
        )
        renewed = frozenset(zip(r["renewed_ids"], r["renewed_execution_ids"], strict=True))
        present = frozenset(zip(r["present_ids"], r["present_execution_ids"], strict=True))
        return HeartbeatReport(
            renewed=renewed,
            busy=present - renewed,
            cancel_requested=frozenset(r["cancel_requested_ids"]),
            definitions_version=int(r["definitions_version"] or 0),
            recovery_due=bool(r["recovery_due"]),
            locks_renewed=frozenset(
                zip(r["lock_names"], r["lock_job_ids"], r["lock_execution_ids"], strict=True)
            ),
            depth=await self._measure_depth() if self.measure_depth else None,
        )

    async def _measure_depth(self) -> list[tuple[Any, ...]] | None:
        """The namespace's depth if this beat takes the interval's turn (else None)."""
        rows = await self.heartbeat_conn.fetch(
            self.sql.measure_depth, self.namespace, self.timings.heartbeat
        )
        return [tuple(x) for x in json.loads(rows[0][0])] if rows else None

    async def take_lock(self, name: str, job_id: int, execution_id: int) -> bool:
        rows = await self.lock_conn.fetch(
            self.sql.take_lock,
            self.namespace,
            name,
            job_id,
            execution_id,
            self.worker_id,
            self.timings.lease,
        )
        return bool(rows)

    async def admit(self, requests: Sequence[Sequence[Any]]) -> list[tuple[int, str, float]]:
        """ONE call: the admission verdict of every request (``worker/admission.py``)."""
        rows = await self.admission_conn.fetch(
            self.sql.admit, self.namespace, json.dumps(requests), self.worker_id
        )
        return [(r[0], r[1], r[2]) for r in rows]

    async def breaker_record(
        self, outcomes: Sequence[Sequence[Any]]
    ) -> list[tuple[str, str, str, float | None]]:
        """ONE call: count breaker kinds' outcomes (``worker/breakers.py``); the transitions
        made (kind, key, new state, seconds it stays open)."""
        rows = await self.admission_conn.fetch(
            self.sql.breaker_record, self.namespace, json.dumps(outcomes)
        )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    async def children_of(self, job_id: int) -> str | None:
        """``ctx.children`` of a run that follows a wait: the job's children as JSON."""
        rows = await self.admission_conn.fetch(self.sql.children_of, job_id)
        return rows[0][0] if rows else None

    async def lanes_held_above(self, parent_id: int) -> list[tuple[str, str]]:
        """The (namespace, lane) pairs held by the waiting chain from ``parent_id`` up
        (``queries.waits.lanes_held_above``)."""
        rows = await self.admission_conn.fetch(self.sql.lanes_held_above, parent_id)
        return [(r[0], r[1]) for r in rows]

    async def release_lock(self, name: str, job_id: int, execution_id: int) -> None:
        await self.lock_conn.execute(
            self.sql.release_lock, self.namespace, name, job_id, execution_id
        )
