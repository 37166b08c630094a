"""a schedule's fires take the kind's priority and key templates

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04

A fire is written by SQL (the worker's start-up and recovery pass, the completion's
``next_fire`` part, ``acta schedules resume``/``run``), not by ``handler.job()``, so until
now a fire had priority 0 and no keys whatever the kind declared. The schedule row now
carries what ``handler.job(**args)`` would give a job of the schedule's args: the kind's
``priority`` and its ``lane``, ``concurrency_key`` and ``rate_key`` templates rendered from
those args (the worker stores them with the schedule at start-up), and every statement
that writes a fire copies them. A schedule stored before this revision keeps priority 0 and
no keys until a worker of the new code stores it again. (A fire's uniqueness is its tick,
``job_schedule_tick_key``; the kind's ``unique_key`` is not applied to it.)
"""

from collections.abc import Sequence

import sqlalchemy as sa

from acta_sqla.migrate import target_schema
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = target_schema()
    op.add_column(
        "schedule",
        sa.Column("priority", sa.SmallInteger(), server_default="0", nullable=False),
        schema=schema,
    )
    for column in ("concurrency_key", "rate_key", "lane_key"):
        op.add_column("schedule", sa.Column(column, sa.Text(), nullable=True), schema=schema)


def downgrade() -> None:
    schema = target_schema()
    for column in ("lane_key", "rate_key", "concurrency_key", "priority"):
        op.drop_column("schedule", column, schema=schema)
