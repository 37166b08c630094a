"""When a burst worker calls the queue empty (``shutdown.wait_burst_done``).

The race it must not lose: the burst asks the database whether a bounced job is still to
come while the claimer, woken by its own timer, is claiming that very job. The row is
then 'executing' (not 'ready', so the question does not see it) and not yet in the
registry (the claim has not returned). Before the fix the burst took that for "nothing
left" and stopped, and the shutdown handed the claimed job back: `acta worker --burst`
exited 0 with a keyed job still 'ready' (tests/e2e/test_burst.py, seen under load).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from acta_sqla.worker.clock import Clock
from acta_sqla.worker.shutdown import wait_burst_done


class Claimer:
    def __init__(self) -> None:
        self.idle = asyncio.Event()
        self.idle.set()
        self.wake_event = asyncio.Event()
        self.claiming = False
        self.claims = 1
        self.idle_since = 1.0
        self.probes = 0

    def wake(self, probe: bool = False) -> None:
        self.probes += 1


class Store:
    """``bounced_due_in`` answers None (no bounced job is 'ready'); the first time, while
    it is asked, the claimer claims the bounced job (``during_first``)."""

    def __init__(self, claimer: Claimer, registry: list[Any]) -> None:
        self.claimer = claimer
        self.registry = registry
        self.asked = 0
        self.first_answered = asyncio.Event()

    async def bounced_due_in(self, kinds: list[str]) -> float | None:
        self.asked += 1
        if self.asked == 1:
            # The claimer's timer fires: a claim starts and takes the bounced job...
            self.claimer.claiming = True
            await asyncio.sleep(0)
            # ... and returns once the database has answered the burst's question.
            self.claimer.claiming = False
            self.claimer.claims += 1
            self.claimer.idle.clear()
            self.registry.append("the bounced job, claimed")
            self.first_answered.set()
        return None


def a_worker(claimer: Claimer, store: Store, registry: list[Any]) -> Any:
    return SimpleNamespace(
        claimer=claimer,
        registry=registry,
        completed=asyncio.Queue(),
        finalizer=SimpleNamespace(written_at=0.0),
        store=store,
        acta=SimpleNamespace(handlers={"keyed": None}),
        clock=Clock(),
        _stop_requested=asyncio.Event(),
    )


async def test_a_claim_made_while_the_burst_asks_for_bounced_jobs_keeps_the_burst_going() -> None:
    claimer, registry = Claimer(), []
    store = Store(claimer, registry)
    worker = a_worker(claimer, store, registry)
    burst = asyncio.create_task(wait_burst_done(worker))
    await store.first_answered.wait()
    # The answer said "no bounced job", but a claim ran meanwhile. The burst took the
    # answer in the same step that set the event (no await between), so by now it has
    # either returned or gone back to waiting: it must not have returned.
    assert not burst.done(), "the burst stopped with a claimed job in flight"
    # The job ends; the claimer's next claim finds nothing.
    registry.clear()
    worker.finalizer.written_at = 2.0
    claimer.idle_since = 3.0
    claimer.claims += 1
    claimer.idle.set()
    await asyncio.wait_for(burst, 5)
    assert store.asked == 2


async def test_a_claim_in_flight_is_not_quiet() -> None:
    claimer, registry = Claimer(), []
    store = Store(claimer, registry)
    worker = a_worker(claimer, store, registry)
    claimer.claiming = True  # a claim statement is running: idle is still set from before
    burst = asyncio.create_task(wait_burst_done(worker))
    await asyncio.sleep(0)  # one turn: the burst takes its first look, then waits
    assert store.asked == 0 and not burst.done()
    claimer.claiming = False
    store.asked = 1  # the next question is answered plainly
    await asyncio.wait_for(burst, 5)
    assert store.asked == 2
