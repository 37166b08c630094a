"""a job's final attempt lives on its row; acta.attempt is the whole history

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05

Issue 30 (the database's cost per job).

* ``job.outcome``, ``job.attempt_error``: the facts of an attempt that ENDS the job (a
  charged attempt after which the job is succeeded, failed or cancelled) are written to
  the job row by the completion's fenced update, which rewrites that row anyway, instead
  of into a new ``execution`` row: ``outcome`` is the attempt's outcome, ``attempt_error``
  its error (``{"type", "message", "traceback"}``, NULL when it raised none); its
  execution id, number, worker, claim, start and end are the row's ``execution_id``,
  ``attempts``, ``worker_id``, ``claimed_at``, ``started_at`` and ``finished_at``. An
  ``execution`` row is written only for attempts that do not end the job (retries, waits,
  losses, interruptions), and for an attempt the budget did not charge. Per drained job
  that is one heap insert and one index entry fewer.
* ``acta.attempt``: the view that is the ONE place to read every attempt of every job:
  the ``execution`` rows, and each finished job's final attempt from its row. ``acta
  jobs show`` and the dashboard read it (``queries/inspect.py``).
* ``job_reopen_history``: an AFTER UPDATE trigger for a finished job that leaves its
  terminal state (an operator's retry, a hand-written UPDATE): its final attempt is
  copied into ``execution`` and the row's two columns cleared, before any later statement
  can claim the job and overwrite the attempt's columns.
* No BEFORE UPDATE row trigger on ``job`` any more. PostgreSQL locks every row an UPDATE
  changes on a table that has one (before it even tests the trigger's WHEN clause), and
  logs that lock: a WAL record per row the completion updates, for a trigger that serves
  an operator's retry of a laned job. ``job_lane_enter_retry`` (0006, BEFORE UPDATE: a
  laned job retried into a busy lane waits) becomes ``job_lane_reenter``, an AFTER UPDATE
  trigger that moves such a job from ``ready`` to ``waiting`` under the lane's lock. It
  counts the lane's heads only (ready, executing, or waiting for a signal or children),
  not the jobs queued behind one: the AFTER triggers of one statement run once all its
  rows are updated, so jobs retried together see each other, and the last of them to
  decide finds the others queued and heads the lane (a lane whose queued jobs have no
  head is given one instead of gaining one more queued job).

* ``job`` gets ``fillfactor = 50``: inserts leave half of each heap page free, so the
  claim's and the completion's new row versions (neither update is HOT: both change
  ``status``, which the partial indexes' predicates read) fit on the old version's page.
  An update that does not fit first writes a lock record for the old version and then the
  whole new version to another page; one that fits writes neither the lock nor the
  unchanged prefix and suffix of the row. Pages written before this migration keep their
  fill until their rows are pruned (no table rewrite).

Existing rows are carried over as they are: the final attempts of jobs finished before
this migration already have their ``execution`` rows (their ``outcome`` stays NULL), and
the view shows them once.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from acta_sqla.migrate import target_schema
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TERMINAL = "('succeeded', 'failed', 'cancelled')"
LANE_LOCK = (
    "pg_advisory_xact_lock(hashtextextended('acta.lane' || chr(31) || NEW.namespace"
    " || chr(31) || NEW.lane_key, 0))"
)

# The terminal-effects trigger's WHEN: 0007's, and this revision's, which no longer calls
# the row function for a child's own terminal transition (the statement trigger counts it).
WHEN_0007 = f"""(OLD.status IS DISTINCT FROM NEW.status AND (
                 ((OLD.concurrency_key IS NOT NULL OR OLD.lane_key IS NOT NULL)
                  AND (OLD.status = 'executing' OR NEW.status IN {TERMINAL}))
                 OR (OLD.parent_id IS NOT NULL
                     AND (NEW.status IN {TERMINAL} OR OLD.status IN {TERMINAL}))
                 OR (OLD.pending_children > 0 AND NEW.status = 'cancelled')))"""
WHEN_0015 = f"""(OLD.status IS DISTINCT FROM NEW.status AND (
                 ((OLD.concurrency_key IS NOT NULL OR OLD.lane_key IS NOT NULL)
                  AND (OLD.status = 'executing' OR NEW.status IN {TERMINAL}))
                 OR (OLD.parent_id IS NOT NULL AND OLD.status IN {TERMINAL})
                 OR (OLD.pending_children > 0 AND NEW.status = 'cancelled')))"""
OLD_LANE_LOCK = LANE_LOCK.replace("NEW.", "OLD.")


def terminal_effects(s: str, children_by_statement: bool) -> str:
    """The row function of 0012; with ``children_by_statement`` without the child's
    decrement of its waiting parent, which ``job_children_done`` does per statement."""
    this_wait = " AND (OLD.parent_execution_id IS NULL OR execution_id = OLD.parent_execution_id)"
    decrement = (
        ""
        if children_by_statement
        else f"""
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
                ELS"""
    )
    # 0012's branch ends "ELSIF" into the retry's; alone, the retry's branch is an "IF".
    retried = (decrement or "\n" + " " * 16) + "IF"
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
                PERFORM {OLD_LANE_LOCK};
                UPDATE {s}.job SET status = 'ready', run_at = greatest(run_at, now())
                WHERE id = (
                    SELECT j.id FROM {s}.job AS j
                    WHERE j.namespace = OLD.namespace AND j.lane_key = OLD.lane_key
                      AND j.status = 'waiting' AND j.id <> OLD.id
                    ORDER BY j.id LIMIT 1
                );
            END IF;
            IF OLD.parent_id IS NOT NULL THEN{retried} OLD.status IN {TERMINAL}
                   AND NEW.status NOT IN {TERMINAL} THEN
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


def terminal_effects_trigger(s: str, when: str) -> list[str]:
    return [
        f"DROP TRIGGER job_terminal_effects ON {s}.job",
        f"""CREATE TRIGGER job_terminal_effects AFTER UPDATE OF status ON {s}.job
        FOR EACH ROW WHEN {when}
        EXECUTE FUNCTION {s}.job_terminal_effects()""",
    ]


def children_done(s: str) -> str:
    """Once per UPDATE statement: the children that statement ended, counted per parent
    and per wait, taken off each waiting parent's count in ONE update of the parent (the
    last ones make it ready), where the row trigger updated the parent once per child."""
    return f"""
        CREATE FUNCTION {s}.job_children_done() RETURNS trigger
        LANGUAGE plpgsql SET enable_seqscan = off AS $$
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM ended WHERE parent_id IS NOT NULL
                                                AND status IN {TERMINAL}) THEN
                RETURN NULL;
            END IF;
            UPDATE {s}.job AS p SET
                pending_children = p.pending_children - least(d.n, p.pending_children),
                status = CASE WHEN p.pending_children <= d.n THEN 'ready' ELSE p.status END,
                run_at = CASE WHEN p.pending_children <= d.n THEN now() ELSE p.run_at END,
                resumed = CASE WHEN p.pending_children <= d.n THEN 'children'
                               ELSE p.resumed END
            FROM (
                -- Each child counts toward the wait that spawned it only (0012): the
                -- parent's attempt now, read here and checked again on the locked row.
                SELECT w.id, w.execution_id, count(*) AS n
                FROM ended AS n
                JOIN before AS o ON o.id = n.id
                JOIN {s}.job AS w ON w.id = n.parent_id
                WHERE n.parent_id IS NOT NULL
                  AND n.status IN {TERMINAL} AND o.status NOT IN {TERMINAL}
                  AND (n.parent_execution_id IS NULL
                       OR n.parent_execution_id = w.execution_id)
                GROUP BY w.id, w.execution_id
            ) AS d
            WHERE p.id = d.id AND p.status = 'waiting' AND p.pending_children > 0
              AND p.execution_id IS NOT DISTINCT FROM d.execution_id;
            RETURN NULL;
        END $$"""


def attempt_view(s: str) -> str:
    return f"""
        CREATE VIEW {s}.attempt AS
        SELECT e.job_id, e.id, e.attempt, e.worker_id, e.claimed_at, e.started_at,
               e.finished_at, e.outcome, e.error_type, e.error_message, e.traceback
        FROM {s}.execution AS e
        UNION ALL
        SELECT j.id, j.execution_id, j.attempts, j.worker_id, j.claimed_at, j.started_at,
               j.finished_at, j.outcome, j.attempt_error->>'type',
               j.attempt_error->>'message', j.attempt_error->>'traceback'
        FROM {s}.job AS j
        WHERE j.outcome IS NOT NULL"""


def upgrade() -> None:
    schema = target_schema()
    s = f'"{schema}"'
    op.add_column("job", sa.Column("outcome", sa.Text(), nullable=True), schema=schema)
    op.add_column("job", sa.Column("attempt_error", JSONB(), nullable=True), schema=schema)
    op.execute(attempt_view(s))
    op.execute(f"ALTER TABLE {s}.job SET (fillfactor = 50)")
    op.execute(f"""
        CREATE FUNCTION {s}.job_reopen_history() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO {s}.execution (job_id, id, attempt, worker_id, claimed_at,
                                       started_at, finished_at, outcome, error_type,
                                       error_message, traceback)
            VALUES (OLD.id, OLD.execution_id, OLD.attempts, OLD.worker_id, OLD.claimed_at,
                    OLD.started_at, coalesce(OLD.finished_at, now()), OLD.outcome,
                    OLD.attempt_error->>'type', OLD.attempt_error->>'message',
                    OLD.attempt_error->>'traceback')
            ON CONFLICT DO NOTHING;
            UPDATE {s}.job SET outcome = NULL, attempt_error = NULL WHERE id = OLD.id;
            RETURN NULL;
        END $$""")
    op.execute(f"""
        CREATE TRIGGER job_reopen_history AFTER UPDATE ON {s}.job
        FOR EACH ROW
        WHEN (OLD.outcome IS NOT NULL AND OLD.status IN {TERMINAL}
              AND NEW.status NOT IN {TERMINAL})
        EXECUTE FUNCTION {s}.job_reopen_history()""")
    op.execute(f"DROP TRIGGER job_lane_enter_retry ON {s}.job")
    op.execute(f"""
        CREATE FUNCTION {s}.job_lane_reenter() RETURNS trigger LANGUAGE plpgsql
        SET enable_seqscan = off AS $$
        BEGIN
            PERFORM {LANE_LOCK};
            IF EXISTS (
                SELECT 1 FROM {s}.job AS j
                WHERE j.namespace = NEW.namespace AND j.lane_key = NEW.lane_key
                  AND j.status IN ('ready', 'executing', 'waiting') AND j.id <> NEW.id
                  AND (j.status <> 'waiting' OR j.awaited_signal IS NOT NULL
                       OR j.pending_children > 0)
            ) THEN
                UPDATE {s}.job SET status = 'waiting' WHERE id = NEW.id AND status = 'ready';
            END IF;
            RETURN NULL;
        END $$""")
    op.execute(f"""
        CREATE TRIGGER job_lane_reenter AFTER UPDATE OF status ON {s}.job
        FOR EACH ROW WHEN (NEW.lane_key IS NOT NULL AND NEW.status = 'ready'
                           AND OLD.status IN {TERMINAL})
        EXECUTE FUNCTION {s}.job_lane_reenter()""")
    op.execute(terminal_effects(s, children_by_statement=True))
    for statement in terminal_effects_trigger(s, WHEN_0015):
        op.execute(statement)
    op.execute(children_done(s))
    op.execute(f"""
        CREATE TRIGGER job_children_done AFTER UPDATE ON {s}.job
        REFERENCING OLD TABLE AS before NEW TABLE AS ended
        FOR EACH STATEMENT EXECUTE FUNCTION {s}.job_children_done()""")


def downgrade() -> None:
    schema = target_schema()
    s = f'"{schema}"'
    # The final attempts kept on job rows go back to execution rows first.
    op.execute(f"""
        INSERT INTO {s}.execution (job_id, id, attempt, worker_id, claimed_at, started_at,
                                   finished_at, outcome, error_type, error_message, traceback)
        SELECT j.id, j.execution_id, j.attempts, j.worker_id, j.claimed_at, j.started_at,
               coalesce(j.finished_at, now()), j.outcome, j.attempt_error->>'type',
               j.attempt_error->>'message', j.attempt_error->>'traceback'
        FROM {s}.job AS j WHERE j.outcome IS NOT NULL
        ON CONFLICT DO NOTHING""")
    op.execute(f"DROP TRIGGER IF EXISTS job_children_done ON {s}.job")
    op.execute(f"DROP FUNCTION IF EXISTS {s}.job_children_done()")
    op.execute(terminal_effects(s, children_by_statement=False))
    for statement in terminal_effects_trigger(s, WHEN_0007):
        op.execute(statement)
    op.execute(f"DROP TRIGGER IF EXISTS job_lane_reenter ON {s}.job")
    op.execute(f"DROP FUNCTION IF EXISTS {s}.job_lane_reenter()")
    op.execute(f"""
        CREATE TRIGGER job_lane_enter_retry BEFORE UPDATE OF status ON {s}.job
        FOR EACH ROW WHEN (NEW.lane_key IS NOT NULL AND NEW.status = 'ready'
                           AND OLD.status IN {TERMINAL})
        EXECUTE FUNCTION {s}.job_lane_enter()""")
    op.execute(f"DROP TRIGGER IF EXISTS job_reopen_history ON {s}.job")
    op.execute(f"DROP FUNCTION IF EXISTS {s}.job_reopen_history()")
    op.execute(f"DROP VIEW IF EXISTS {s}.attempt")
    op.execute(f"ALTER TABLE {s}.job RESET (fillfactor)")
    op.drop_column("job", "attempt_error", schema=schema)
    op.drop_column("job", "outcome", schema=schema)
