"""prune index: finished jobs by kind, so a recovery pass costs what it deletes

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04

Recovery prunes finished jobs past their kind's retention (each kind has its own; null keeps
it forever). With only ``job_finished_idx`` (namespace, finished_at), no range of the index
holds the rows due, so every pass compared every finished row with its kind's cutoff: 1.85 s
per pass at 1M finished rows to delete nothing, growing with history until the admin
connection's statement timeout. ``job_prune_idx`` (namespace, kind, finished_at) over
terminal rows makes the rows due the front of each kind's range; the prune walks the kinds
and reads only those fronts (queries/recovery.py, ``prune_finished``).

Building it takes a lock that blocks writes to the job table while it runs (2.7 s at 1M
finished rows, 18-22 s at 5M, measured by benchmarks/prune.py). On a large table, build it
beforehand without that lock; this migration then finds it and does nothing::

    CREATE INDEX CONCURRENTLY IF NOT EXISTS job_prune_idx ON acta.job
        (namespace, kind, finished_at) WHERE status IN ('succeeded', 'failed', 'cancelled');
"""

from collections.abc import Sequence

import sqlalchemy as sa

from acta_sqla.migrate import target_schema
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TERMINAL = "status IN ('succeeded', 'failed', 'cancelled')"


def upgrade() -> None:
    op.create_index(
        "job_prune_idx",
        "job",
        ["namespace", "kind", "finished_at"],
        unique=False,
        schema=target_schema(),
        postgresql_where=sa.text(TERMINAL),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index("job_prune_idx", table_name="job", schema=target_schema(), if_exists=True)
