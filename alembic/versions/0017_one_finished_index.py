"""one index of every finished job: job_prune_idx serves the windows; failed rows their own

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05

Issue 30 (the database's cost per job). Every completion is an update outside HOT (it
changes ``status``, which the partial indexes' predicates read), so each index whose
predicate the finished row meets gets an entry for it: ``job_finished_idx`` (namespace,
finished_at) and ``job_prune_idx`` (namespace, kind, finished_at), both over every
terminal row. The first served the dashboard's windows of recent finished jobs over every
kind; the second recovery's prune, per kind (0004 says why the prune needs the kind
before the time).

* ``job_finished_idx`` is dropped. ``job_prune_idx`` alone serves the windows over every
  kind (throughput, the charts, the kinds' rates): they say ``kind = ANY (ARRAY(...))``
  with the namespace's finished kinds, found by a skip scan of the same index (one descent
  per kind), and read each kind's range from the window's start (``queries/inspect.py``,
  ``_finished_kinds``): a descent per kind plus the window's rows, whatever the history.
* ``job_failed_idx`` (namespace, finished_at) over failed rows only serves the failure
  pages (failure groups, a group's ids), which read failed rows and no others. A job that
  succeeds (or is cancelled) writes no entry there.

Per drained job that succeeds: one B-tree entry fewer, about 75 B of WAL
(docs/performance.md, the ninth pass); a job that fails writes two, as before.

Building ``job_failed_idx`` reads the whole table under a lock that blocks writes to it
(as 0004's build did: 2.7 s at 1M finished rows), and so does the downgrade's rebuild of
``job_finished_idx``. On a large table, build the index first without that lock; the
migration then finds it and does nothing more than the drop::

    CREATE INDEX CONCURRENTLY IF NOT EXISTS job_failed_idx ON acta.job
        (namespace, finished_at) WHERE status = 'failed';
    -- before a downgrade:
    CREATE INDEX CONCURRENTLY IF NOT EXISTS job_finished_idx ON acta.job
        (namespace, finished_at) WHERE status IN ('succeeded', 'failed', 'cancelled');
"""

from collections.abc import Sequence

import sqlalchemy as sa

from acta_sqla.migrate import target_schema
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TERMINAL = "status IN ('succeeded', 'failed', 'cancelled')"
FAILED = "status = 'failed'"


def _build(name: str, where: str) -> None:
    op.create_index(
        name,
        "job",
        ["namespace", "finished_at"],
        unique=False,
        schema=target_schema(),
        postgresql_where=sa.text(where),
        if_not_exists=True,
    )


def upgrade() -> None:
    _build("job_failed_idx", FAILED)
    op.drop_index("job_finished_idx", table_name="job", schema=target_schema(), if_exists=True)


def downgrade() -> None:
    _build("job_finished_idx", TERMINAL)
    op.drop_index("job_failed_idx", table_name="job", schema=target_schema(), if_exists=True)
