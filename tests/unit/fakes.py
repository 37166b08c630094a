"""A fake store and clock to drive the worker's stages deterministically."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence

from acta_sqla.values import Claim, ClaimedJob, Completion, HeartbeatReport, Outcome
from tests.waiting import until as until


def job(
    id: int, kind: str = "noop", args: str = "{}", attempts: int = 1, **kw: object
) -> ClaimedJob:
    return ClaimedJob(
        id=id,
        execution_id=1000 + id,
        kind=kind,
        args_json=args,
        attempts=attempts,
        max_attempts=kw.pop("max_attempts", None),  # type: ignore[arg-type]
        priority=0,
        **kw,  # type: ignore[arg-type]
    )


def done(i: int, result: str | None = None) -> Completion:
    """The succeeded completion of ``job(i)``'s first attempt."""
    return Completion(
        job_id=i,
        execution_id=1000 + i,
        outcome=Outcome.SUCCEEDED,
        status="succeeded",
        attempt=1,
        result_json=result,
    )


class FakeTimer:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """``now`` moves only when told (``advance``), which also runs the timers then due, in
    order; sleeps and waits are recorded and return at once."""

    def __init__(self, start: float = 1000.0) -> None:
        self.t = start
        self.sleeps: list[float] = []
        self.waits: list[float] = []
        self.timers: list[FakeTimer] = []

    def now(self) -> float:
        return self.t

    def call_at(self, when: float, callback: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(when, callback)
        self.timers.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        """Move time on by ``seconds``, running every timer due by then at its own time."""
        end = self.t + seconds
        while True:
            due = [t for t in self.timers if not t.cancelled and t.when <= end]
            if not due:
                break
            timer = min(due, key=lambda t: t.when)
            self.timers.remove(timer)
            self.t = max(self.t, timer.when)
            timer.callback()
        self.timers = [t for t in self.timers if not t.cancelled]
        self.t = end

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds
        await asyncio.sleep(0)

    @contextlib.asynccontextmanager
    async def timeout(self, seconds: float) -> AsyncIterator[None]:
        """Raises TimeoutError in the body once ``advance`` moves time ``seconds`` on."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(None) as scope:
            timer = self.call_at(self.t + seconds, lambda: scope.reschedule(loop.time()))
            try:
                yield
            finally:
                timer.cancel()

    async def wait(self, event: asyncio.Event, seconds: float) -> bool:
        self.waits.append(seconds)
        await asyncio.sleep(0)
        return event.is_set()


class FakeStore:
    """Answers claims from a list of queued batches; records every call."""

    def __init__(self) -> None:
        self.to_claim: list[list[ClaimedJob]] = []
        self.claim_asks: list[int] = []
        self.alone_asks: list[bool] = []
        self.suspect_due: list[bool] = []
        self.claim_errors: list[Exception] = []
        self.claim_called = asyncio.Event()
        self.next_due: float | None = None
        self.batches: list[list[Completion]] = []
        self.written = asyncio.Event()
        self.write_errors: list[Exception] = []
        self.lease_lost: set[int] = set()
        self.heartbeats: list[list[tuple[int, int, bool]]] = []
        self.lock_beats: list[list[tuple[str, int, int]]] = []
        self.report: HeartbeatReport | None = None

    async def claim_jobs(self, limit: int) -> list[ClaimedJob]:
        self.claim_asks.append(limit)
        self.claim_called.set()
        await asyncio.sleep(0)
        if self.claim_errors:
            raise self.claim_errors.pop(0)
        if not self.to_claim:
            return []
        batch = self.to_claim.pop(0)
        assert len(batch) <= limit, f"claimed {len(batch)} rows for {limit} permits"
        return batch

    async def claim(self, limit: int, alone: bool) -> Claim:
        """``claim_jobs``, plus the suspect signal: ``suspect_due`` pops one answer per
        claim (False once empty); ``alone_asks`` records each claim's ``alone``."""
        self.alone_asks.append(alone)
        jobs = await self.claim_jobs(limit)
        return Claim(jobs, self.suspect_due.pop(0) if self.suspect_due else False)

    async def claim_plain(self, limit: int) -> list[ClaimedJob]:
        """The hot claim (no suspect probe): recorded as ``None`` in ``alone_asks``."""
        self.alone_asks.append(None)
        return await self.claim_jobs(limit)

    async def next_due_in(self) -> float | None:
        return self.next_due

    async def complete_executions(self, batch: Sequence[Completion]) -> set[int]:
        await asyncio.sleep(0)
        if self.write_errors:
            raise self.write_errors.pop(0)
        self.batches.append(list(batch))
        self.written.set()
        return {c.job_id for c in batch} - self.lease_lost

    async def heartbeat(
        self, held: Sequence[tuple[int, int, bool]], locks: Sequence[tuple[str, int, int]] = ()
    ) -> HeartbeatReport:
        self.heartbeats.append(list(held))
        self.lock_beats.append(list(locks))
        assert self.report is not None
        return self.report
