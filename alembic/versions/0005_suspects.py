"""suspects: a job lost with its worker before it was known to start is next claimed alone

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03

A worker killed by one of its jobs (``os._exit``, a segfault, the OOM killer) loses every
job it held. Those the database did not know had started cannot be told apart: recovery
charges none of them, marks each a *suspect* (``job.suspect``), and the claim then runs a
suspect alone on its worker, so its next loss is unambiguous and is charged to it alone
(issue 10, item 2; docs/reliability.md, I5). ``job_suspect_idx`` holds only due-able
suspects, normally none: the claim asks it whether one is due at the cost of one probe of
an empty index.

"""

from collections.abc import Sequence

import sqlalchemy as sa

from acta_sqla.migrate import target_schema
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = target_schema()
    # A constant default: PostgreSQL 11+ adds the column without rewriting the table.
    op.add_column(
        "job",
        sa.Column("suspect", sa.Boolean(), server_default=sa.false(), nullable=False),
        schema=schema,
    )
    op.create_index(
        "job_suspect_idx",
        "job",
        ["namespace", "priority", "run_at", "id"],
        unique=False,
        schema=schema,
        postgresql_where=sa.text("status = 'ready' AND suspect"),
    )


def downgrade() -> None:
    schema = target_schema()
    op.drop_index("job_suspect_idx", table_name="job", schema=schema)
    op.drop_column("job", "suspect", schema=schema)
