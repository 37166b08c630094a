"""``acta definitions`` (each kind's effective policy; set and reset an operator's
overrides) and ``acta pause`` / ``acta resume`` of a kind."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from ._common import fail, printable, run_cli
from .db import DatabaseUrl
from .jobs import Namespace, _namespace, _run

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from ..app import Acta

T = TypeVar("T")

app = typer.Typer(
    name="definitions",
    no_args_is_help=True,
    help="Each kind's effective policy; an operator's overrides, applied within one heartbeat.",
)

Kind = Annotated[str, typer.Argument(help="The job kind.")]


def _show(value: Any) -> str:
    return "-" if value is None else json.dumps(value) if not isinstance(value, str) else value


@app.command("ls")
@run_cli
def ls(namespace: Namespace = None, database_url: DatabaseUrl = None) -> None:
    """Each kind's effective policy; an operator's overrides are marked with *."""
    from .. import breakers, inspect
    from ..policy import OVERRIDABLE

    ns = _namespace(namespace)

    async def work(s: AsyncSession) -> tuple[Any, Any, Any]:
        found = await s.run_sync(lambda sync: breakers.breakers(sync, ns))
        return await inspect.definitions(s, ns), found, await _db_now(s)

    rows, states, now = _run(database_url, work)
    if not rows:
        typer.echo(f"no kinds stored in namespace {ns!r} (a worker stores them when it starts)")
        return
    for row in rows:
        typer.echo(printable(row.kind) + ("  [paused]" if row.effective.get("paused") else ""))
        for name in OVERRIDABLE:
            mark = "*" if name in row.overridden else " "
            typer.echo(f"  {mark} {name:<18} {_show(row.effective.get(name))}")
        if row.effective.get("breaker") is not None:
            mine = [b for b in states if b.kind == row.kind]
            for b in mine or [None]:
                where = f" [{printable(b.key)}]" if b is not None and b.key else ""
                shown = b.shown(now) if b is not None else "closed"
                typer.echo(f"    breaker state{where:<6} {shown}")


def _change(
    command: str,
    database_url: str | None,
    namespace: str | None,
    change: Callable[[Acta, AsyncSession], Awaitable[T]],
) -> T:
    """``change(acta, session)`` for the namespace's ``Acta``, committed; a refused change
    is one line."""
    from ..app import Acta
    from ..errors import ConfigurationError

    acta = Acta(_namespace(namespace), allow_unknown_kinds=True)
    try:
        return _run(database_url, lambda s: change(acta, s))
    except ConfigurationError as exc:
        fail(str(exc), command=command)


@app.command("set")
@run_cli
def set_(
    kind: Kind,
    assignments: Annotated[
        list[str], typer.Argument(help="field=value ..., e.g. timeout=30 rate=10/s paused=true")
    ],
    namespace: Namespace = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Override fields of a kind's policy (max_attempts, timeout, backoff_base, backoff_max,
    concurrency_limit, rate, retention, paused, breaker); workers apply it within one
    heartbeat. A breaker: breaker=failure_rate=0.5,min_calls=20,window=60,open_for=30,probes=1
    (or breaker=none)."""
    fields: dict[str, Any] = {}
    for item in assignments:
        name, sep, value = item.partition("=")
        if not sep or not name:
            fail(f"{item!r} is not field=value (e.g. timeout=30)", command="acta definitions set")
        fields[name.strip()] = value
    stored = _change(
        "acta definitions set",
        database_url,
        namespace,
        lambda a, s: a.set_policy(s, kind, **fields),
    )
    typer.echo(f"{kind}: overrides now {json.dumps(stored, sort_keys=True)}")


@app.command()
@run_cli
def reset(
    kind: Kind,
    names: Annotated[
        list[str] | None, typer.Argument(help="Fields to reset (default: all).")
    ] = None,
    namespace: Namespace = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Drop an operator's overrides of a kind (all, or the fields named)."""
    stored = _change(
        "acta definitions reset",
        database_url,
        namespace,
        lambda a, s: a.reset_policy(s, kind, *(names or [])),
    )
    typer.echo(f"{kind}: overrides now {json.dumps(stored, sort_keys=True)}")


@app.command("close-breaker")
@run_cli
def close_breaker(
    kind: Kind,
    key: Annotated[
        str, typer.Option(help="The key of a breaker per concurrency or rate key.")
    ] = "",
    namespace: Namespace = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Close a kind's circuit breaker by hand: its jobs start again at once."""
    import getpass

    before = _change(
        "acta definitions close-breaker",
        database_url,
        namespace,
        lambda a, s: a.close_breaker(s, kind, key, by=f"{getpass.getuser()} (acta cli)"),
    )
    what = kind if not key else f"{kind} [{key}]"
    if before is None:
        fail(
            f"{what!r} has no breaker state in this namespace (it has none, or never counted)",
            command="acta definitions close-breaker",
        )
    typer.echo(f"breaker {what} closed (it was {before})")


async def _db_now(session: AsyncSession) -> Any:
    from sqlalchemy import func, select

    return (await session.execute(select(func.now()))).scalar_one()


@run_cli
def pause(kind: Kind, namespace: Namespace = None, database_url: DatabaseUrl = None) -> None:
    """Pause a kind: its jobs stay queued, unclaimed, until resumed (running ones finish)."""
    _change("acta pause", database_url, namespace, lambda a, s: a.pause(s, kind))
    typer.echo(f"{kind} paused (workers stop claiming it within one heartbeat)")


@run_cli
def resume(kind: Kind, namespace: Namespace = None, database_url: DatabaseUrl = None) -> None:
    """Resume a paused kind."""
    _change("acta resume", database_url, namespace, lambda a, s: a.resume(s, kind))
    typer.echo(f"{kind} resumed")
