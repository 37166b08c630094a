"""``acta schedules``: list, pause, resume and run a namespace's recurring schedules."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, NoReturn, TypeVar

import typer

from ._common import fail, printable, run_cli
from .db import DatabaseUrl, _database

T = TypeVar("T")

app = typer.Typer(
    name="schedules", no_args_is_help=True, help="List, pause, resume and run schedules."
)

Namespace = Annotated[
    str | None, typer.Option(help="Namespace (default: ACTA_NAMESPACE, else 'default').")
]
Name = Annotated[str, typer.Argument(help="The schedule's name.")]


def _run(
    database_url: str | None, namespace: str | None, work: Callable[[Any, str, str], Awaitable[T]]
) -> tuple[T, str]:
    import asyncpg

    from ..database import asyncpg_dsn
    from ._common import cli_namespace, explain_stale_schema

    ns = cli_namespace(namespace)
    with _database(database_url, None) as (settings, url, _where):

        async def go() -> T:
            conn = await asyncpg.connect(asyncpg_dsn(url))
            try:
                return await work(conn, settings.db_schema, ns)
            except Exception as exc:
                await explain_stale_schema(exc, url, settings.db_schema)
                raise
            finally:
                await conn.close()

        return asyncio.run(go()), ns


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S %Z") if value is not None else "-"


def _unknown(name: str, ns: str, command: str) -> NoReturn:
    fail(
        f"no schedule {name!r} in namespace {ns!r} (schedules are stored when a worker "
        "whose code declares them starts; `acta schedules ls` lists them)",
        command=command,
    )


@app.command("ls")
@run_cli
def ls(namespace: Namespace = None, database_url: DatabaseUrl = None) -> None:
    """Each schedule: cron, timezone, state, next fire, last fire and its outcome."""
    from ..queries import schedules as q
    from ..schedules import tick_problem

    rows, ns = _run(
        database_url, namespace, lambda c, schema, ns: c.fetch(q.list_schedules(schema), ns)
    )
    if not rows:
        typer.echo(f"no schedules in namespace {ns!r}")
        return
    typer.echo(
        f"{'name':<20} {'cron':<18} {'timezone':<16} {'state':<7} {'next fire':<24} "
        f"{'last fire':<24} outcome"
    )
    broken: list[str] = []
    for r in rows:
        # A stored cron whose tick cannot be computed (left by another version of the code)
        # never fires, paused or not: the state says so, and a line below says why.
        problem = tick_problem(r["name"], r["cron"], r["timezone"], r["missed"], r["now"])
        if problem is not None:
            broken.append(f"{printable(r['name'])}: {printable(problem)}")
        state = "broken" if problem is not None else "active" if r["enabled"] else "paused"
        typer.echo(
            f"{printable(r['name'])[:20]:<20} {printable(r['cron'])[:18]:<18} "
            f"{printable(r['timezone'])[:16]:<16} "
            f"{state:<7} {_when(r['next_fire']):<24} "
            f"{_when(r['last_fire']):<24} {r['last_status'] or '-'}"
        )
    for line in broken:
        typer.echo(f"broken: {line}; it never fires: fix its cron in the code and start a worker")


@app.command()
@run_cli
def pause(name: Name, namespace: Namespace = None, database_url: DatabaseUrl = None) -> None:
    """Stop a schedule firing (a running fire finishes; its pending fire is cancelled)."""
    from .. import schedules

    paused, ns = _run(
        database_url, namespace, lambda c, schema, ns: schedules.pause(c, schema, ns, name)
    )
    if not paused:
        _unknown(name, ns, "acta schedules pause")
    typer.echo(f"schedule {name!r} paused")


@app.command()
@run_cli
def resume(name: Name, namespace: Namespace = None, database_url: DatabaseUrl = None) -> None:
    """Resume a paused schedule: its next fire is enqueued by its missed policy."""
    from .. import schedules

    tick, ns = _run(
        database_url,
        namespace,
        lambda c, schema, ns: schedules.resume(c, schema, ns, name),
    )
    if tick is None:
        _unknown(name, ns, "acta schedules resume")
    typer.echo(f"schedule {name!r} resumed; next fire at {_when(tick)}")


@app.command("run")
@run_cli
def run_now(name: Name, namespace: Namespace = None, database_url: DatabaseUrl = None) -> None:
    """One extra fire now, beside the cadence (the next regular fire is unchanged)."""
    from ..queries import schedules as q

    rows, ns = _run(
        database_url,
        namespace,
        lambda c, schema, ns: c.fetch(q.run_schedule_now(schema), ns, name),
    )
    if not rows:
        _unknown(name, ns, "acta schedules run")
    typer.echo(f"schedule {name!r}: extra fire enqueued as job {rows[0][0]}")
