"""``acta jobs`` and ``acta status``: look at the queue and act on single jobs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from ..status import JobStatus
from ._common import explain_stale_schema, fail, printable, run_cli
from .db import DatabaseUrl, _database

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

T = TypeVar("T")

app = typer.Typer(name="jobs", no_args_is_help=True, help="List, show, cancel and retry jobs.")

Namespace = Annotated[
    str | None, typer.Option(help="Namespace (default: ACTA_NAMESPACE, else 'default').")
]


def _run(database_url: str | None, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
    from sqlalchemy.ext.asyncio import AsyncSession

    from ..database import create_engine

    with _database(database_url, None) as (settings, url, _where):

        async def go() -> T:
            engine = create_engine(url, settings.db_schema)
            try:
                async with AsyncSession(engine, expire_on_commit=False) as session:
                    result = await work(session)
                    await session.commit()
                    return result
            except Exception as exc:
                await explain_stale_schema(exc, url, settings.db_schema)
                raise
            finally:
                await engine.dispose()

        return asyncio.run(go())


def _when(value: Any) -> str:
    if value is None:
        return "-"
    # The readers clamp a timestamp out of Python's range (queries.inspect._shown_time).
    if value.year >= 9999:
        return "beyond year 9999"
    if value.year <= 1 and value.month == 1 and value.day <= 2:
        return "before 0001-01-02"
    return str(value.strftime("%Y-%m-%d %H:%M:%S"))


@app.command("ls")
@run_cli
def ls(
    status: Annotated[JobStatus | None, typer.Option(help="Only jobs with this status.")] = None,
    kind: Annotated[str | None, typer.Option(help="Only jobs of this kind.")] = None,
    namespace: Namespace = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="At most this many.")] = 50,
    database_url: DatabaseUrl = None,
) -> None:
    """List jobs, newest first."""
    from .. import inspect

    ns = _namespace(namespace)
    page = _run(
        database_url,
        lambda session: inspect.list_jobs(
            session, namespace=ns, status=status, kind=kind, limit=limit
        ),
    )
    typer.echo(f"{'id':>8}  {'status':<10} {'kind':<24} {'attempts':>8}  {'run_at':<19}")
    for j in page.jobs:
        typer.echo(
            f"{j.id:>8}  {j.status.value:<10} {printable(j.kind)[:24]:<24} {j.attempts:>8}  "
            f"{_when(j.run_at)}"
        )
    if not page.jobs:
        typer.echo("(no jobs)")


@app.command()
@run_cli
def show(
    job_id: Annotated[int, typer.Argument(help="The job's id.")],
    database_url: DatabaseUrl = None,
) -> None:
    """Show one job and the history of its attempts."""
    from .. import inspect

    job = _run(database_url, lambda session: inspect.job_detail(session, job_id))
    if job is None:
        fail(f"no job with id {job_id}", command="acta jobs show")
    for label, value in (
        ("id", job.id),
        ("namespace", job.namespace),
        ("kind", printable(job.kind)),
        ("status", job.status.value),
        ("args", json.dumps(job.args)),
        ("priority", job.priority),
        ("run_at", _when(job.run_at)),
        ("attempts", f"{job.attempts} of {job.max_attempts or 'the kind budget'}"),
        ("result", json.dumps(job.result) if job.result is not None else "-"),
        ("last_error", json.dumps(job.last_error) if job.last_error else "-"),
        ("created_at", _when(job.created_at)),
        ("finished_at", _when(job.finished_at)),
    ):
        typer.echo(f"{label:>12}: {value}")
    if job.status is JobStatus.WAITING:
        if job.awaited_signal is not None:
            deadline = "no timeout" if job.run_at.year > 9000 else f"until {_when(job.run_at)}"
            typer.echo(f"{'waits for':>12}: signal {job.awaited_signal!r} ({deadline})")
        elif job.pending_children:
            typer.echo(f"{'waits for':>12}: {job.pending_children} unfinished child(ren)")
        elif job.lane_key is not None:
            typer.echo(f"{'waits for':>12}: its turn in lane {job.lane_key!r}")
    if job.resumed is not None:
        typer.echo(f"{'resumed by':>12}: {job.resumed}")
    if job.signals:
        typer.echo(f"{'signals':>12}: {json.dumps(job.signals)}")
    if job.parent_id is not None:
        typer.echo(f"{'parent':>12}: {job.parent_id}")
    if job.children:
        typer.echo("children:")
        for c in job.children:
            typer.echo(f"  {c.id:>8}  {c.status.value:<10} {printable(c.kind)}")
    typer.echo("attempts:" if job.executions else "attempts: none recorded")
    for e in job.executions:
        error = f"  {printable(e.error_type)}: {printable(e.error_message)}" if e.error_type else ""
        typer.echo(f"  #{e.attempt} {e.outcome:<11} finished {_when(e.finished_at)}{error}")


@app.command()
@run_cli
def cancel(
    job_id: Annotated[int, typer.Argument(help="The job's id.")],
    reason: Annotated[
        str | None,
        typer.Option("--reason", help="Why (stored with the job, shown by the dashboard)."),
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Cancel a job: at once if it is ready or waiting; an executing one is cancelled by its
    worker's next heartbeat. Who cancelled it (your OS user) and why are stored with it."""
    from ..app import Acta
    from ..session import MAX_CANCEL_REASON, cancel_note

    try:
        why = cancel_note("--reason", reason, MAX_CANCEL_REASON)
    except ValueError as exc:
        fail(str(exc), command="acta jobs cancel")
    by = _os_user()
    outcome = _run(
        database_url,
        lambda s: Acta(allow_unknown_kinds=True).cancel(s, job_id, reason=why, by=by),
    )
    messages = {
        "cancelled": f"job {job_id} cancelled",
        "requested": f"job {job_id} is executing: cancel requested (its worker stops it "
        "within one heartbeat)",
    }
    if outcome in messages:
        typer.echo(messages[outcome])
    elif outcome == "finished":
        fail(f"job {job_id} has already finished; nothing to cancel", command="acta jobs cancel")
    else:
        fail(f"no job with id {job_id}", command="acta jobs cancel")


def _os_user() -> str:
    """Who runs the command, as a cancel records it: "alice (cli)", else "cli"."""
    import getpass

    try:
        user = getpass.getuser()
    except Exception:  # no login name in the environment or the password database
        return "cli"
    return f"{user} (cli)" if user and "\x00" not in user else "cli"


@app.command()
@run_cli
def retry(
    job_id: Annotated[int, typer.Argument(help="The job's id.")],
    database_url: DatabaseUrl = None,
) -> None:
    """Send a finished job back to ready now, with a fresh failure budget."""
    from ..app import Acta

    if _run(database_url, lambda s: Acta(allow_unknown_kinds=True).retry(s, job_id)):
        typer.echo(f"job {job_id} is ready again")
    else:
        fail(
            f"job {job_id} is not finished (or does not exist): only succeeded, failed or "
            "cancelled jobs can be retried",
            command="acta jobs retry",
        )


@run_cli
def signal(
    job_id: Annotated[int, typer.Argument(help="The job's id.")],
    name: Annotated[str, typer.Argument(help="The signal's name.")],
    payload: Annotated[
        str | None, typer.Option(help="The signal's payload, as JSON (default: null).")
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Send a signal to a job (a job waiting for it runs again at once)."""
    from ..app import Acta
    from ..errors import InvalidSignal, JobFinished, JobNotFound

    value: Any = None
    if payload is not None:
        try:
            value = json.loads(payload)
        except ValueError as exc:
            fail(
                f"--payload is not valid JSON ({exc}); e.g. --payload '{{\"ok\": true}}'",
                command="acta signal",
            )
    try:
        status = _run(
            database_url, lambda s: Acta(allow_unknown_kinds=True).signal(s, job_id, name, value)
        )
    except (JobNotFound, JobFinished, InvalidSignal) as exc:
        fail(str(exc), command="acta signal")
    if status == JobStatus.READY.value:
        typer.echo(f"job {job_id} received signal {name!r} and is ready to run")
    else:
        typer.echo(f"job {job_id} ({status}) received signal {name!r}; kept for its wait")


def _namespace(given: str | None = None) -> str:
    from ._common import cli_namespace

    return cli_namespace(given)


@run_cli
def status(
    namespace: Annotated[
        str | None,
        typer.Option(help="One namespace in detail (default: every namespace, in summary)."),
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Every namespace's depth by status and workers alive; with --namespace, one namespace's
    depth by kind and status, and its workers."""
    from .. import inspect

    statuses = [s.value for s in JobStatus]
    if namespace is None:
        summaries = _run(database_url, lambda session: inspect.namespace_summaries(session))
        if not summaries:
            typer.echo("no namespaces yet (no jobs, workers or definitions in this database)")
            return
        typer.echo(f"{'namespace':<24}" + "".join(f"{s:>11}" for s in statuses) + "    workers")
        for ns, depth, alive in summaries:
            typer.echo(
                f"{ns[:24]:<24}"
                + "".join(f"{depth.get(JobStatus(s), 0):>11}" for s in statuses)
                + f"{alive:>11}"
            )
        return
    ns = _namespace(namespace)

    async def work(session: AsyncSession) -> tuple[Any, list[inspect.WorkerRow], Any]:
        from .. import breakers

        found = await session.run_sync(lambda s: breakers.breakers(s, ns))
        return await inspect.queue_depth(session, ns), await inspect.workers(session, ns), found

    table, workers, breaker_rows = _run(database_url, work)
    typer.echo(f"namespace {ns!r}")
    typer.echo(f"  {'kind':<24}" + "".join(f"{s:>11}" for s in statuses))
    for kind, counts in table.items():
        typer.echo(
            f"  {kind[:24]:<24}" + "".join(f"{counts.get(JobStatus(s), 0):>11}" for s in statuses)
        )
    if not table:
        typer.echo("  (no jobs)")
    typer.echo("workers:")
    for w in workers:
        typer.echo(
            f"  #{w.id} {w.status.value:<8} {w.hostname}:{w.pid} executors={w.executors} "
            f"last beat {_when(w.heartbeat_at)}"
        )
    if not workers:
        typer.echo("  (none)")
    if breaker_rows:
        # Circuit breakers (docs/breakers.md): each one's state and when it changes next.
        from datetime import UTC, datetime

        now = datetime.now(UTC)
        typer.echo("breakers:")
        for b in breaker_rows:
            typer.echo(f"  {printable(b.label)[:40]:<40} {b.shown(now)}")


@run_cli
def demo(
    users: Annotated[int, typer.Option(min=1, max=100_000, help="Welcome mails to send.")] = 200,
    database_url: DatabaseUrl = None,
) -> None:
    """Show the whole system working: transactional enqueue, a worker, retries, failures."""
    from ..demo import run_demo

    with _database(database_url, None) as (settings, url, where):
        from .. import migrate

        migrate.upgrade(url, "head", settings.db_schema)
        typer.echo(f"database: {where}")
        asyncio.run(run_demo(settings, url, users))
    if not settings.database_url:
        # Started on demand, the embedded server outlives the command (the next one is quick):
        # say so, and how to stop it, rather than leave a PostgreSQL running unannounced.
        folder = settings.data_dir.expanduser().resolve()
        typer.echo(
            f"the embedded PostgreSQL in {folder} keeps running for the next command; "
            "stop it with `acta db stop`"
        )
