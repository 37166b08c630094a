"""one index of finished jobs: job_prune_idx serves the windows, job_finished_idx goes

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05

Issue 30 (the database's cost per job). Every completion is an update outside HOT (it
changes ``status``, which the partial indexes' predicates read), so each index whose
predicate the finished row meets gets an entry for it: ``job_finished_idx`` (namespace,
finished_at) and ``job_prune_idx`` (namespace, kind, finished_at), both over terminal rows.
The first served the dashboard's windows of recent finished jobs over every kind; the
second recovery's prune, per kind (0004 says why the prune needs the kind before the time).

``job_prune_idx`` alone now serves both: a window over every kind says ``kind = ANY
(ARRAY(...))`` with the namespace's finished kinds, found by a skip scan of the same index
(one descent per kind), and each kind's window is then the front of that kind's range
(``queries/inspect.py``, ``_finished_kinds``): a descent per kind plus the window's rows,
whatever the history. Per drained job that is one B-tree entry fewer, about 75 B of WAL
(docs/performance.md, the ninth pass).

Downgrade builds ``job_finished_idx`` again, with a lock that blocks writes to the job table
while it runs (about as long as 0004's build of ``job_prune_idx``: 2.7 s at 1M finished
rows). On a large table, build it beforehand without that lock; the downgrade then finds it
and does nothing::

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


def upgrade() -> None:
    op.drop_index("job_finished_idx", table_name="job", schema=target_schema(), if_exists=True)


def downgrade() -> None:
    op.create_index(
        "job_finished_idx",
        "job",
        ["namespace", "finished_at"],
        unique=False,
        schema=target_schema(),
        postgresql_where=sa.text(TERMINAL),
        if_not_exists=True,
    )
