"""``acta doctor``: the health of acta's tables and of the server around them.

:func:`examine` reads facts (statistics views, catalogue sizes, a few indexed look-ups of
``acta.job`` and ``acta.worker``; never a count over the whole job table) and judges them
with the pure rules below, each finding carrying one line of advice. It changes nothing:
it runs in a read-only transaction that it rolls back, under a short lock and statement
timeout so that a table locked by a migration cannot hang a monitoring probe.

Severities: ``info`` (worth knowing, healthy), ``warning`` (exit 1), ``problem`` (exit 2).
Thresholds are :class:`Thresholds`' fields; docs/observability.md lists each check, its
thresholds and its advice, and the JSON shape of :meth:`Report.to_dict`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from .queries import admin
from .queries import doctor as q
from .settings import SCHEMA_HEAD, SCHEMA_VERSION_TABLE, WORKER_DEAD_BEATS, Timings

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

__all__ = [
    "REPORT_VERSION",
    "Finding",
    "Holder",
    "IndexFacts",
    "Report",
    "ServerFacts",
    "Severity",
    "Skipped",
    "TableFacts",
    "Thresholds",
    "examine",
]

REPORT_VERSION = 1
"""The version of :meth:`Report.to_dict`'s shape; a change that removes or renames a key
bumps it (new keys may appear without a bump)."""

LOCK_TIMEOUT = "5s"
"""How long a statement of the doctor waits for a lock (a size of a table that a migration
holds exclusively) before the doctor fails with a clear error, instead of hanging."""
STATEMENT_TIMEOUT = "30s"


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    PROBLEM = "problem"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.PROBLEM: 2}


@dataclass(frozen=True, slots=True)
class Thresholds:
    """When a fact becomes a finding. The defaults are documented in docs/observability.md."""

    dead_rows_floor: int = 10_000
    """Fewer dead rows than this are never a finding: a small table is cheap to scan."""
    dead_ratio_warning: float = 0.2
    """Dead share of the rows at which autovacuum (scale factor 0.2) should have run."""
    dead_ratio_problem: float = 0.5
    analyze_floor: int = 10_000
    analyze_ratio: float = 0.2
    """Rows changed since the last analyze, as a share of the live rows."""
    vacuumed_recently_seconds: float = 24 * 3600.0
    """With autovacuum off, a table vacuumed by hand within this long is info, not a warning."""
    index_bytes_floor: int = 64 * 1024 * 1024
    index_ratio: float = 2.0
    """Index bytes over heap bytes at which the indexes are likely bloated."""
    frozen_age_problem: int = 1_500_000_000
    """Transaction ids since the table was last frozen; PostgreSQL stops at about 2.1e9."""
    xmin_age_warning: int = 10_000
    """Transactions committed since a session's snapshot whose dead rows vacuum must keep."""
    xmin_age_problem: int = 1_000_000
    transaction_seconds_warning: float = 300.0
    transaction_seconds_problem: float = 3600.0
    idle_in_transaction_warning: float = 60.0
    idle_in_transaction_problem: float = 3600.0
    dead_worker_window_seconds: float = 3600.0
    """A worker marked dead within this long is reported (a crash worth a look)."""


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    """The check's stable id (docs/observability.md lists them)."""
    severity: Severity
    subject: str
    """What it is about: ``acta.job``, ``pid 4242``, ``namespace 'default'``, …"""
    message: str
    advice: str
    """One line: what to do."""
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Skipped:
    check: str
    reason: str


@dataclass(frozen=True, slots=True)
class IndexFacts:
    table_name: str
    name: str
    bytes: int
    estimated_entries: int


@dataclass(frozen=True, slots=True)
class TableFacts:
    name: str
    live_rows: int
    dead_rows: int
    modified_since_analyze: int
    last_vacuum: datetime | None
    last_autovacuum: datetime | None
    last_analyze: datetime | None
    last_autoanalyze: datetime | None
    autovacuum_enabled: bool
    table_bytes: int
    index_bytes: int
    frozen_xid_age: int
    indexes: tuple[IndexFacts, ...] = ()

    @property
    def dead_ratio(self) -> float:
        total = self.live_rows + self.dead_rows
        return self.dead_rows / total if total else 0.0

    @property
    def last_vacuumed(self) -> datetime | None:
        times = [t for t in (self.last_vacuum, self.last_autovacuum) if t is not None]
        return max(times) if times else None

    @property
    def last_analyzed(self) -> datetime | None:
        times = [t for t in (self.last_analyze, self.last_autoanalyze) if t is not None]
        return max(times) if times else None


@dataclass(frozen=True, slots=True)
class ServerFacts:
    autovacuum: bool
    track_counts: bool
    freeze_max_age: int
    server_version: str
    now: datetime


@dataclass(frozen=True, slots=True)
class Holder:
    """Something that holds back vacuum's horizon or a transaction open: a session, a
    prepared transaction or a replication slot."""

    kind: str
    """``session``, ``prepared`` or ``slot``."""
    name: str
    xmin_age: int | None
    """Transactions since its snapshot or transaction id; None when it holds neither."""
    transaction_seconds: float | None = None
    state: str | None = None
    state_seconds: float | None = None
    active: bool = True
    """A slot's: whether a consumer is connected."""
    info: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Report:
    namespace: str
    schema: str
    checked_at: datetime
    schema_revision: str | None
    schema_head: str
    findings: tuple[Finding, ...]
    skipped: tuple[Skipped, ...]
    tables: tuple[TableFacts, ...]
    server: ServerFacts

    @property
    def status(self) -> str:
        """``ok``, ``warning`` or ``problem``: the worst finding (info counts as ok)."""
        worst = max((f.severity.rank for f in self.findings), default=0)
        return {0: "ok", 1: "warning", 2: "problem"}[worst]

    @property
    def exit_code(self) -> int:
        """0 healthy, 1 warnings, 2 problems."""
        return {"ok": 0, "warning": 1, "problem": 2}[self.status]

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of ``acta doctor --json`` (docs/observability.md)."""
        return {
            "version": REPORT_VERSION,
            "status": self.status,
            "exit_code": self.exit_code,
            "namespace": self.namespace,
            "schema": self.schema,
            "checked_at": _iso(self.checked_at),
            "schema_revision": {"current": self.schema_revision, "head": self.schema_head},
            "server": {
                "version": self.server.server_version,
                "autovacuum": self.server.autovacuum,
                "track_counts": self.server.track_counts,
            },
            "findings": [
                {
                    "check": f.check,
                    "severity": f.severity.value,
                    "subject": f.subject,
                    "message": f.message,
                    "advice": f.advice,
                    "details": {k: _plain(v) for k, v in f.details.items()},
                }
                for f in self.findings
            ],
            "skipped": [{"check": s.check, "reason": s.reason} for s in self.skipped],
            "tables": [_table_dict(self.schema, t) for t in self.tables],
        }


def _table_dict(schema: str, t: TableFacts) -> dict[str, Any]:
    out: dict[str, Any] = {"table": f"{schema}.{t.name}"}
    for f in fields(TableFacts):
        if f.name in ("name", "indexes"):
            continue
        out[f.name] = _plain(getattr(t, f.name))
    out["indexes"] = [{"name": i.name, "bytes": i.bytes} for i in t.indexes]
    return out


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _plain(value: Any) -> Any:
    return _iso(value) if isinstance(value, datetime) else value


# ---------------------------------------------------------------- reading the facts


async def examine(
    db: AsyncSession | AsyncConnection,
    *,
    namespace: str,
    schema: str,
    timings: Timings,
    thresholds: Thresholds | None = None,
    namespace_given: bool = True,
) -> Report:
    """Examine acta's tables in ``schema``, namespace ``namespace``, and the server around
    them. ``timings`` (the settings' lease clock) says when an expired lease or a silent
    worker is overdue (the namespace's workers' own registered beat wins when there is
    one). ``namespace_given=False``: the namespace is the default, not one the caller
    named, so its being unknown is said as info rather than a problem. Read-only: the
    transaction is rolled back."""
    from sqlalchemy import text

    t = thresholds or Thresholds()

    async def rows(sql: str, **params: Any) -> list[Any]:
        return list((await db.execute(text(sql), params)).all())

    try:
        await db.execute(text("SET TRANSACTION READ ONLY"))
        await db.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
        await db.execute(text(f"SET LOCAL statement_timeout = '{STATEMENT_TIMEOUT}'"))
        server = ServerFacts(**(await rows(q.server_settings()))[0]._mapping)
        findings: list[Finding] = []
        skipped: list[Skipped] = []

        revision: str | None = None
        if (await rows(admin.version_table_exists(schema, SCHEMA_VERSION_TABLE)))[0][0]:
            found = await rows(admin.schema_revision(schema, SCHEMA_VERSION_TABLE))
            revision = found[0][0] if found else None
        findings += judge_schema(schema, revision, SCHEMA_HEAD, known_revisions())

        indexes = [IndexFacts(**r._mapping) for r in await rows(q.index_sizes(schema))]
        tables = tuple(
            TableFacts(
                **r._mapping,
                indexes=tuple(i for i in indexes if i.table_name == r._mapping["name"]),
            )
            for r in await rows(q.table_health(schema))
        )
        findings += judge_server(server)
        findings += judge_tables(schema, tables, server, t)

        holders = [
            Holder(
                kind="session",
                name=f"pid {r.pid}",
                xmin_age=r.xmin_age,
                transaction_seconds=r.transaction_seconds,
                state=r.state,
                state_seconds=r.state_seconds,
                info={
                    "pid": r.pid,
                    "user": r.user_name,
                    "application_name": r.application_name,
                    "client_addr": r.client_addr,
                    "query": r.query,
                },
            )
            for r in await rows(q.xmin_holders())
        ]
        holders += [
            Holder(
                kind="prepared",
                name=f"prepared transaction {r.gid!r}",
                xmin_age=r.xmin_age,
                transaction_seconds=r.transaction_seconds,
                info={"gid": r.gid, "owner": r.owner},
            )
            for r in await rows(q.prepared_transactions())
        ]
        holders += [
            Holder(
                kind="slot",
                name=f"replication slot {r.slot_name!r}",
                xmin_age=r.xmin_age,
                active=r.active,
                info={"slot_name": r.slot_name, "slot_type": r.slot_type},
            )
            for r in await rows(q.replication_slots())
        ]
        findings += judge_holders(holders, t)

        known = known_revisions()
        readable = {check: readable_at(check, revision, known) for check in CHECK_NEEDS}
        for check, why in readable.items():
            if why is not None:
                skipped.append(Skipped(check, why))
        workers: Any = None
        if readable["dead_workers"] is None:
            workers = (
                await rows(
                    q.namespace_workers(schema),
                    namespace=namespace,
                    dead_beats=float(WORKER_DEAD_BEATS),
                )
            )[0]
        # The namespace's recovery and wake-ups run at its workers' registered beat, not at
        # this process's ACTA_HEARTBEAT_INTERVAL: the longest beat of a live worker, else
        # the beat of the worker heard from last, else (no worker ever) the settings'.
        beat = None if workers is None else (workers.live_beat or workers.last_beat)
        clock = Timings.from_heartbeat(beat) if beat else timings
        live = None if workers is None else int(workers.live)
        if readable["unknown_namespace"] is None:
            names = [r[0] for r in await rows(q.known_namespaces(schema))]
            findings += judge_namespace(namespace, names, namespace_given)
        if readable["expired_leases"] is None:
            lease = (await rows(q.expired_leases(schema), namespace=namespace))[0]
            findings += judge_leases(namespace, lease.rows, lease.oldest_seconds, clock)
        if readable["dead_workers"] is None:
            silent = [
                dict(r._mapping)
                for r in await rows(
                    q.silent_workers(schema),
                    namespace=namespace,
                    dead_beats=float(WORKER_DEAD_BEATS),
                )
            ]
            dead = [
                dict(r._mapping)
                for r in await rows(
                    q.recently_dead_workers(schema),
                    namespace=namespace,
                    window=t.dead_worker_window_seconds,
                )
            ]
            findings += judge_workers(namespace, silent, dead, t)
        if readable["waiting_timeout"] is None:
            late = (await rows(q.late_waits(schema), namespace=namespace))[0]
            findings += judge_waits(namespace, late.rows, late.oldest_seconds, clock)
        if readable["ready_backlog"] is None and live == 0:
            due = (await rows(q.ready_backlog(schema), namespace=namespace))[0]
            findings += judge_backlog(namespace, due.rows, due.oldest_seconds, clock)
        if readable["schedule_no_tick"] is None:
            stored = await rows(q.stored_schedules(schema), namespace=namespace)
            findings += judge_schedules(namespace, [r._mapping for r in stored], server.now)
        if readable["breaker_open"] is None:
            tripped = await rows(q.open_breakers(schema), namespace=namespace)
            findings += judge_breakers(namespace, [r._mapping for r in tripped])
    finally:
        await db.rollback()

    findings.sort(key=lambda f: -f.severity.rank)
    return Report(
        namespace=namespace,
        schema=schema,
        checked_at=server.now,
        schema_revision=revision,
        schema_head=SCHEMA_HEAD,
        findings=tuple(findings),
        skipped=tuple(skipped),
        tables=tables,
        server=server,
    )


CHECK_NEEDS: dict[str, tuple[str, str]] = {
    "unknown_namespace": ("0001", "the namespace, worker and definition tables"),
    "expired_leases": ("0001", "job.lease_expires_at and job_lease_idx"),
    "dead_workers": ("0001", "the worker table's beats"),
    "waiting_timeout": ("0007", "job_wait_deadline_idx, without which it would scan acta.job"),
    "ready_backlog": ("0001", "job_due_idx and the worker table"),
    "schedule_no_tick": ("0008", "the schedule table's missed policies as this package reads them"),
    "breaker_open": ("0016", "the breaker table"),
}
"""The checks that read acta's own tables: the revision each needs (the latest migration
that changed what it reads: columns, tables, or the index that keeps it cheap), and what.
A database behind this package's head skips only those whose revision it lacks."""


def readable_at(check: str, revision: str | None, known: Sequence[str]) -> str | None:
    """Why ``check`` cannot run on tables at ``revision`` (``known``: this package's
    revisions, newest first), or None when it can."""
    needs, what = CHECK_NEEDS[check]
    if revision is None:
        return "acta's tables are not migrated"
    if revision not in known:
        return f"acta's tables are at revision {revision}, which this package does not know"
    order = list(reversed(known))
    if order.index(revision) < order.index(needs):
        return f"needs revision {needs} ({what}); acta's tables are at {revision}"
    return None


def known_revisions() -> tuple[str, ...]:
    """Every revision of this package's migrations (Alembic's script directory)."""
    from alembic.script import ScriptDirectory

    from .migrate import alembic_config

    script = ScriptDirectory.from_config(alembic_config())
    return tuple(r.revision for r in script.walk_revisions())


# ---------------------------------------------------------------- the rules (pure)


def judge_schema(
    schema: str, revision: str | None, head: str, known: Iterable[str]
) -> list[Finding]:
    subject = f"schema {schema!r}"
    details = {"current": revision, "head": head}
    if revision == head:
        return []
    if revision is None:
        return [
            Finding(
                "schema_revision",
                Severity.PROBLEM,
                subject,
                f"acta's tables are not migrated in schema {schema!r} (no revision)",
                "run `acta db upgrade` (or `alembic upgrade head`) before starting workers",
                details,
            )
        ]
    if revision in set(known):
        return [
            Finding(
                "schema_revision",
                Severity.PROBLEM,
                subject,
                f"acta's tables are at revision {revision}, behind this package's {head}: "
                "workers of this version refuse to start",
                "run `acta db upgrade` (or `alembic upgrade head`)",
                details,
            )
        ]
    return [
        Finding(
            "schema_revision",
            Severity.PROBLEM,
            subject,
            f"acta's tables are at revision {revision}, which this package (head {head}) "
            "does not know: a newer acta-sqla migrated them",
            "upgrade acta-sqla where this runs (workers of this version refuse the schema)",
            details,
        )
    ]


def judge_server(server: ServerFacts) -> list[Finding]:
    if server.track_counts:
        return []
    return [
        Finding(
            "track_counts",
            Severity.PROBLEM,
            "server",
            "track_counts is off: PostgreSQL collects no row statistics, so autovacuum "
            "never runs and dead rows go unseen",
            "set track_counts = on in postgresql.conf and reload",
        )
    ]


def judge_tables(
    schema: str, tables: Sequence[TableFacts], server: ServerFacts, t: Thresholds
) -> list[Finding]:
    out: list[Finding] = []
    for table in tables:
        name = f"{schema}.{table.name}"
        piling = table.dead_rows >= t.dead_rows_floor and table.dead_ratio >= t.dead_ratio_warning
        vacuumed = table.last_vacuumed
        vacuumed_ago = (server.now - vacuumed).total_seconds() if vacuumed else None
        stats = {
            "live_rows": table.live_rows,
            "dead_rows": table.dead_rows,
            "dead_ratio": round(table.dead_ratio, 3),
            "last_vacuum": vacuumed,
            "last_analyze": table.last_analyzed,
        }
        if piling:
            severity = (
                Severity.PROBLEM if table.dead_ratio >= t.dead_ratio_problem else Severity.WARNING
            )
            out.append(
                Finding(
                    "dead_tuples",
                    severity,
                    name,
                    f"{table.dead_rows} dead rows, {table.dead_ratio:.0%} of the table; "
                    f"last vacuum {_ago(vacuumed_ago)}",
                    f"run VACUUM (ANALYZE) {name}; if autovacuum is on, look for what holds "
                    "vacuum back (xmin_horizon findings) or make it more aggressive for "
                    "this table (autovacuum_vacuum_scale_factor)",
                    stats,
                )
            )
        off_where = " and ".join(
            w
            for w in (
                "server-wide (autovacuum = off)" if not server.autovacuum else "",
                "for this table (autovacuum_enabled = false)"
                if not table.autovacuum_enabled
                else "",
            )
            if w
        )
        if off_where:
            turn_on = " and ".join(
                a
                for a in (
                    "set autovacuum = on in postgresql.conf and reload"
                    if not server.autovacuum
                    else "",
                    f"ALTER TABLE {name} RESET (autovacuum_enabled)"
                    if not table.autovacuum_enabled
                    else "",
                )
                if a
            )
            if piling:
                severity, advice = Severity.PROBLEM, f"{turn_on}, then VACUUM (ANALYZE) {name}"
            elif vacuumed_ago is not None and vacuumed_ago <= t.vacuumed_recently_seconds:
                severity = Severity.INFO
                advice = f"keep the scheduled VACUUM of {name} running, or {turn_on}"
            else:
                severity = Severity.WARNING
                advice = f"{turn_on} (or VACUUM {name} on a schedule)"
            out.append(
                Finding(
                    "autovacuum",
                    severity,
                    name,
                    f"autovacuum is off {off_where}; last vacuum {_ago(vacuumed_ago)}",
                    advice,
                    {
                        **stats,
                        "server_autovacuum": server.autovacuum,
                        "table_autovacuum_enabled": table.autovacuum_enabled,
                    },
                )
            )
        changed = table.modified_since_analyze
        if changed >= t.analyze_floor and changed >= t.analyze_ratio * max(table.live_rows, 1):
            analyzed = table.last_analyzed
            out.append(
                Finding(
                    "analyze",
                    Severity.WARNING,
                    name,
                    f"{changed} rows changed since the last analyze "
                    f"({_ago((server.now - analyzed).total_seconds() if analyzed else None)}): "
                    "the planner's statistics are stale",
                    f"run ANALYZE {name}",
                    {"modified_since_analyze": changed, "live_rows": table.live_rows},
                )
            )
        if table.index_bytes >= t.index_bytes_floor and table.index_bytes >= t.index_ratio * max(
            table.table_bytes, 1
        ):
            biggest = max(table.indexes, key=lambda i: i.bytes, default=None)
            out.append(
                Finding(
                    "index_size",
                    Severity.WARNING,
                    name,
                    f"its indexes take {_size(table.index_bytes)}, "
                    f"{table.index_bytes / max(table.table_bytes, 1):.1f}x the table's "
                    f"{_size(table.table_bytes)}: likely bloated"
                    + (f" (largest: {biggest.name}, {_size(biggest.bytes)})" if biggest else ""),
                    f"REINDEX TABLE CONCURRENTLY {name} (takes no lock that stops the workers)",
                    {"table_bytes": table.table_bytes, "index_bytes": table.index_bytes},
                )
            )
        warn_age = 2 * server.freeze_max_age
        if table.frozen_xid_age >= min(warn_age, t.frozen_age_problem):
            severity = (
                Severity.PROBLEM
                if table.frozen_xid_age >= t.frozen_age_problem
                else Severity.WARNING
            )
            out.append(
                Finding(
                    "frozen_xid_age",
                    severity,
                    name,
                    f"{table.frozen_xid_age} transactions since it was last frozen "
                    "(PostgreSQL stops writes at about 2.1 billion)",
                    f"run VACUUM (FREEZE) {name} and clear what holds the xmin horizon",
                    {"frozen_xid_age": table.frozen_xid_age},
                )
            )
    return out


def judge_holders(holders: Sequence[Holder], t: Thresholds) -> list[Finding]:
    out: list[Finding] = []
    for h in holders:
        severity: Severity | None = None

        def at_least(s: Severity) -> None:
            nonlocal severity
            if severity is None or s.rank > severity.rank:
                severity = s

        age = h.xmin_age
        if age is not None:
            if age >= t.xmin_age_problem:
                at_least(Severity.PROBLEM)
            elif age >= t.xmin_age_warning:
                at_least(Severity.WARNING)
            seconds = h.transaction_seconds
            if seconds is not None and seconds >= t.transaction_seconds_problem:
                at_least(Severity.PROBLEM)
            elif seconds is not None and seconds >= t.transaction_seconds_warning:
                at_least(Severity.WARNING)
            if h.kind == "slot" and not h.active:
                at_least(Severity.PROBLEM)
        idle = (h.state or "").startswith("idle in transaction")
        if idle and h.state_seconds is not None:
            if h.state_seconds >= t.idle_in_transaction_problem:
                at_least(Severity.PROBLEM)
            elif h.state_seconds >= t.idle_in_transaction_warning:
                at_least(Severity.WARNING)
        if severity is None:
            continue
        what = {
            "session": f"{h.state or 'a session'}"
            + (f" for {_seconds(h.state_seconds)}" if idle and h.state_seconds else "")
            + (
                f", transaction open {_seconds(h.transaction_seconds)}"
                if h.transaction_seconds is not None
                else ""
            ),
            "prepared": f"prepared {_seconds(h.transaction_seconds)} ago",
            "slot": "active" if h.active else "inactive (no consumer connected)",
        }[h.kind]
        holds = (
            f"; holds back vacuum: {age} transactions since its snapshot" if age is not None else ""
        )
        advice = {
            "session": "end it (COMMIT/ROLLBACK in the application, or "
            f"SELECT pg_terminate_backend({h.info.get('pid')})); set "
            "idle_in_transaction_session_timeout so a forgotten transaction ends itself",
            "prepared": f"COMMIT PREPARED or ROLLBACK PREPARED {h.info.get('gid')!r}",
            "slot": "drop the slot if its consumer is gone "
            f"(SELECT pg_drop_replication_slot({h.info.get('slot_name')!r})), or bring the "
            "consumer back",
        }[h.kind]
        out.append(
            Finding(
                "xmin_horizon" if age is not None else "idle_in_transaction",
                severity,
                h.name,
                f"{what}{holds}",
                advice,
                {
                    "kind": h.kind,
                    "xmin_age": age,
                    "transaction_seconds": h.transaction_seconds,
                    "state": h.state,
                    "state_seconds": h.state_seconds,
                    **h.info,
                },
            )
        )
    return out


def judge_namespace(namespace: str, known: Sequence[str], given: bool = True) -> list[Finding]:
    """A namespace nothing in the database names (no job, no worker, no definition) while
    others exist: a mistyped --namespace (a monitoring check that examines nothing) is a
    problem; the default namespace, not named by the caller, is info (the database's
    namespaces are others)."""
    if namespace in known or not known:
        return []  # nothing anywhere: a fresh database, not a mistake
    shown = ", ".join(repr(n) for n in known[:10]) + (", ..." if len(known) > 10 else "")
    return [
        Finding(
            "unknown_namespace",
            Severity.PROBLEM if given else Severity.INFO,
            f"namespace {namespace!r}",
            f"namespace {namespace!r} has no jobs, no workers and no definitions; known: {shown}",
            "check the --namespace (or ACTA_NAMESPACE) this doctor runs with: a mistyped "
            "one examines nothing"
            if given
            else "pass --namespace (or set ACTA_NAMESPACE) to examine one of those",
            {"known": list(known)},
        )
    ]


def judge_backlog(
    namespace: str, rows: int, oldest_seconds: float | None, timings: Timings
) -> list[Finding]:
    """Jobs ready and due in a namespace with no live worker (only asked then): nobody
    claims them. Within two beats of the oldest's due time a worker may be restarting (a
    deploy): a warning; after, a problem."""
    if not rows or oldest_seconds is None:
        return []
    grace = 2 * timings.heartbeat
    late = oldest_seconds > grace
    count = f"{rows}+" if rows >= q.FINDINGS_CAP else str(rows)
    return [
        Finding(
            "ready_backlog",
            Severity.PROBLEM if late else Severity.WARNING,
            f"namespace {namespace!r}",
            f"{count} jobs ready and due (the oldest for {_seconds(oldest_seconds)}) and no "
            "live worker in the namespace",
            f"start an `acta worker` for namespace {namespace!r} (with --app naming the "
            "module that registers its handlers)",
            {"rows": rows, "oldest_seconds": oldest_seconds, "problem_after": grace},
        )
    ]


def judge_leases(
    namespace: str, rows: int, oldest_seconds: float | None, timings: Timings
) -> list[Finding]:
    if not rows or oldest_seconds is None:
        return []
    # Recovery takes the namespace's pass once per recovery interval, from a live worker's
    # heartbeat: a lease expired for longer than that (and a beat of slack) was missed.
    overdue = timings.recovery_interval + timings.heartbeat
    count = f"{rows}+" if rows >= q.FINDINGS_CAP else str(rows)
    late = oldest_seconds > overdue
    return [
        Finding(
            "expired_leases",
            Severity.PROBLEM if late else Severity.WARNING,
            f"namespace {namespace!r}",
            f"{count} jobs still 'executing' past their lease (the oldest expired "
            f"{_seconds(oldest_seconds)} ago)",
            "start an `acta worker` in this namespace: recovery (run by a live worker's "
            "heartbeat) returns them to ready"
            if late
            else f"none needed yet: recovery returns them within {_seconds(overdue)}; "
            "a worker lost them (see dead_workers)",
            {"rows": rows, "oldest_seconds": oldest_seconds, "overdue_after": overdue},
        )
    ]


def judge_waits(
    namespace: str, rows: int, oldest_seconds: float | None, timings: Timings
) -> list[Finding]:
    """Signal waits past their deadline: every live worker's heartbeat wakes them within
    one beat, so one late by more than two beats means no worker is beating."""
    if not rows or oldest_seconds is None:
        return []
    overdue = 2 * timings.heartbeat
    if oldest_seconds <= overdue:
        return []  # the next beat wakes them
    count = f"{rows}+" if rows >= q.FINDINGS_CAP else str(rows)
    return [
        Finding(
            "waiting_timeout",
            Severity.PROBLEM,
            f"namespace {namespace!r}",
            f"{count} jobs still waiting for a signal past their timeout (the oldest by "
            f"{_seconds(oldest_seconds)})",
            "start an `acta worker` in this namespace: its heartbeat wakes timed-out waits",
            {"rows": rows, "oldest_seconds": oldest_seconds, "overdue_after": overdue},
        )
    ]


def judge_schedules(
    namespace: str, schedules: Sequence[Mapping[str, Any]], now: datetime
) -> list[Finding]:
    """Stored schedules whose next tick cannot be computed (a cron that never matches, such
    as Feb 30, or a definition this version cannot read, left by another version of the
    code): each never fires, while every other schedule does."""
    from .schedules import tick_problem

    out: list[Finding] = []
    for sc in schedules:
        problem = tick_problem(sc["name"], sc["cron"], sc["timezone"], sc["missed"], now)
        if problem is None:
            continue
        out.append(
            Finding(
                "schedule_no_tick",
                Severity.PROBLEM,
                f"schedule {sc['name']!r}",
                f"schedule {sc['name']!r} in namespace {namespace!r} never fires: {problem}",
                "fix its cron where the code declares it (`acta.schedule(...)`) and start a "
                "worker of that code, which stores it again; or remove it from the code",
                dict(sc),
            )
        )
    return out


def judge_breakers(namespace: str, breakers: Sequence[Mapping[str, Any]]) -> list[Finding]:
    """Circuit breakers not closed (docs/breakers.md): their kind's jobs are held, uncharged,
    because its recent attempts failed; a warning each, saying when it probes next."""
    out: list[Finding] = []
    for b in breakers:
        what = b["kind"] if not b["key"] else f"{b['kind']} [{b['key']}]"
        until = b["until_seconds"]
        if b["state"] == "open" and until is not None and until > 0:
            when = f"it lets a probe through in {_seconds(until)}"
        else:
            when = "it is half-open: the next probe's outcome closes or reopens it"
        out.append(
            Finding(
                "breaker_open",
                Severity.WARNING,
                f"breaker {what!r}",
                f"the circuit breaker of {what!r} in namespace {namespace!r} is "
                f"{b['state'].replace('_', '-')} for {_seconds(b['since_seconds'])}: its jobs "
                f"wait, uncharged; {when}",
                "look at the kind's last errors (the dashboard's Failures page, `acta jobs ls "
                "--status failed`) and at the dependency they call; once it is back the "
                "breaker closes on its own, or close it by hand: `acta definitions "
                "close-breaker KIND` or the dashboard's Kinds page",
                dict(b),
            )
        )
    return out


def judge_workers(
    namespace: str,
    silent: Sequence[Mapping[str, Any]],
    dead: Sequence[Mapping[str, Any]],
    t: Thresholds,
) -> list[Finding]:
    out: list[Finding] = []
    for w in silent:
        # Recovery marks a silent worker dead within one recovery interval (4 of the
        # reader's beats) after its 7 beats; twice the 7 beats means nobody is recovering.
        late = w["silent_seconds"] >= 2 * WORKER_DEAD_BEATS * w["heartbeat_seconds"]
        out.append(
            Finding(
                "dead_workers",
                Severity.PROBLEM if late else Severity.WARNING,
                f"worker #{w['id']}",
                f"worker #{w['id']} ({w['hostname']}:{w['pid']}) in namespace {namespace!r} "
                f"is marked running but silent for {_seconds(w['silent_seconds'])} "
                f"(dead after {WORKER_DEAD_BEATS} beats of {w['heartbeat_seconds']:g} s)",
                "no live worker is running recovery in this namespace: start `acta worker`"
                if late
                else "recovery marks it dead and returns its jobs on its next pass; check "
                "its host (killed, out of memory, cut off from the database)",
                dict(w),
            )
        )
    for w in dead:
        out.append(
            Finding(
                "dead_workers",
                Severity.WARNING,
                f"worker #{w['id']}",
                f"worker #{w['id']} ({w['hostname']}:{w['pid']}) in namespace {namespace!r} "
                f"died {_seconds(w['dead_seconds'])} ago (marked dead by recovery; its jobs "
                "came back)",
                "look at that host's logs: killed (SIGKILL, out of memory) or cut off from "
                "the database",
                dict(w),
            )
        )
    return out


# ---------------------------------------------------------------- words


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 120:
        return f"{value:.0f} s"
    if value < 7200:
        return f"{value / 60:.0f} min"
    if value < 172800:
        return f"{value / 3600:.0f} h"
    return f"{value / 86400:.0f} days"


def _ago(value: float | None) -> str:
    return "never" if value is None else f"{_seconds(value)} ago"


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TB"


def describe(report: Report, where: str) -> list[str]:
    """The report as lines for a person (``acta doctor`` without ``--json``)."""
    lines = [f"acta doctor: {where}, namespace {report.namespace!r}"]
    revision = report.schema_revision or "none"
    head = " (head)" if report.schema_revision == report.schema_head else ""
    lines.append(f"schema revision {revision}{head}; PostgreSQL {report.server.server_version}")
    now = report.checked_at
    autovacuum = report.server.autovacuum
    for table in report.tables:
        vac = table.last_vacuumed
        ana = table.last_analyzed
        lines.append(
            f"  {report.schema}.{table.name:<10} live {table.live_rows}  dead {table.dead_rows}"
            f"  heap {_size(table.table_bytes)}  indexes {_size(table.index_bytes)}"
            f"  vacuumed {_ago((now - vac).total_seconds() if vac else None)}"
            f"  analyzed {_ago((now - ana).total_seconds() if ana else None)}"
            f"  autovacuum {'on' if table.autovacuum_enabled and autovacuum else 'off'}"
        )
    lines.append("")
    for f in report.findings:
        label = f.severity.value.upper() if f.severity.rank else f.severity.value
        lines.append(f"{label:<8} {f.check} {f.subject}: {f.message}")
        lines.append(f"{'':<8} advice: {f.advice}")
    for s in report.skipped:
        lines.append(f"{'skipped':<8} {s.check}: {s.reason}")
    counts = {s: sum(f.severity is s for f in report.findings) for s in Severity}
    lines.append(
        f"{report.status}: {counts[Severity.PROBLEM]} problems, "
        f"{counts[Severity.WARNING]} warnings, {counts[Severity.INFO]} info "
        f"(exit {report.exit_code})"
    )
    return lines
