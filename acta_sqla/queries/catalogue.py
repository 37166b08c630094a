"""The worker's statements rendered once for one schema: what ``store.WorkerStore`` runs.

Each statement is built by a named function in the module of its concern (``claim``,
``complete``, ``heartbeat``, ``recovery``, ``locks``, ``definitions``, ``workers``) and
names its guard: every state change matches status plus the (job, execution) pair inside
the statement itself. No SQLAlchemy here: a worker process never needs to load it.
"""

from __future__ import annotations

from ..settings import SCHEMA_VERSION_TABLE
from . import (
    admission,
    claim,
    complete,
    definitions,
    heartbeat,
    locks,
    recovery,
    schedules,
    waits,
    workers,
)


class WorkerSQL:
    """The worker's statements, rendered once for one schema (asyncpg ``$n`` parameters)."""

    set_application_name = workers.set_application_name()
    """The same for every schema (it names the connection)."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.schema_revision = workers.schema_revision(schema, SCHEMA_VERSION_TABLE)
        self.claim_jobs = claim.claim_jobs(schema)
        self.claim_plain = claim.claim_plain(schema)
        self.claim_plain_lean = claim.claim_plain_lean(schema)
        self.next_due_in = claim.next_due_in(schema)
        self.claim_jobs_unpaused = claim.claim_jobs_unpaused(schema)
        self.claim_plain_unpaused = claim.claim_plain_unpaused(schema)
        self.next_due_in_unpaused = claim.next_due_in_unpaused(schema)
        self.bounced_due_in = claim.bounced_due_in(schema)
        self.complete_executions = complete.complete_executions(schema)
        self.complete_plain = complete.complete_plain(schema)
        self.register_worker = workers.register_worker(schema)
        self.stop_worker = workers.stop_worker(schema)
        self.store_definitions = definitions.store_definitions(schema)
        self.load_definitions = definitions.load_definitions(schema)
        self.heartbeat = heartbeat.heartbeat(schema)
        self.measure_depth = heartbeat.measure_depth(schema)
        self.take_lock = locks.take_lock(schema)
        self.admit = admission.admit(schema)
        self.breaker_record = admission.breaker_record(schema)
        self.children_of = waits.children_of(schema)
        self.lanes_held_above = waits.lanes_held_above(schema)
        self.store_schedules = schedules.store_schedules(schema)
        self.cancel_unstarted_fires = schedules.cancel_unstarted_fires(schema)
        self.unfired_schedules = schedules.unfired_schedules(schema)
        self.lock_schedules = schedules.lock_schedules(schema)
        self.enqueue_fires = schedules.enqueue_fires(schema)
        self.release_lock = locks.release_lock(schema)
        self.select_expired = recovery.select_expired(schema)
        self.finish_expired = recovery.finish_expired(schema)
        self.mark_dead_workers = recovery.mark_dead_workers(schema)
        self.prune_finished = recovery.prune_finished(schema)
        self.stranded_parents = recovery.stranded_parents(schema)
        self.lock_parents = recovery.lock_parents(schema)
        self.recount_parents = recovery.recount_parents(schema)
        self.headless_lanes = recovery.headless_lanes(schema)
        self.lock_lane = recovery.lock_lane(schema)
        self.promote_lane = recovery.promote_lane(schema)
        self.fail_deadlocked = recovery.fail_deadlocked(schema)
