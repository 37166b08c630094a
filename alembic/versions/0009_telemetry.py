"""telemetry: a job's trace context, and the namespace's turn to measure its depth

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

* ``job.trace_context``: the W3C trace context (``traceparent``, ``tracestate``) current
  when the job was enqueued, as JSON text; NULL when nothing was being traced. A worker
  with an OpenTelemetry SDK runs each attempt in a span whose parent it is
  (docs/observability.md).
* ``namespace.depth_due_at``: the queue-depth gauge is fed by ONE query per heartbeat
  interval per namespace, taken by whichever worker's heartbeat (with a metrics SDK)
  finds it due, as the recovery pass is.
"""

from collections.abc import Sequence

import sqlalchemy as sa

from acta_sqla.migrate import target_schema
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = target_schema()
    op.add_column("job", sa.Column("trace_context", sa.Text(), nullable=True), schema=schema)
    op.add_column(
        "namespace",
        sa.Column(
            "depth_due_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("'-infinity'::timestamptz"),
            nullable=False,
        ),
        schema=schema,
    )


def downgrade() -> None:
    schema = target_schema()
    op.drop_column("namespace", "depth_due_at", schema=schema)
    op.drop_column("job", "trace_context", schema=schema)
