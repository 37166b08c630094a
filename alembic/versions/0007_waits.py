"""durable waits: signals and children, told by the terminal effects

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03

A handler that returns ``WaitForSignal`` or ``WaitForChildren`` parks its job
``waiting`` (issue 12; docs/waits.md). What this revision adds:

* ``job.resumed``: why the job last left a wait (``signal``, ``timeout``, ``children``);
  the claim hands it to the next run as ``ctx.resumed``; a new wait clears it.
* ``job_wait_deadline_idx``: the signal waits, by deadline. Every heartbeat wakes the
  namespace's waits whose deadline passed (one probe of this index, normally empty).
* The terminal-effects trigger gains the parent: a child reaching a terminal state
  decrements its waiting parent's ``pending_children`` in the same statement as its own
  write, and the write that brings it to zero makes the parent ``ready`` (the NOTIFY
  trigger of 0001 wakes the workers). The trigger fires on the status transition, which
  the fenced finish applies at most once per attempt, so a repeated or late completion
  never counts twice. An operator's retry of a finished child (terminal -> ready) while
  its parent still waits counts it again as pending. Cancelling a waiting parent cancels
  its unfinished children (which cancel theirs: trees) and asks executing ones to stop.
* A lane's head that is itself in a durable wait and is cancelled hands the lane on (a
  lane-queued job, ``waiting`` with no wait of its own, still does not).
"""

from collections.abc import Sequence

import sqlalchemy as sa

from acta_sqla.migrate import target_schema
from alembic import op

TERMINAL = "('succeeded', 'failed', 'cancelled')"
LANE_LOCK = (
    "pg_advisory_xact_lock(hashtextextended('acta.lane' || chr(31) || OLD.namespace"
    " || chr(31) || OLD.lane_key, 0))"
)

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# 0006's WHEN clause, kept for the downgrade.
_WHEN_0006 = f"""((OLD.concurrency_key IS NOT NULL OR OLD.lane_key IS NOT NULL)
              AND OLD.status IS DISTINCT FROM NEW.status
              AND (OLD.status = 'executing' OR NEW.status IN {TERMINAL}))"""

_WHEN_0007 = f"""(OLD.status IS DISTINCT FROM NEW.status AND (
                 ((OLD.concurrency_key IS NOT NULL OR OLD.lane_key IS NOT NULL)
                  AND (OLD.status = 'executing' OR NEW.status IN {TERMINAL}))
                 OR (OLD.parent_id IS NOT NULL
                     AND (NEW.status IN {TERMINAL} OR OLD.status IN {TERMINAL}))
                 OR (OLD.pending_children > 0 AND NEW.status = 'cancelled')))"""


def _function(s: str, with_waits: bool) -> str:
    lane_guard = (
        "(OLD.status <> 'waiting' OR OLD.awaited_signal IS NOT NULL OR OLD.pending_children > 0)"
        if with_waits
        else "OLD.status <> 'waiting'"
    )
    waits = (
        f"""
            IF OLD.parent_id IS NOT NULL THEN
                IF NEW.status IN {TERMINAL} AND OLD.status NOT IN {TERMINAL} THEN
                    -- One child fewer; the last one makes the parent ready.
                    UPDATE {s}.job SET
                        pending_children = pending_children - 1,
                        status = CASE WHEN pending_children = 1 THEN 'ready' ELSE status END,
                        run_at = CASE WHEN pending_children = 1 THEN now() ELSE run_at END,
                        resumed = CASE WHEN pending_children = 1 THEN 'children'
                                       ELSE resumed END
                    WHERE id = OLD.parent_id AND status = 'waiting' AND pending_children > 0;
                ELSIF OLD.status IN {TERMINAL} AND NEW.status NOT IN {TERMINAL} THEN
                    -- An operator's retry of a finished child: pending again.
                    UPDATE {s}.job SET pending_children = pending_children + 1
                    WHERE id = OLD.parent_id AND status = 'waiting' AND pending_children > 0;
                END IF;
            END IF;
            IF OLD.pending_children > 0 AND NEW.status = 'cancelled' THEN
                UPDATE {s}.job SET status = 'cancelled', cancel_requested = true,
                                   finished_at = now()
                WHERE parent_id = OLD.id AND status IN ('ready', 'waiting');
                UPDATE {s}.job SET cancel_requested = true
                WHERE parent_id = OLD.id AND status = 'executing';
            END IF;"""
        if with_waits
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
            IF OLD.lane_key IS NOT NULL AND {lane_guard}
               AND NEW.status IN {TERMINAL} THEN
                PERFORM {LANE_LOCK};
                UPDATE {s}.job SET status = 'ready', run_at = greatest(run_at, now())
                WHERE id = (
                    SELECT j.id FROM {s}.job AS j
                    WHERE j.namespace = OLD.namespace AND j.lane_key = OLD.lane_key
                      AND j.status = 'waiting' AND j.id <> OLD.id
                    ORDER BY j.id LIMIT 1
                );
            END IF;{waits}
            RETURN NULL;
        END $$"""


def _trigger(s: str, when: str) -> list[str]:
    return [
        f"DROP TRIGGER job_terminal_effects ON {s}.job",
        f"""CREATE TRIGGER job_terminal_effects AFTER UPDATE OF status ON {s}.job
        FOR EACH ROW WHEN {when}
        EXECUTE FUNCTION {s}.job_terminal_effects()""",
    ]


def upgrade() -> None:
    schema = target_schema()
    s = f'"{schema}"'
    op.add_column("job", sa.Column("resumed", sa.Text(), nullable=True), schema=schema)
    op.create_index(
        "job_wait_deadline_idx",
        "job",
        ["namespace", "run_at"],
        schema=schema,
        postgresql_where=sa.text("status = 'waiting' AND awaited_signal IS NOT NULL"),
    )
    op.execute(_function(s, with_waits=True))
    for statement in _trigger(s, _WHEN_0007):
        op.execute(statement)


def downgrade() -> None:
    schema = target_schema()
    s = f'"{schema}"'
    op.execute(_function(s, with_waits=False))
    for statement in _trigger(s, _WHEN_0006):
        op.execute(statement)
    op.drop_index("job_wait_deadline_idx", table_name="job", schema=schema)
    op.drop_column("job", "resumed", schema=schema)
