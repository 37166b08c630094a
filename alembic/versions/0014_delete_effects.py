"""a hand-written DELETE of an unfinished job strands nothing; waiting parents indexed

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05

Issue 28, items 4 and 10.

* ``job_deleted_effects``: an AFTER DELETE trigger, for a row deleted while still
  ``ready``, ``executing`` or ``waiting`` (never for the prune's finished rows: its WHEN
  clause keeps the function from being called for them). Deleting such a row by hand
  (``DELETE FROM acta.job ...``, or a bulk ``delete(Job)``) used to strand whatever
  counted on it for ever: a parent kept waiting for a child that no longer existed
  (``pending_children`` never reached 0), and a lane whose head was deleted kept its
  queued jobs ``waiting``. The trigger applies the effects of a cancel instead: the
  job's concurrency slot is freed, a lane it headed is handed on to its oldest queued
  job, a parent waiting for it counts it as finished (the last one resumes it), and its
  own unfinished children are cancelled (executing ones asked to stop). ``session.delete``
  of an unfinished job is refused before any SQL (``JobActive``, models.py); this is what
  a hand-written statement gets.
* ``job_children_wait_idx``: the parents waiting for children, by namespace. The
  recovery pass reads them to repair a parent counting children that no longer exist
  (left by older code or a DELETE with triggers disabled), and to walk the wait-for graph
  for cycles across lanes (docs/waits.md).
"""

from collections.abc import Sequence

import sqlalchemy as sa

from acta_sqla.migrate import target_schema
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ACTIVE = "('ready', 'executing', 'waiting')"
LANE_LOCK = (
    "pg_advisory_xact_lock(hashtextextended('acta.lane' || chr(31) || OLD.namespace"
    " || chr(31) || OLD.lane_key, 0))"
)


def upgrade() -> None:
    schema = target_schema()
    s = f'"{schema}"'
    op.create_index(
        "job_children_wait_idx",
        "job",
        ["namespace", "id"],
        schema=schema,
        postgresql_where=sa.text("status = 'waiting' AND pending_children > 0"),
    )
    # An AFTER row trigger runs once the statement has deleted all its rows: a lane
    # deleted whole hands on to nothing, a parent deleted with its children counts
    # nothing, and no row this function updates is one the statement still deletes.
    op.execute(f"""
        CREATE FUNCTION {s}.job_deleted_effects() RETURNS trigger
        LANGUAGE plpgsql SET enable_seqscan = off AS $$
        BEGIN
            IF OLD.concurrency_key IS NOT NULL THEN
                DELETE FROM {s}.concurrency_slot
                WHERE namespace = OLD.namespace AND key = OLD.concurrency_key
                  AND job_id = OLD.id;
            END IF;
            -- The lane's head (not a job queued behind it): the lane moves on.
            IF OLD.lane_key IS NOT NULL
               AND (OLD.status <> 'waiting' OR OLD.awaited_signal IS NOT NULL
                    OR OLD.pending_children > 0) THEN
                PERFORM {LANE_LOCK};
                UPDATE {s}.job SET status = 'ready', run_at = greatest(run_at, now())
                WHERE id = (
                    SELECT j.id FROM {s}.job AS j
                    WHERE j.namespace = OLD.namespace AND j.lane_key = OLD.lane_key
                      AND j.status = 'waiting'
                    ORDER BY j.id LIMIT 1
                );
            END IF;
            -- A child of a wait: one child fewer; the last one makes the parent ready.
            IF OLD.parent_id IS NOT NULL THEN
                UPDATE {s}.job SET
                    pending_children = pending_children - 1,
                    status = CASE WHEN pending_children = 1 THEN 'ready' ELSE status END,
                    run_at = CASE WHEN pending_children = 1 THEN now() ELSE run_at END,
                    resumed = CASE WHEN pending_children = 1 THEN 'children' ELSE resumed END
                WHERE id = OLD.parent_id AND status = 'waiting' AND pending_children > 0
                  AND (OLD.parent_execution_id IS NULL
                       OR execution_id = OLD.parent_execution_id);
            END IF;
            -- A parent: its unfinished children are cancelled, as a cancel does.
            IF OLD.pending_children > 0 THEN
                UPDATE {s}.job SET status = 'cancelled', cancel_requested = true,
                                   finished_at = now()
                WHERE parent_id = OLD.id AND status IN ('ready', 'waiting');
                UPDATE {s}.job SET cancel_requested = true
                WHERE parent_id = OLD.id AND status = 'executing';
            END IF;
            RETURN NULL;
        END $$""")
    op.execute(f"""
        CREATE TRIGGER job_deleted_effects AFTER DELETE ON {s}.job
        FOR EACH ROW
        WHEN (OLD.status IN {ACTIVE}
              AND (OLD.concurrency_key IS NOT NULL OR OLD.lane_key IS NOT NULL
                   OR OLD.parent_id IS NOT NULL OR OLD.pending_children > 0))
        EXECUTE FUNCTION {s}.job_deleted_effects()""")


def downgrade() -> None:
    schema = target_schema()
    s = f'"{schema}"'
    op.execute(f"DROP TRIGGER IF EXISTS job_deleted_effects ON {s}.job")
    op.execute(f"DROP FUNCTION IF EXISTS {s}.job_deleted_effects()")
    op.drop_index("job_children_wait_idx", table_name="job", schema=schema)
