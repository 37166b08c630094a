"""a child counts only toward the wait that spawned it

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04

Until now a child's terminal transition decremented its parent's ``pending_children``
whenever the parent was ``waiting``, whichever wait the child belonged to: a child left
running from an earlier wait (its parent cancelled, then retried by an operator, then
waiting for new children; or a finished child retried by an operator after its parent
had resumed) counted toward the parent's later wait and resumed it before its own
children had ended.

``job.parent_execution_id``: the execution id (fencing token) of the parent's attempt
that spawned the child, set by the completion's ``spawn`` part. A waiting parent keeps
the execution id of the attempt that parked it, so the trigger now counts a child only
while ``parent.execution_id = child.parent_execution_id``: the wait it was spawned for.
Children spawned before this revision (NULL) count as before.
"""

from collections.abc import Sequence

import sqlalchemy as sa

from acta_sqla.migrate import target_schema
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TERMINAL = "('succeeded', 'failed', 'cancelled')"
LANE_LOCK = (
    "pg_advisory_xact_lock(hashtextextended('acta.lane' || chr(31) || OLD.namespace"
    " || chr(31) || OLD.lane_key, 0))"
)


def _function(s: str, by_wait: bool) -> str:
    """The terminal-effects function of 0007, with (``by_wait``) the child counted only
    toward the wait that spawned it."""
    this_wait = (
        " AND (OLD.parent_execution_id IS NULL OR execution_id = OLD.parent_execution_id)"
        if by_wait
        else ""
    )
    return f"""
        CREATE OR REPLACE FUNCTION {s}.job_terminal_effects() RETURNS trigger
        LANGUAGE plpgsql SET enable_seqscan = off AS $$
        BEGIN
            IF OLD.concurrency_key IS NOT NULL THEN
                DELETE FROM {s}.concurrency_slot
                WHERE namespace = OLD.namespace AND key = OLD.concurrency_key
                  AND job_id = OLD.id AND execution_id = OLD.execution_id;
            END IF;
            IF OLD.lane_key IS NOT NULL
               AND (OLD.status <> 'waiting' OR OLD.awaited_signal IS NOT NULL
                    OR OLD.pending_children > 0)
               AND NEW.status IN {TERMINAL} THEN
                PERFORM {LANE_LOCK};
                UPDATE {s}.job SET status = 'ready', run_at = greatest(run_at, now())
                WHERE id = (
                    SELECT j.id FROM {s}.job AS j
                    WHERE j.namespace = OLD.namespace AND j.lane_key = OLD.lane_key
                      AND j.status = 'waiting' AND j.id <> OLD.id
                    ORDER BY j.id LIMIT 1
                );
            END IF;
            IF OLD.parent_id IS NOT NULL THEN
                IF NEW.status IN {TERMINAL} AND OLD.status NOT IN {TERMINAL} THEN
                    -- One child fewer; the last one makes the parent ready.
                    UPDATE {s}.job SET
                        pending_children = pending_children - 1,
                        status = CASE WHEN pending_children = 1 THEN 'ready' ELSE status END,
                        run_at = CASE WHEN pending_children = 1 THEN now() ELSE run_at END,
                        resumed = CASE WHEN pending_children = 1 THEN 'children'
                                       ELSE resumed END
                    WHERE id = OLD.parent_id AND status = 'waiting'
                      AND pending_children > 0{this_wait};
                ELSIF OLD.status IN {TERMINAL} AND NEW.status NOT IN {TERMINAL} THEN
                    -- An operator's retry of a finished child: pending again.
                    UPDATE {s}.job SET pending_children = pending_children + 1
                    WHERE id = OLD.parent_id AND status = 'waiting'
                      AND pending_children > 0{this_wait};
                END IF;
            END IF;
            IF OLD.pending_children > 0 AND NEW.status = 'cancelled' THEN
                UPDATE {s}.job SET status = 'cancelled', cancel_requested = true,
                                   finished_at = now()
                WHERE parent_id = OLD.id AND status IN ('ready', 'waiting');
                UPDATE {s}.job SET cancel_requested = true
                WHERE parent_id = OLD.id AND status = 'executing';
            END IF;
            RETURN NULL;
        END $$"""


def upgrade() -> None:
    schema = target_schema()
    op.add_column(
        "job", sa.Column("parent_execution_id", sa.BigInteger(), nullable=True), schema=schema
    )
    op.execute(_function(f'"{schema}"', by_wait=True))


def downgrade() -> None:
    schema = target_schema()
    op.execute(_function(f'"{schema}"', by_wait=False))
    op.drop_column("job", "parent_execution_id", schema=schema)
