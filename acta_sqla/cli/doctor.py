"""``acta doctor``: a health report of acta's tables and the server around them.

Exit status: 0 healthy (info findings only), 1 warnings, 2 problems, and 3 when the
doctor could not examine the database at all (a bad setting, a server that is down):
monitoring reads 1 and 2 as findings, so a failure to look must not look like one (the
Nagios convention: 3 is UNKNOWN).
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Annotated

import typer

from ._common import run_cli
from .db import DatabaseUrl, Schema, _database

if TYPE_CHECKING:
    from ..doctor import Report
    from ..settings import ActaSettings

EXIT_CANNOT_EXAMINE = 3
"""The doctor could not look (bad setting, database unreachable): neither 0, 1 nor 2."""


@run_cli(failure=EXIT_CANNOT_EXAMINE, configuration=EXIT_CANNOT_EXAMINE)
def doctor(
    namespace: Annotated[
        str | None,
        typer.Option(help="Namespace whose leases and workers to check (default: ACTA_NAMESPACE)."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON document on stdout, for monitoring.")
    ] = False,
    database_url: DatabaseUrl = None,
    schema: Schema = None,
) -> None:
    """Health of acta's tables and server: exit 0 ok, 1 warnings, 2 problems, 3 failed."""
    with _database(database_url, schema) as (settings, url, where):
        if namespace is not None:
            from ._common import load_cli_settings

            # The same check of the name as ACTA_NAMESPACE gets (one clear line if bad).
            settings = load_cli_settings(
                database_url=database_url, db_schema=schema, namespace=namespace
            )
        report = asyncio.run(_examine(url, settings))
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2))
    else:
        from ..doctor import describe

        for line in describe(report, where):
            typer.echo(line)
    raise typer.Exit(report.exit_code)


async def _examine(url: str, settings: ActaSettings) -> Report:
    from sqlalchemy.ext.asyncio import AsyncSession

    from ..database import create_engine
    from ..doctor import examine

    engine = create_engine(url, settings.db_schema)
    try:
        async with AsyncSession(engine) as session:
            return await examine(
                session,
                namespace=settings.namespace,
                schema=settings.db_schema,
                timings=settings.timings,
                # Named by --namespace or ACTA_NAMESPACE (a .env too), not the default.
                namespace_given="namespace" in settings.model_fields_set,
            )
    finally:
        await engine.dispose()
