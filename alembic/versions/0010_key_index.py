"""a concurrency key's unfinished jobs, by index

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04

``job_key_idx`` (namespace, concurrency_key, id) over the unfinished rows that have a key:
the dashboard's key page (and ``acta_sqla.inspect.concurrency_key``) lists one key's jobs
and kinds. Without it the page read every unfinished row of the namespace (148 ms with
100,000 queued jobs, growing with the queue); with it, the key's own rows. Plain jobs
(no key) are outside the index and pay nothing; a keyed job pays one index entry per
change of status, as ``job_lane_idx`` costs a laned one.
"""

from collections.abc import Sequence

import sqlalchemy as sa

from acta_sqla.migrate import target_schema
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "job_key_idx",
        "job",
        ["namespace", "concurrency_key", "id"],
        schema=target_schema(),
        postgresql_where=sa.text(
            "concurrency_key IS NOT NULL AND status IN ('ready', 'executing', 'waiting')"
        ),
    )


def downgrade() -> None:
    op.drop_index("job_key_idx", table_name="job", schema=target_schema())
