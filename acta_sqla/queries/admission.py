"""Admission: ONE call decides every keyed job an executor batch asks about.

The decision (concurrency slot, rate meter) is the ``admit`` function (queries/schema.sql):
it locks each key of the batch (advisory, in one order) before it reads, which one plain
statement cannot do (its snapshot is taken before it waits). This module holds the call.

Each builder returns SQL text with asyncpg ``$n`` parameters for one schema; ``WorkerSQL``
renders them once per worker. No SQLAlchemy here.
"""

from __future__ import annotations

from ._render import quote


def admit(schema: str) -> str:
    """admit: for each request of ``$2`` (a JSON array of ``[job_id, execution_id, limit,
    rate_count, rate_period, bounce_seconds, breaker_key, breaker_probes]``) of namespace
    ``$1``, by worker ``$3``: a verdict (``admitted``, ``slot``, ``rate``, ``lost``;
    ``breaker``, ``probe``, ``half_open`` for a kind with a breaker, migration 0016) and the
    seconds to wait before it is due again. Guard: the job must be 'executing' under the
    given execution id (else ``lost``, nothing taken); slots count only live holders
    (executing under the slot's execution id, lease unexpired)."""
    s = quote(schema)
    return f"SELECT job_id, verdict, wait FROM {s}.admit($1, $2::jsonb, $3)"


def breaker_record(schema: str) -> str:
    """breaker_record: count the outcomes ``$2`` (a JSON array of ``[kind, key, job_id,
    execution_id, failed, failure_rate, min_calls, window, open_for]``) of namespace ``$1``
    into their breakers (migration 0016); answers each transition made: kind, key, the new
    state (``open``, ``closed``) and, opened, until when."""
    s = quote(schema)
    return (
        "SELECT kind, key, state, extract(epoch FROM until - clock_timestamp())::float8 AS wait"
        f" FROM {s}.breaker_record($1, $2::jsonb)"
    )
