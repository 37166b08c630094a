"""``acta_sqla.doctor.examine`` against a real PostgreSQL, each finding produced by the
real condition: dead rows in a table whose autovacuum is off, an idle transaction holding
vacuum's horizon, a row executing past its lease, dead workers, a schema behind (or ahead
of) the package's head.

The helpers at the top set those conditions up; tests/e2e/test_cli_doctor.py uses them
too, to check the real ``acta doctor`` command's exit codes and ``--json``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from acta_sqla import migrate
from acta_sqla.doctor import Finding, Report, Severity, Thresholds, examine
from acta_sqla.settings import Timings
from tests.waiting import wait_for

XIDS_TO_BURN = Thresholds().xmin_age_warning + 500
DEAD_ROWS = 20_000


def sql(url: str, statement: str, *params: object) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, params or None)
        return cur.fetchall() if cur.description else []


def vacuum(url: str) -> None:
    """What a fresh, just-vacuumed install looks like (the healthy case)."""
    sql(url, "VACUUM ANALYZE acta.job, acta.execution")


def server_autovacuum(url: str) -> bool:
    return sql(url, "SELECT current_setting('autovacuum')::bool")[0][0] is True


def dead_rows(url: str, table: str = "job") -> int:
    rows = sql(
        url,
        "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = %s::regclass",
        f"acta.{table}",
    )
    return int(rows[0][0])  # type: ignore[call-overload]


@contextmanager
def dead_rows_without_autovacuum(url: str, n: int = DEAD_ROWS) -> Iterator[None]:
    """acta.job with ``n`` dead rows and autovacuum off for that table alone (never the
    server's setting); the table's setting is reset afterwards."""
    sql(url, "ALTER TABLE acta.job SET (autovacuum_enabled = false)")
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO acta.job (namespace, kind) "
                "SELECT 'churn', 'k' FROM generate_series(1, %s)",
                (n,),
            )
            conn.execute("DELETE FROM acta.job WHERE namespace = 'churn'")
            # Statistics reach the shared view when the backend next goes idle, at most
            # once a second unless forced.
            conn.execute("SELECT pg_stat_force_next_flush()")
        wait_for(lambda: dead_rows(url) >= n, what=f"{n} dead rows in pg_stat_user_tables")
        yield
    finally:
        sql(url, "ALTER TABLE acta.job RESET (autovacuum_enabled)")


@contextmanager
def idle_transaction_holding_xmin(url: str) -> Iterator[int]:
    """A session idle in a transaction that has a transaction id, while
    ``XIDS_TO_BURN`` other transactions commit (a busy queue's): its pid."""
    holder = psycopg.connect(url)  # not autocommit: the SELECT opens a transaction
    try:
        pid = holder.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        holder.execute("SELECT txid_current()")
        burn_xids(url, XIDS_TO_BURN)
        yield int(pid)
    finally:
        holder.close()


def burn_xids(url: str, n: int) -> None:
    sql(
        url,
        "DO $$ BEGIN SET LOCAL synchronous_commit = off; "
        f"FOR i IN 1..{int(n)} LOOP PERFORM txid_current(); COMMIT; END LOOP; END $$",
    )


def executing_past_lease(url: str, namespace: str, expired_seconds: float) -> int:
    rows = sql(
        url,
        "INSERT INTO acta.job (namespace, kind, status, attempts, execution_id, worker_id, "
        "claimed_at, lease_expires_at) VALUES (%s, 'k', 'executing', 1, 77, 1, "
        "now() - interval '1 hour', now() - make_interval(secs => %s)) RETURNING id",
        namespace,
        expired_seconds,
    )
    return int(rows[0][0])  # type: ignore[call-overload]


def worker_row(url: str, namespace: str, status: str, silent_seconds: float) -> int:
    rows = sql(
        url,
        "INSERT INTO acta.worker (namespace, hostname, pid, status, executors, "
        "heartbeat_seconds, heartbeat_at, stopped_at) VALUES (%s, 'box', 4242, %s, 8, 45, "
        "now() - make_interval(secs => %s), "
        "CASE WHEN %s = 'dead' THEN now() - make_interval(secs => %s) END) RETURNING id",
        namespace,
        status,
        silent_seconds,
        status,
        silent_seconds,
    )
    return int(rows[0][0])  # type: ignore[call-overload]


async def run_doctor(url: str, namespace: str = "default") -> Report:
    engine = create_async_engine(make_url(url).set(drivername="postgresql+asyncpg"))
    try:
        async with AsyncSession(engine) as session:
            return await examine(
                session, namespace=namespace, schema="acta", timings=Timings.from_heartbeat(45)
            )
    finally:
        await engine.dispose()


def serious(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.severity is not Severity.INFO]


def of(report: Report, check: str, subject: str | None = None) -> list[Finding]:
    return [f for f in report.findings if f.check == check and subject in (None, f.subject)]


# ---------------------------------------------------------------- the tests


async def test_a_healthy_schema_exits_0(db: str) -> None:
    vacuum(db)

    report = await run_doctor(db)

    assert serious(report) == []
    assert (report.status, report.exit_code) == ("ok", 0)
    assert report.schema_revision == report.schema_head
    assert [t.name for t in report.tables] == ["execution", "job"]
    assert report.skipped == ()
    if server_autovacuum(db):
        assert report.findings == ()
    else:
        # Autovacuum off server-wide is said, as info: the tables were just vacuumed.
        assert [(f.check, f.severity, f.subject) for f in report.findings] == [
            ("autovacuum", Severity.INFO, "acta.execution"),
            ("autovacuum", Severity.INFO, "acta.job"),
        ]


async def test_a_never_vacuumed_table_with_autovacuum_off_is_a_warning(db: str) -> None:
    sql(db, "ALTER TABLE acta.execution SET (autovacuum_enabled = false)")
    # Forget earlier tests' vacuums of it: as if nothing had ever vacuumed it.
    sql(db, "SELECT pg_stat_reset_single_table_counters('acta.execution'::regclass)")
    try:
        report = await run_doctor(db)
    finally:
        sql(db, "ALTER TABLE acta.execution RESET (autovacuum_enabled)")

    [finding] = of(report, "autovacuum", "acta.execution")
    assert finding.severity is Severity.WARNING
    assert "for this table (autovacuum_enabled = false)" in finding.message
    assert finding.details["table_autovacuum_enabled"] is False
    assert "RESET (autovacuum_enabled)" in finding.advice
    assert report.exit_code == 1


async def test_dead_rows_in_a_table_without_autovacuum_are_a_problem(db: str) -> None:
    vacuum(db)
    with dead_rows_without_autovacuum(db):
        report = await run_doctor(db)

        [dead] = of(report, "dead_tuples", "acta.job")
        assert dead.severity is Severity.PROBLEM
        assert dead.details["dead_rows"] >= DEAD_ROWS
        assert dead.details["dead_ratio"] == 1.0
        assert "VACUUM (ANALYZE) acta.job" in dead.advice
        [off] = of(report, "autovacuum", "acta.job")
        assert off.severity is Severity.PROBLEM
        assert "for this table (autovacuum_enabled = false)" in off.message
        assert off.details["table_autovacuum_enabled"] is False
        [stale] = of(report, "analyze", "acta.job")
        assert stale.severity is Severity.WARNING
        assert of(report, "dead_tuples", "acta.execution") == []
        assert (report.status, report.exit_code) == ("problem", 2)

        # Vacuumed, the same table is fine again (the finding follows the rows, not the
        # setting).
        sql(db, "VACUUM ANALYZE acta.job")
        after = await run_doctor(db)
        assert of(after, "dead_tuples") == []
        [still_off] = of(after, "autovacuum", "acta.job")
        assert still_off.severity is Severity.INFO
        assert after.exit_code == 0


async def test_an_idle_transaction_holding_xmin_is_a_warning(db: str) -> None:
    vacuum(db)
    with idle_transaction_holding_xmin(db) as pid:
        report = await run_doctor(db)

        [finding] = of(report, "xmin_horizon", f"pid {pid}")
        assert finding.severity is Severity.WARNING
        assert finding.details["state"] == "idle in transaction"
        assert finding.details["xmin_age"] >= XIDS_TO_BURN
        assert finding.message.startswith("idle in transaction for ")
        assert f"pg_terminate_backend({pid})" in finding.advice
        assert "idle_in_transaction_session_timeout" in finding.advice
        assert report.exit_code == 1

    after = await run_doctor(db)
    assert of(after, "xmin_horizon") == []
    assert after.exit_code == 0


async def test_a_row_executing_past_its_lease(db: str) -> None:
    vacuum(db)
    executing_past_lease(db, "stuck", expired_seconds=3600)
    executing_past_lease(db, "stuck", expired_seconds=60)
    executing_past_lease(db, "recent", expired_seconds=10)

    stuck = await run_doctor(db, "stuck")
    [finding] = of(stuck, "expired_leases")
    assert finding.severity is Severity.PROBLEM
    assert finding.subject == "namespace 'stuck'"
    assert finding.details["rows"] == 2
    assert finding.details["oldest_seconds"] >= 3600
    assert "start an `acta worker`" in finding.advice
    assert stuck.exit_code == 2

    # Expired less than one recovery interval ago: recovery has not missed it yet.
    recent = await run_doctor(db, "recent")
    [finding] = of(recent, "expired_leases")
    assert (finding.severity, finding.details["rows"]) == (Severity.WARNING, 1)
    assert recent.exit_code == 1

    assert of(await run_doctor(db, "default"), "expired_leases") == []


async def test_dead_workers(db: str) -> None:
    vacuum(db)
    worker_row(db, "default", "running", silent_seconds=5)  # alive
    worker_row(db, "default", "stopped", silent_seconds=600)  # stopped cleanly
    assert serious(await run_doctor(db)) == []

    silent = worker_row(db, "silent", "running", silent_seconds=400)  # past 7 x 45 s
    report = await run_doctor(db, "silent")
    [finding] = of(report, "dead_workers")
    assert (finding.subject, finding.severity) == (f"worker #{silent}", Severity.WARNING)
    assert "silent for" in finding.message and "box:4242" in finding.message
    assert report.exit_code == 1

    forgotten = worker_row(db, "forgotten", "running", silent_seconds=7200)  # past 14 beats
    report = await run_doctor(db, "forgotten")
    [finding] = of(report, "dead_workers")
    assert (finding.subject, finding.severity) == (f"worker #{forgotten}", Severity.PROBLEM)
    assert "no live worker is running recovery" in finding.advice
    assert report.exit_code == 2

    died = worker_row(db, "crashed", "dead", silent_seconds=300)
    worker_row(db, "crashed", "dead", silent_seconds=2 * 86400)  # long ago: not reported
    report = await run_doctor(db, "crashed")
    [finding] = of(report, "dead_workers")
    assert (finding.subject, finding.severity) == (f"worker #{died}", Severity.WARNING)
    assert "died" in finding.message
    assert report.exit_code == 1


async def test_a_schema_behind_head_is_a_problem(scratch_database: Callable[[], str]) -> None:
    url = scratch_database()
    [head] = migrate.heads()
    older = sql_revisions_before(head)[-1]
    # Alembic runs its own event loop: off this test's.
    await asyncio.to_thread(migrate.upgrade, url, older)

    report = await run_doctor(url)

    [finding] = of(report, "schema_revision")
    assert finding.severity is Severity.PROBLEM
    assert f"at revision {older}, behind this package's {head}" in finding.message
    assert "acta db upgrade" in finding.advice
    assert report.schema_revision == older
    assert report.exit_code == 2
    # Only what the missing revisions changed is skipped: 0017 (job_finished_idx dropped)
    # changed nothing a check reads, so nothing is (0016's breaker table: the next test).
    assert {s.check for s in report.skipped} == set()


async def test_behind_head_only_the_checks_the_missing_revisions_changed_are_skipped(
    scratch_database: Callable[[], str],
) -> None:
    url = scratch_database()
    await asyncio.to_thread(migrate.upgrade, url, "0006")  # before 0007's wait index
    executing_past_lease(url, "default", expired_seconds=3600)

    report = await run_doctor(url)

    assert report.schema_revision == "0006"
    assert {s.check for s in report.skipped} == {
        "waiting_timeout",
        "schedule_no_tick",
        "breaker_open",
    }
    [skipped] = [s for s in report.skipped if s.check == "waiting_timeout"]
    assert skipped.reason == (
        "needs revision 0007 (job_wait_deadline_idx, without which it would scan acta.job); "
        "acta's tables are at 0006"
    )
    [lease] = of(report, "expired_leases")  # read as at head
    assert lease.severity is Severity.PROBLEM


async def test_an_unmigrated_or_newer_schema_is_a_problem(
    scratch_database: Callable[[], str],
) -> None:
    empty = scratch_database()
    report = await run_doctor(empty)
    [finding] = of(report, "schema_revision")
    assert finding.severity is Severity.PROBLEM
    assert "not migrated" in finding.message
    assert report.tables == ()
    assert report.exit_code == 2

    newer = scratch_database()
    await asyncio.to_thread(migrate.upgrade, newer)
    sql(newer, "UPDATE acta.alembic_version SET version_num = '9999'")
    report = await run_doctor(newer)
    [finding] = of(report, "schema_revision")
    assert "does not know" in finding.message
    assert "upgrade acta-sqla" in finding.advice


def sql_revisions_before(head: str) -> list[str]:
    from acta_sqla.doctor import known_revisions

    revisions = [r for r in known_revisions() if r != head]
    assert revisions, "the migrations need at least two revisions for this test"
    return sorted(revisions)


@pytest.mark.parametrize("namespace", ["default"])
async def test_the_doctor_changes_nothing(db: str, namespace: str) -> None:
    executing_past_lease(db, namespace, expired_seconds=3600)
    worker_row(db, namespace, "running", silent_seconds=7200)
    before = sql(db, "SELECT status, lease_expires_at FROM acta.job")
    workers = sql(db, "SELECT status FROM acta.worker")

    await run_doctor(db, namespace)

    assert sql(db, "SELECT status, lease_expires_at FROM acta.job") == before
    assert sql(db, "SELECT status FROM acta.worker") == workers


async def test_a_signal_wait_long_past_its_timeout_is_a_problem(
    db: str, sql: Callable[..., object]
) -> None:
    sql(
        "INSERT INTO acta.job (kind, status, awaited_signal, run_at) VALUES "
        "('k', 'waiting', 'go', now() - interval '1 hour'), "
        "('k', 'waiting', 'go', now() + interval '1 hour')"
    )
    report = await run_doctor(db)
    [late] = [f for f in report.findings if f.check == "waiting_timeout"]
    assert late.severity.value == "problem"
    assert late.message.startswith("1 jobs still waiting for a signal past their timeout")
    assert "start an `acta worker`" in late.advice


def ready_jobs(url: str, namespace: str, due_seconds_ago: float, n: int = 1) -> None:
    sql(
        url,
        "INSERT INTO acta.job (namespace, kind, run_at) SELECT %s, 'k', "
        "now() - make_interval(secs => %s) FROM generate_series(1, %s)",
        namespace,
        due_seconds_ago,
        n,
    )


async def test_a_ready_backlog_with_no_live_worker(db: str) -> None:
    vacuum(db)
    ready_jobs(db, "orphaned", due_seconds_ago=600, n=5)
    ready_jobs(db, "orphaned", due_seconds_ago=-3600)  # not due yet: not counted
    ready_jobs(db, "deploying", due_seconds_ago=5)
    ready_jobs(db, "served", due_seconds_ago=600)
    worker_row(db, "served", "running", silent_seconds=1)
    worker_row(db, "orphaned", "dead", silent_seconds=7200)  # dead: not live

    orphaned = await run_doctor(db, "orphaned")
    [finding] = of(orphaned, "ready_backlog")
    assert (finding.severity, finding.subject) == (Severity.PROBLEM, "namespace 'orphaned'")
    assert finding.message.startswith("5 jobs ready and due (the oldest for 10 min")
    assert "no live worker" in finding.message
    assert "start an `acta worker` for namespace 'orphaned'" in finding.advice
    assert orphaned.exit_code == 2

    # Due for less than two beats: a worker may be restarting.
    [finding] = of(await run_doctor(db, "deploying"), "ready_backlog")
    assert finding.severity is Severity.WARNING

    served = await run_doctor(db, "served")
    assert of(served, "ready_backlog") == []


async def test_an_unknown_namespace_is_a_problem(db: str) -> None:
    vacuum(db)
    ready_jobs(db, "billing", due_seconds_ago=-60)
    executing_past_lease(db, "mail", expired_seconds=1)
    sql(
        db,
        "INSERT INTO acta.job (namespace, kind, status, finished_at) "
        "VALUES ('archive', 'k', 'succeeded', now())",
    )
    worker_row(db, "reports", "stopped", silent_seconds=60)

    typo = await run_doctor(db, "biling")
    [finding] = of(typo, "unknown_namespace")
    assert (finding.severity, finding.subject) == (Severity.PROBLEM, "namespace 'biling'")
    assert finding.message == (
        "namespace 'biling' has no jobs, no workers and no definitions; known: "
        "'archive', 'billing', 'mail', 'reports'"
    )
    assert typo.exit_code == 2

    for known in ("billing", "mail", "archive", "reports"):
        assert of(await run_doctor(db, known), "unknown_namespace") == []

    # The default namespace, not named by the caller: said, as info.
    engine = create_async_engine(make_url(db).set(drivername="postgresql+asyncpg"))
    try:
        async with AsyncSession(engine) as session:
            implicit = await examine(
                session,
                namespace="default",
                schema="acta",
                timings=Timings.from_heartbeat(45),
                namespace_given=False,
            )
    finally:
        await engine.dispose()
    [finding] = of(implicit, "unknown_namespace")
    assert finding.severity is Severity.INFO


async def test_a_fresh_database_knows_no_namespace_and_that_is_fine(db: str) -> None:
    vacuum(db)
    assert of(await run_doctor(db, "anything"), "unknown_namespace") == []


async def test_expired_leases_are_timed_by_the_workers_registered_beat(db: str) -> None:
    vacuum(db)
    executing_past_lease(db, "fast", expired_seconds=60)
    sql(
        db,
        "INSERT INTO acta.worker (namespace, hostname, pid, status, executors, "
        "heartbeat_seconds, heartbeat_at) VALUES ('fast', 'box', 1, 'running', 8, 5, now())",
    )

    # The doctor runs with a 45 s beat (recovery due within 225 s), the workers beat every
    # 5 s: their recovery is due within 25 s, so a lease expired 60 s ago was missed.
    report = await run_doctor(db, "fast")
    [finding] = of(report, "expired_leases")
    assert finding.severity is Severity.PROBLEM
    assert finding.details["overdue_after"] == 25.0
