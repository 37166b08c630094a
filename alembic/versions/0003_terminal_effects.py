"""terminal effects: one trigger for every way out of executing or into a terminal state

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03

Three statements end an attempt or a job: the worker's ``complete_executions``, recovery's
finish of expired leases, and the session's cancel. Effects that must follow EVERY such
change (free the attempt's concurrency slots; later, hand a lane on and tell a parent)
live in one place that all three go through: the ``job_terminal_effects`` trigger.

Row-level with a WHEN clause that PostgreSQL checks without calling the function (like the
NOTIFY trigger of 0001), so a plain job (no concurrency key) pays one expression per
updated row and no function call; a statement-level trigger with transition tables would
instead copy every updated row of every claim, heartbeat and completion into tuplestores
and run the function each time. The WHEN clause names the effects' inputs: a row without
a concurrency key (and, later, without a lane or a parent) has nothing to undo.
"""

from collections.abc import Sequence

from acta_sqla.migrate import target_schema
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TERMINAL = "('succeeded', 'failed', 'cancelled')"


def upgrade() -> None:
    schema = target_schema()
    # The slot is held by one execution: the attempt's own (OLD.execution_id; no writer
    # changes it when it ends the attempt). A slot of another execution of the same job
    # (an attempt recovery already ended, whose successor took the key again) is not ours
    # to free. Slots are keyed by the job's concurrency key, so the delete is one primary
    # key lookup.
    op.execute(f"""
        CREATE FUNCTION "{schema}".job_terminal_effects() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            DELETE FROM "{schema}".concurrency_slot
            WHERE namespace = OLD.namespace AND key = OLD.concurrency_key
              AND job_id = OLD.id AND execution_id = OLD.execution_id;
            RETURN NULL;
        END $$""")
    op.execute(f"""
        CREATE TRIGGER job_terminal_effects AFTER UPDATE OF status ON "{schema}".job
        FOR EACH ROW
        WHEN (OLD.concurrency_key IS NOT NULL
              AND OLD.status IS DISTINCT FROM NEW.status
              AND (OLD.status = 'executing' OR NEW.status IN {TERMINAL}))
        EXECUTE FUNCTION "{schema}".job_terminal_effects()""")


def downgrade() -> None:
    schema = target_schema()
    op.execute(f'DROP TRIGGER IF EXISTS job_terminal_effects ON "{schema}".job')
    op.execute(f'DROP FUNCTION IF EXISTS "{schema}".job_terminal_effects()')
