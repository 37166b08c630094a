"""The `acta` command line as one Typer app: the sub-commands live in sibling modules.

Each command is built when it is called (or when help lists them): ``acta worker`` imports
Typer and ``worker.py``, not the other commands' modules, nor builds their Click commands.
Its parsing is the Typer command's, on every path; only the loading is deferred, as
Click's lazily loaded sub-commands are.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import typer
import typer.main
from typer.core import TyperGroup

from ._common import _typer_exceptions

COMMANDS = {
    "worker": "worker:worker",
    "pause": "definitions:pause",
    "resume": "definitions:resume",
    "status": "jobs:status",
    "signal": "jobs:signal",
    "demo": "jobs:demo",
    "dashboard": "dashboard:dashboard",
    "doctor": "doctor:doctor",
    "db": "db:app",
    "jobs": "jobs:app",
    "schedules": "schedules:app",
    "definitions": "definitions:app",
}
"""``acta``'s commands, in the order its help lists them: ``module:attribute`` of a command
function or of a sub-command group's Typer app, in this package."""


class ActaGroup(TyperGroup):
    """A Typer group whose usage errors name the command they are about. Click raises an
    option's missing value (``acta doctor --namespace``) while parsing, without a context,
    so the error named plain ``acta`` and exited 2 where ``acta doctor``'s usage errors exit
    3: the group gives it the context of the command it was parsing."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except _typer_exceptions()[0] as exc:
            if exc.ctx is None:
                exc.ctx = ctx
            raise

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except _typer_exceptions()[0] as exc:
            name = ctx.invoked_subcommand  # set before the sub-command parses its own
            command = self.get_command(ctx, name) if exc.ctx is None and name else None
            if command is not None:
                exc.ctx = command.context_class(command, info_name=name, parent=ctx)
            raise


class _LazyCommands(MutableMapping[str, Any]):
    """A group's ``commands``: each one built on first use."""

    def __init__(self, build: Callable[[str], Any], names: list[str]) -> None:
        self._build = build
        self._names = list(names)
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in self._names:
                raise KeyError(name)
            self._built[name] = self._build(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        if name not in self._names:
            self._names.append(name)
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        self._names.remove(name)
        self._built.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def build_command(name: str) -> Any:
    """The Click command of ``acta NAME``, as ``app.command()`` / ``app.add_typer()`` on
    the root app would have built it (public Typer API: a holder app with that one entry)."""
    module, _, attribute = COMMANDS[name].partition(":")
    target = getattr(importlib.import_module(f"{__package__}.{module}"), attribute)
    holder = typer.Typer(add_completion=False)
    holder.callback()(_no_options)
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name, cls=ActaGroup)
    else:
        holder.command(name)(target)
    return typer.main.get_command(holder).commands[name]  # type: ignore[attr-defined]


class _RootGroup(ActaGroup):
    """``acta``: the commands of :data:`COMMANDS`, built on first use, and any registered
    on ``app`` itself (``app.command()``), built by Typer as usual."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        registered = dict(self.commands)
        self.commands = _LazyCommands(build_command, list(COMMANDS))
        self.commands.update(registered)


def _no_options() -> None:
    pass


app = typer.Typer(
    cls=_RootGroup,
    no_args_is_help=True,
    add_completion=False,
    help="acta-sqla: a durable PostgreSQL job queue for SQLAlchemy applications.",
)
app.callback()(_no_options)
