"""lease index keyed on the lease itself

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02

``job_lease_idx`` was partial on ``status = 'executing'``. Every statement that fences a
row by its status (the completion, the heartbeat) then matched the index's predicate, and
the planner, expecting few executing rows, scanned the whole index (dead entries of every
row that had been executing included) and hashed it instead of looking each row up by its
primary key: a completion of 128 rows took 3.5 ms instead of 1 ms, and grew with the
drain. The index is now partial on ``lease_expires_at IS NOT NULL`` (only executing rows
hold a lease), which recovery's ``lease_expires_at < now()`` implies and a status fence
does not.
"""

from collections.abc import Sequence

import sqlalchemy as sa

from acta_sqla.migrate import target_schema
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _rebuild_lease_index(where: str) -> None:
    schema = target_schema()
    op.drop_index("job_lease_idx", table_name="job", schema=schema)
    op.create_index(
        "job_lease_idx",
        "job",
        ["namespace", "lease_expires_at"],
        unique=False,
        schema=schema,
        postgresql_where=sa.text(where),
    )


def upgrade() -> None:
    _rebuild_lease_index("lease_expires_at IS NOT NULL")


def downgrade() -> None:
    _rebuild_lease_index("status = 'executing'")
