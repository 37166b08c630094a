"""schedules: a recurring schedule's fires, one job per tick

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03

A schedule's fire is a job of its kind carrying ``schedule_name`` and ``scheduled_at`` (its
tick). ``job_schedule_tick_key`` makes a tick's fire unique for good (not only while it is
active, as ``unique_key`` is): two workers, a repeated completion, or a start-up racing a
completion can never fire one tick twice (invariant I10; docs/schedules.md). The same
index answers "is a fire of this schedule pending?" and "did a later fire exist?".
``schedule.missed`` now defaults to ``latest``, the policy's name.
"""

from collections.abc import Sequence

import sqlalchemy as sa

from acta_sqla.migrate import target_schema
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = target_schema()
    op.add_column("job", sa.Column("schedule_name", sa.Text(), nullable=True), schema=schema)
    op.add_column(
        "job", sa.Column("scheduled_at", sa.DateTime(timezone=True), nullable=True), schema=schema
    )
    op.create_index(
        "job_schedule_tick_key",
        "job",
        ["namespace", "schedule_name", "scheduled_at"],
        unique=True,
        schema=schema,
        postgresql_where=sa.text("schedule_name IS NOT NULL"),
    )
    op.alter_column("schedule", "missed", server_default="latest", schema=schema)
    op.execute(f"UPDATE \"{schema}\".schedule SET missed = 'latest' WHERE missed = 'once'")


def downgrade() -> None:
    schema = target_schema()
    op.alter_column("schedule", "missed", server_default="once", schema=schema)
    op.drop_index("job_schedule_tick_key", table_name="job", schema=schema)
    op.drop_column("job", "scheduled_at", schema=schema)
    op.drop_column("job", "schedule_name", schema=schema)
