"""The worker's start-up and stop statements (``worker/startup.py`` and
``worker/shutdown.py`` call them): the schema checked, the worker row registered and
stopped, the definitions stored and loaded. A part of ``store.WorkerStore``, run on its
admin connection.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from .connections import RoleConnection, app_name
from .errors import StatementRefused
from .queries.catalogue import WorkerSQL
from .settings import SCHEMA_HEAD, Timings, schema_behind


@dataclass(frozen=True, slots=True)
class Definitions:
    version: int
    declared: dict[str, dict[str, Any]]
    overrides: dict[str, dict[str, Any]]


class Admin(Protocol):
    """What the start-up and stop statements use of the store."""

    admin_conn: RoleConnection
    sql: WorkerSQL
    namespace: str
    timings: Timings
    worker_id: int | None

    def _name(self, worker_id: int) -> None: ...


class LifecycleStatements:
    """The worker row, the schema's revision and the definitions."""

    worker_id: int | None  # the store's (set by register_worker)

    async def check_schema(self: Admin) -> None:
        """Fail with what to do when acta's tables are missing or behind this code."""
        try:
            found = await self.admin_conn.fetch(self.sql.schema_revision)
            current = found[0][0] if found else None
        except StatementRefused as exc:
            # 42P01 undefined_table, 3F000 invalid_schema_name: never migrated.
            if exc.sqlstate not in ("42P01", "3F000"):
                raise
            current = None
        if current != SCHEMA_HEAD:
            raise schema_behind(self.sql.schema, current)

    async def register_worker(
        self: Admin, hostname: str, pid: int, executors: int, kinds: list[str], version: str
    ) -> int:
        rows = await self.admin_conn.fetch(
            self.sql.register_worker,
            self.namespace,
            hostname,
            pid,
            executors,
            json.dumps(kinds),
            version,
            self.timings.heartbeat,
            app_name(self.admin_conn.role, ""),  # the statement appends the new id
            self.timings.recovery_interval,
        )
        self.worker_id = worker_id = int(rows[0]["id"])
        self._name(worker_id)
        self.admin_conn._connected_as = rows[0]["application_name"]  # renamed in place
        return worker_id

    async def stop_worker(self: Admin, worker_id: int | None = None) -> None:
        """Mark this worker's row (or an earlier row of this process) stopped."""
        worker_id = self.worker_id if worker_id is None else worker_id
        if worker_id is not None:
            await self.admin_conn.execute(self.sql.stop_worker, worker_id)

    async def store_definitions(self: Admin, declared: dict[str, dict[str, Any]]) -> None:
        kinds = sorted(declared)
        await self.admin_conn.fetch(
            self.sql.store_definitions,
            self.namespace,
            kinds,
            [json.dumps(declared[k], sort_keys=True) for k in kinds],
        )

    async def load_definitions(self: Admin) -> Definitions:
        rows = await self.admin_conn.fetch(self.sql.load_definitions, self.namespace)
        version = int(rows[0]["definitions_version"]) if rows else 0
        declared: dict[str, dict[str, Any]] = {}
        overrides: dict[str, dict[str, Any]] = {}
        for r in rows:
            if r["kind"] is not None:
                declared[r["kind"]] = json.loads(r["declared"])
                overrides[r["kind"]] = json.loads(r["overrides"])
        return Definitions(version, declared, overrides)
