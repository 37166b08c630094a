"""The worker's stop: when a burst worker is done, the graceful sequence, and the kill of
fault injection.

Graceful (:func:`shutdown`): stop claiming; hand back claimed-but-unstarted rows
uncharged; let running handlers finish within the grace period (a second signal, or the
end of the grace, cancels them: they are retried uncharged); flush the finalizer; stop the
heartbeat (it renews what is still held until the last write), the lifeline and the
listener; mark the worker row stopped. :func:`kill` writes nothing more at all.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from loguru import logger

from ..values import Outcome
from .completions import handback
from .inflight import Entry, EntryState, Registry

if TYPE_CHECKING:
    from .stage import Stage
    from .supervisor import Worker

log = logger.bind(stage="worker")

# After handlers are cancelled at shutdown, how long to wait for them to end: the setting
# ``forced_stop_wait`` (ACTA_FORCED_STOP_WAIT, `acta worker --forced-stop-wait`, 10 s).
STUBBORN_WAIT_SECONDS = 1.0
"""Once a handler is known to ignore its cancel, how long the other executors get to end."""
FLUSH_SECONDS = 30.0
"""How long the last completions may keep failing to write before the worker gives up on
them (their rows then come back through recovery); after a second signal a failed write
is not repeated at all."""

BURST_RECHECK = 0.05
"""A burst worker's shortest wait before it looks again for a bounced job that is due."""


def executors_wait(stubborn: list[Entry], forced_stop: float) -> float:
    """How long the executors get to end (``forced_stop``: the forced-stop wait): an
    executor whose handler swallowed its cancel never reads the None, so it is not waited
    for again (its row is left to its lease; the CLI exits past its task)."""
    return STUBBORN_WAIT_SECONDS if stubborn else forced_stop


def executing(registry: Registry) -> int:
    """Attempts not yet handed to the finalizer."""
    return sum(1 for e in registry if e.state is not EntryState.FINALIZING)


def quiet(worker: Worker) -> bool:
    """Nothing in flight: the last claim found nothing, no claim is running or asked for,
    no attempt is executing, no outcome waits for the finalizer."""
    return (
        worker.claimer.idle.is_set()
        and not worker.claimer.claiming
        and len(worker.registry) == 0
        and not worker.claimer.wake_event.is_set()
        and worker.completed.empty()
    )


async def wait_burst_done(worker: Worker) -> None:
    """A burst worker's run: until no job is due and nothing is in flight."""
    while not worker._stop_requested.is_set():
        if quiet(worker):
            if worker.claimer.idle_since >= worker.finalizer.written_at:
                claims = worker.claimer.claims
                # Nothing due. Done, unless admission bounced a job (no free slot of its
                # concurrency key, or its rate window): it waits for its slot or window,
                # not for a time its enqueuer chose, so the burst runs it too. A job
                # delayed on purpose (delay, run_at, a retry's back-off) stays.
                assert worker.store is not None
                try:
                    due_in = await worker.store.bounced_due_in(list(worker.acta.handlers))
                except Exception as exc:  # the database is away: ask again, as the
                    # claimer does (the lifeline stops a worker that cannot reach it)
                    log.warning("burst: could not look for bounced jobs: {}", exc)
                    await worker.clock.wait(worker._stop_requested, 1.0)
                    continue
                if due_in is None:
                    if quiet(worker) and worker.claimer.claims == claims:
                        return
                    # A claim ran while the database was asked (the claimer's own timer:
                    # a bounced job came due). The rows it took were not 'ready' for the
                    # question, nor in the registry yet: look again.
                    continue
                # The claimer wakes by itself when the job is due; look again then.
                await worker.clock.wait(worker._stop_requested, max(due_in, BURST_RECHECK))
                worker.claimer.wake(probe=True)
                continue
            # The last completion may have made rows due (a parent, a lane's next
            # job), and a suspect may have become due: one more claim, a probing one,
            # before calling it done.
            worker.claimer.wake(probe=True)
        await worker.clock.wait(worker._stop_requested, 0.01)


async def shutdown(worker: Worker) -> None:
    if worker.stopped.is_set():
        return
    # From here on, stages ending is the plan, not a crash.
    worker._stop_requested.set()
    await worker.claimer.stop()
    handed = hand_back_unstarted(worker)
    await wait_executing(worker, worker.grace)
    wait = worker.settings.forced_stop_wait
    if running := executing(worker.registry):
        if not worker._force.is_set():  # a second signal waits for nothing (its own line)
            log.bind(event="handlers_cancelled", count=running).warning(
                "the grace is over: cancelling {} running handler(s) and waiting up to {:g}s "
                "for them to end (the forced-stop wait, ACTA_FORCED_STOP_WAIT)",
                running,
                wait,
            )
        interrupt_all(worker)
        await wait_executing(worker, wait)
    worker.stubborn = report_stubborn(worker.registry)
    await worker.executors.stop(executors_wait(worker.stubborn, wait))
    await worker.finalizer.stop(FLUSH_SECONDS)
    if worker.killed:  # crash_at's point was the shutdown's last write: write nothing more
        await bury(worker)
        return
    if worker.breakers is not None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(worker.breakers.drain(), FLUSH_SECONDS)
    await worker.heartbeat.stop()
    await worker.lifeline.stop()
    await worker.listener.stop()
    for task in list(worker._background):
        task.cancel()
    assert worker.store is not None
    try:
        await worker.store.stop_worker()
    except Exception as exc:
        log.warning("could not mark worker {} stopped: {}", worker.worker_id, exc)
    await worker.store.close()
    worker._pool.shutdown(wait=False, cancel_futures=True)
    log.bind(event="worker_stopped", worker_id=worker.worker_id).info(
        "worker {} stopped ({} claimed-but-unstarted handed back, {} left held)",
        worker.worker_id,
        handed,
        len(worker.registry),
    )
    worker.stopped.set()


def hand_back_unstarted(worker: Worker) -> int:
    """Claimed-but-unstarted rows go back ``ready`` at once, uncharged, through the
    finalizer's last batch. One that finds the Completed channel full (its writes are
    failing) is let go instead: the registry forgets it, so its lease runs out and
    recovery returns it, also uncharged (it never started)."""
    claimed, completed = worker.claimed, worker.completed
    handed = 0
    let_go = 0
    while not claimed.empty():
        entry = claimed.get_nowait()
        claimed.task_done()
        if entry is None:
            continue
        try:
            completed.put_nowait(handback(entry.job, 0.0))
        except asyncio.QueueFull:
            worker.registry.remove(entry.key)
            let_go += 1
            continue
        entry.stop_reason = Outcome.HANDBACK
        entry.state = EntryState.FINALIZING
        handed += 1
    if let_go:
        log.bind(event="handback_left_to_lease", count=let_go).warning(
            "{} claimed-but-unstarted row(s) could not be handed back (the completions "
            "are not being written): they return through recovery when their leases "
            "run out, uncharged",
            let_go,
        )
    return handed


async def wait_executing(worker: Worker, seconds: float) -> None:
    clock, force = worker.clock, worker._force
    deadline = clock.now() + seconds
    while executing(worker.registry) and clock.now() < deadline:
        if force.is_set():
            return
        await clock.wait(force, min(0.05, max(0.0, deadline - clock.now())))


def report_stubborn(registry: Registry) -> list[Entry]:
    """Attempts still running after they were cancelled: their handlers swallow
    cancellation. Each is named in the log and left to its lease (recovery takes the
    row back once the lease runs out), so that one bad handler cannot keep the worker
    from exiting."""
    stubborn = [e for e in registry if e.state is EntryState.EXECUTING]
    for entry in stubborn:
        log.bind(event="handler_ignored_cancel", job_id=entry.job.id, kind=entry.job.kind).error(
            "job {} ({}): the handler ignored its cancellation and is still running; "
            "exiting without it (its row comes back through recovery when the lease runs "
            "out)",
            entry.job.id,
            entry.job.kind,
        )
    return stubborn


def interrupt_all(worker: Worker) -> None:
    now = worker.clock.now()
    for entry in worker.registry:
        if entry.state is EntryState.EXECUTING:
            worker.registry.fire(entry, Outcome.INTERRUPTED, now)


def stages(worker: Worker) -> list[Stage]:
    """The stages built so far (a kill may come before the start has built them all)."""
    names = ("claimer", "finalizer", "heartbeat", "executors")
    return [stage for name in names if (stage := getattr(worker, name, None)) is not None]


def kill(worker: Worker) -> None:
    """Stop dead, as SIGKILL stops ``acta worker`` (``testing.faults.crash_at``): every
    stage is cancelled where it stands and every connection is cut at once, so nothing
    more is written: no hand-back, no completion, no stop of the worker row. The rows
    it held stay ``executing`` until their leases run out and recovery takes them
    back. (A sync handler's thread cannot be killed: it runs on, unheard.)"""
    if worker.killed:
        return
    worker.killed = True
    worker._stop_requested.set()  # stages ending now is the plan, not a crash
    worker._force.set()
    tasks: list[asyncio.Task[Any] | None] = [
        *(t for stage in stages(worker) for t in stage.tasks),
        getattr(getattr(worker, "listener", None), "_task", None),
        *worker._background,
    ]
    for task in tasks:
        if task is not None:
            task.cancel()
    if worker.store is not None:
        for rc in worker.store._roles():
            rc._drop()  # terminate: the server rolls back whatever was open
    listener = getattr(worker, "listener", None)
    if listener is not None and listener._conn is not None:
        listener._conn.terminate()
    log.bind(event="worker_killed", worker_id=worker.worker_id).warning(
        "worker {} killed (fault injection): nothing more is written",
        worker.worker_id,
    )


async def bury(worker: Worker) -> None:
    """After :func:`kill`: wait for the cancelled stages, stop the lifeline thread (it
    would renew the dead worker's leases) and the listener; write nothing."""
    tasks = [t for stage in stages(worker) for t in stage.tasks] + list(worker._background)
    current = asyncio.current_task()
    await asyncio.gather(*(t for t in tasks if t is not current), return_exceptions=True)
    await worker.lifeline.stop()
    await worker.listener.stop()
    if worker.store is not None:
        for rc in worker.store._roles():
            rc._drop()
    worker._pool.shutdown(wait=False, cancel_futures=True)
    worker.stopped.set()
