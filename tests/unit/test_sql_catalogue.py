"""Every statement acta sends, rendered into one file checked into the repository
(tests/unit/sql_catalogue.sql): a change to any statement, to a status set, or to the
tables' DDL shows up in one diff for the reviewer.

After an intended change, regenerate the file and commit it with the change::

    ACTA_UPDATE_SQL_SNAPSHOT=1 pytest tests/unit/test_sql_catalogue.py

The worker's statements are found by walking the builder modules (a new builder is in the
catalogue without touching this test); the SQLAlchemy builders need an example call
each, listed below (a builder without one fails the test, naming it).
"""

from __future__ import annotations

import inspect as pyinspect
import os
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateIndex, CreateSequence, CreateTable

from acta_sqla.models import Base, Job, execution_id_seq
from acta_sqla.queries import (
    admin,
    admission,
    breakers,
    claim,
    complete,
    definitions,
    demo,
    doctor,
    heartbeat,
    locks,
    recovery,
    schedules,
    session,
    waits,
    workers,
)
from acta_sqla.queries import inspect as inspect_q
from acta_sqla.queries.catalogue import WorkerSQL
from acta_sqla.settings import SCHEMA_VERSION_TABLE
from acta_sqla.status import JobStatus

SNAPSHOT = Path(__file__).with_name("sql_catalogue.sql")
UPDATE_ENV = "ACTA_UPDATE_SQL_SNAPSHOT"

TEXT_MODULES: tuple[ModuleType, ...] = (
    claim,
    complete,
    heartbeat,
    recovery,
    locks,
    admission,
    definitions,
    workers,
    admin,
    doctor,
    waits,
    schedules,
)
"""Plain-SQL builders: each public function takes the schema (and maybe the version table
name) and returns the statement's text."""

TEXT_ARGUMENTS: dict[str, object] = {
    "schema": "acta",
    "version_table": SCHEMA_VERSION_TABLE,
    "paused_param": None,
    "telemetry": True,
}

TEXT_HELPERS = {
    "claim.mint_execution_id",
    "admin.schema_revision",
    # complete_executions' named parts and its composer (rendered whole by the
    # statements that compose them), and the encoder of its parameters.
    "complete.fenced_finish",
    "complete.history",
    "complete.compose",
    "complete.encode",
    # fragments of the statements that write a schedule's fire
    "schedules.cancelled_unstarted",
    "schedules.revive_on_conflict",
    "schedules.share_schedules",
    # the heartbeat's CTE that wakes timed-out waits (rendered inside the heartbeat)
    "waits.wake_timed_out",
}
"""Functions of those modules that render a fragment of another statement, or re-export
one already listed (not a statement of their own)."""

CORE_EXAMPLES: dict[str, Callable[[], Any]] = {
    "session.insert_unique_job": lambda: session.insert_unique_job(
        {"namespace": "default", "kind": "k", "args": {}, "unique_key": "u"}
    ),
    "session.select_unique_holder": lambda: session.select_unique_holder("default", "u"),
    "session.insert_jobs_bulk": session.insert_jobs_bulk,
    "session.select_unique_holders": session.select_unique_holders,
    "session.cancel_waiting": lambda: session.cancel_waiting(1),
    "session.request_cancel": lambda: session.request_cancel(1),
    "session.job_status": lambda: session.job_status(1),
    "session.unique_key_holder": lambda: session.unique_key_holder(1),
    "session.lock_job_status": lambda: session.lock_job_status(1),
    "session.retry_job": lambda: session.retry_job(1),
    "session.definition_for_update": lambda: session.definition_for_update("default", "k"),
    "session.stored_kinds": lambda: session.stored_kinds("default"),
    "session.write_overrides": lambda: session.write_overrides("default", "k", {"timeout": 30}),
    "session.bump_definitions_version": lambda: session.bump_definitions_version("default"),
    "session.signal_job": lambda: session.signal_job(1, "approved", '{"by": "ann"}'),
    "inspect.queue_depth": lambda: inspect_q.queue_depth("default"),
    "inspect.list_workers": lambda: inspect_q.list_workers("default", 20),
    "inspect.list_jobs": lambda: inspect_q.list_jobs(
        "default", JobStatus.READY, "k", before_id=100, limit=51
    ),
    "inspect.job_detail": lambda: inspect_q.job_detail(1),
    "inspect.job_executions": lambda: inspect_q.job_executions(1),
    "inspect.job_children": lambda: inspect_q.job_children(1),
    "inspect.list_definitions": lambda: inspect_q.list_definitions("default"),
    "inspect.list_lanes": lambda: inspect_q.list_lanes("default", 200),
    "inspect.lane_heads": lambda: inspect_q.lane_heads("default", ["a", "b"]),
    "inspect.lane_jobs": lambda: inspect_q.lane_jobs("default", "a", 500),
    "inspect.list_concurrency_keys": lambda: inspect_q.list_concurrency_keys("default", 200),
    "inspect.key_slots": lambda: inspect_q.key_slots("default", "k"),
    "inspect.key_jobs": lambda: inspect_q.key_jobs("default", "k", 200),
    "inspect.key_kinds": lambda: inspect_q.key_kinds("default", "k"),
    "inspect.rate_meter": lambda: inspect_q.rate_meter("default", "k"),
    "inspect.list_schedule_rows": lambda: inspect_q.list_schedule_rows("default"),
    "inspect.estimate_jobs": lambda: inspect_q.estimate_jobs("default", JobStatus.FAILED, "k"),
    "inspect.count_jobs_up_to": lambda: inspect_q.count_jobs_up_to(
        "default", JobStatus.FAILED, "k", 10001
    ),
    "inspect.due_later": lambda: inspect_q.due_later("default", True, None, 51),
    "inspect.estimate_due_later": lambda: inspect_q.estimate_due_later("default", False),
    "inspect.count_due_later": lambda: inspect_q.count_due_later("default", True, 10001),
    "inspect.finished_series": lambda: inspect_q.finished_series("default", 3600.0, 60.0, "k"),
    "inspect.kind_rates": lambda: inspect_q.kind_rates("default", 300.0),
    "inspect.active_depth": lambda: inspect_q.active_depth("default"),
    "inspect.finished_since": lambda: inspect_q.finished_since("default", 3600.0),
    "inspect.newest_job_id": inspect_q.newest_job_id,
    "inspect.search_jobs": lambda: inspect_q.search_jobs(
        "default", JobStatus.FAILED, "k", "%text%", 1000, 500, 51
    ),
    "inspect.failure_groups": lambda: inspect_q.failure_groups("default", 86400.0, 100),
    "inspect.failed_ids": lambda: inspect_q.failed_ids("default", "ValueError", 86400.0, 1000, "k"),
    "inspect.last_errors": lambda: inspect_q.last_errors([1, 2]),
    "inspect.last_traceback": lambda: inspect_q.last_traceback(1),
    "inspect.in_flight": lambda: inspect_q.in_flight("default"),
    "inspect.list_locks": lambda: inspect_q.list_locks("default", 500),
    "inspect.list_namespaces": lambda: inspect_q.list_namespaces(200),
    "inspect.delete_finished_jobs": lambda: inspect_q.delete_finished_jobs([1, 2]),
    "inspect.delete_history": lambda: inspect_q.delete_history([1, 2]),
    "demo.delete_namespace_history": lambda: demo.delete_namespace_history("demo"),
    "demo.delete_namespace_jobs": lambda: demo.delete_namespace_jobs("demo"),
    "demo.count_jobs_of_user": lambda: demo.count_jobs_of_user(-1),
    "demo.count_finished": lambda: demo.count_finished("demo"),
    "demo.outcome_by_kind": lambda: demo.outcome_by_kind("demo"),
    "demo.last_error_of_kind": lambda: demo.last_error_of_kind("demo", "k"),
    "demo.result_of_kind": lambda: demo.result_of_kind("demo", "k"),
    "demo.count_executions": lambda: demo.count_executions("demo"),
    "breakers.list_breakers": lambda: breakers.list_breakers("default"),
    "breakers.lock_breaker": lambda: breakers.lock_breaker("default", "k", ""),
    "breakers.close_breaker": lambda: breakers.close_breaker("default", "k", ""),
}
CORE_MODULES = (session, inspect_q, demo, breakers)
CORE_HELPERS = {
    "session.job_insert_values",
    "session.bulk_params",
    "session.insert_bulk_params",
    "session.unique_holders_params",
}
"""Functions of those modules that build parameters, not statements."""


def _name(module: ModuleType) -> str:
    return module.__name__.rsplit(".", 1)[-1]


def _builders(module: ModuleType) -> list[tuple[str, Callable[..., Any]]]:
    return [
        (f"{_name(module)}.{name}", fn)
        for name, fn in pyinspect.getmembers(module, pyinspect.isfunction)
        if fn.__module__ == module.__name__ and not name.startswith("_")
    ]


def _purpose(fn: Callable[..., Any]) -> str:
    doc = pyinspect.getdoc(fn) or ""
    return doc.split("\n\n", 1)[0].replace("\n", " ").strip()


def _text_statements() -> list[tuple[str, str, str]]:
    out = []
    for module in TEXT_MODULES:
        for name, fn in _builders(module):
            if name in TEXT_HELPERS:
                continue
            params = list(pyinspect.signature(fn).parameters)
            unknown = [p for p in params if p not in TEXT_ARGUMENTS]
            assert not unknown, f"{name}: add an example value for {unknown} to TEXT_ARGUMENTS"
            sql = fn(**{p: TEXT_ARGUMENTS[p] for p in params})
            out.append((name, _purpose(fn), textwrap.dedent(sql).strip()))
    return out


def _core_statements() -> list[tuple[str, str, str]]:
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    out = []
    for module in CORE_MODULES:
        for name, fn in _builders(module):
            if name in CORE_HELPERS:
                continue
            assert name in CORE_EXAMPLES, f"{name}: add an example call to CORE_EXAMPLES"
            compiled = CORE_EXAMPLES[name]().compile(dialect=dialect)
            out.append((name, _purpose(fn), str(compiled).strip()))
    return out


def _ddl() -> list[tuple[str, str, str]]:
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    out = [
        (
            "ddl.sequence.execution_id_seq",
            "",
            str(CreateSequence(execution_id_seq).compile(dialect=dialect)).strip(),
        )
    ]
    for table in Base.metadata.sorted_tables:
        out.append(
            (
                f"ddl.table.{table.name}",
                "",
                str(CreateTable(table).compile(dialect=dialect)).strip(),
            )
        )
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            out.append(
                (
                    f"ddl.index.{index.name}",
                    "",
                    str(CreateIndex(index).compile(dialect=dialect)).strip(),
                )
            )
    return out


def render() -> str:
    """The catalogue: a header, then each statement under ``-- module.builder: purpose``."""
    blocks = [
        "-- Every statement acta sends, as rendered (tests/unit/test_sql_catalogue.py).\n"
        f"-- Regenerate after an intended change: {UPDATE_ENV}=1 pytest "
        "tests/unit/test_sql_catalogue.py"
    ]
    for name, purpose, sql in [*_text_statements(), *_core_statements(), *_ddl()]:
        header = f"-- {name}" + (f": {purpose}" if purpose else "")
        wrapped = "\n".join(textwrap.wrap(header, 100, subsequent_indent="--   "))
        # Lines stripped: SQLAlchemy ends some with a space, which editors would eat.
        body = "\n".join(line.rstrip() for line in sql.strip().splitlines())
        blocks.append(f"{wrapped}\n{body.removesuffix(';')};")
    return "\n\n".join(blocks) + "\n"


def test_every_statement_matches_the_checked_in_catalogue() -> None:
    rendered = render()
    if os.environ.get(UPDATE_ENV) == "1":
        SNAPSHOT.write_text(rendered)
    assert SNAPSHOT.exists(), f"no {SNAPSHOT.name}: run with {UPDATE_ENV}=1 to create it"
    expected = SNAPSHOT.read_text()
    if rendered != expected:
        pytest.fail(
            f"the SQL differs from {SNAPSHOT.name}; review the change and, if intended, "
            f"regenerate it with {UPDATE_ENV}=1 pytest {Path(__file__).name}\n"
            + "\n".join(_diff(expected, rendered))
        )


def _diff(expected: str, rendered: str) -> list[str]:
    import difflib

    return list(
        difflib.unified_diff(
            expected.splitlines(), rendered.splitlines(), SNAPSHOT.name, "rendered", lineterm=""
        )
    )[:200]


def test_every_worker_statement_is_in_the_catalogue() -> None:
    """WorkerSQL runs only statements its builder modules render (none built elsewhere)."""
    sql = WorkerSQL("acta")
    rendered = {text for _, _, text in _text_statements()}
    statements = {
        name: textwrap.dedent(value).strip()
        for name, value in [*vars(sql).items(), ("set_application_name", sql.set_application_name)]
        if name != "schema"
    }
    missing = [name for name, text in statements.items() if text not in rendered]
    assert not missing, f"WorkerSQL statements not rendered by a builder module: {missing}"


def test_every_statement_builder_has_a_one_line_purpose() -> None:
    unnamed = [
        name
        for module in (*TEXT_MODULES, *CORE_MODULES)
        for name, fn in _builders(module)
        if name not in TEXT_HELPERS | CORE_HELPERS and len(_purpose(fn)) < 15
    ]
    assert not unnamed, f"statement builders without a purpose in their docstring: {unnamed}"


def test_the_partial_index_predicates_render_the_status_sets() -> None:
    predicates = {
        i.name: str(i.dialect_options["postgresql"]["where"]) for i in Job.__table__.indexes
    }
    assert predicates["job_unique_key_idx"] == (
        "unique_key IS NOT NULL AND status IN ('ready', 'executing', 'waiting')"
    )
    assert predicates["job_prune_idx"] == "status IN ('succeeded', 'failed', 'cancelled')"
