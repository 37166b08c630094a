"""The finalizer: one per worker; writes every completion of a batch in one round trip."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from loguru import logger

from .. import _faults as faults
from ..errors import StatementRefused
from ..settings import (
    BATCH_MAX_BYTES,
    BATCH_MAX_COMPLETIONS,
    BATCH_WINDOW_SECONDS,
    WRITE_REPEAT_FIRST_SECONDS,
    WRITE_REPEAT_JITTER,
    WRITE_REPEAT_MAX_SECONDS,
    WRITE_REPEAT_WARNINGS,
)
from ..values import Completion
from . import completions
from .clock import Clock
from .inflight import EntryState, Registry
from .stage import LoopStage

log = logger.bind(stage="finalizer")

STOP = None
"""Put on the Completed channel after the last completion: flush and return."""


class _Flush:
    def __repr__(self) -> str:
        return "FLUSH"


FLUSH: Any = _Flush()
"""Put on the Completed channel when the claimer finds nothing due: no completion can come
before its next claim, so a batch waiting in its 50 ms window is written now."""


class CompleteStore(Protocol):
    async def complete_executions(self, batch: Sequence[Completion]) -> set[int]:
        """The ids whose write applied; a refusal of the database raises
        ``StatementRefused``, a lost connection ``StoreUnavailable``."""
        ...


def repeat_delay(tries: int, rng: random.Random) -> float:
    """Back-off before try ``tries + 1`` of a failed write: 1 s doubling to 30 s, ±25 %."""
    base = min(WRITE_REPEAT_FIRST_SECONDS * 2 ** (tries - 1), WRITE_REPEAT_MAX_SECONDS)
    return base * rng.uniform(1 - WRITE_REPEAT_JITTER, 1 + WRITE_REPEAT_JITTER)


class Finalizer(LoopStage):
    """Reads one completion, then everything already waiting, up to 128 completions or
    4 MiB of results; if that first read found a backlog, it waits up to 50 ms more to fill
    the batch (ended early when the claimer finds nothing due: no completion can come
    before its next claim), and a lone completion never waits. The write repeats until it
    lands (or the worker gives up on it at shutdown); then the wakes, the metric, and the
    entries go."""

    def __init__(
        self,
        store: CompleteStore,
        registry: Registry,
        completed: asyncio.Queue[Completion | None],
        clock: Clock | None = None,
        on_written: Callable[[Sequence[Completion], set[int], float], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.completed = completed
        self.clock = clock or Clock()
        self.on_written = on_written
        self.rng = rng or random.Random()
        self.batches = 0
        self.written_at = 0.0
        """When the last batch landed (the clock's time)."""
        self.abandon = False
        """Set at the second signal (:meth:`give_up`) or when the stop's time ran out: a
        failed write is no longer repeated."""
        self._carry: Completion | None = None
        self._stop_seen = False
        self._flushed = False
        super().__init__()
        self._pause: asyncio.Future[None] | None = None
        """The pause before a failed write's repeat (cancelled by :meth:`give_up`)."""

    # ------------------------------------------------------------------ lifecycle

    task_name = "acta-finalizer"

    def give_up(self) -> None:
        """The second signal: stop repeating writes that fail. A write that lands still
        lands (an interrupted attempt's completion, say); one that fails is given up at
        once, a repeat's pause included, and its rows come back through recovery."""
        self.abandon = True
        if self._pause is not None:
            self._pause.cancel()

    async def stop(self, seconds: float) -> None:
        """Flush: put STOP behind the last completion and let the loop write everything
        before it. What is still unwritten ``seconds`` after the call is given up: the loop
        is cancelled and those rows come back through recovery. The time counts from the
        call, so a full channel (writes failing while the executors kept finishing) cannot
        hold the stop behind its own STOP. Idempotent."""
        if not self._begin_stop():
            return
        task = self._task
        if task is None:
            return
        try:
            async with asyncio.timeout(seconds):
                await self.completed.put(STOP)
                await asyncio.shield(task)
        except TimeoutError:
            self.abandon = True
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        except Exception:
            pass  # the loop crashed: its on_ended callback reports it
        unwritten = sum(1 for e in self.registry if e.state is EntryState.FINALIZING)
        if self.abandon and unwritten:
            log.bind(event="completion_abandoned", count=unwritten).error(
                "giving up on {} unwritten completion(s) at shutdown; their rows return "
                "through recovery once their leases run out",
                unwritten,
            )

    async def run(self) -> None:
        """Batches until STOP has come and everything before it is written."""
        while not self._stop_seen or self._carry is not None:
            await self.run_once()

    async def run_once(self) -> list[Completion]:
        """One batch: assemble it (:meth:`next_batch`) and write it (:meth:`write`);
        returns it (empty when only a STOP or FLUSH marker came)."""
        batch = await self.next_batch()
        if batch:
            await self.write(batch)
        return batch

    # ------------------------------------------------------------------ one batch

    async def next_batch(self) -> list[Completion]:
        """Assemble one batch by the rules above (empty only when the STOP sentinel came)."""
        first = self._carry
        self._carry = None
        self._flushed = False
        if first is None:
            if self._stop_seen:
                return []
            first = await self.completed.get()
            if first is STOP:
                self._stop_seen = True
                return []
            if first is FLUSH:
                return []  # nothing was waiting to be written
        batch = [first]
        if first.size > BATCH_MAX_BYTES:
            return batch  # a larger single result is written alone
        size = first.size
        backlog = not self.completed.empty()
        size = self._take_waiting(batch, size)
        if backlog and self._room(batch):
            try:
                async with self.clock.timeout(BATCH_WINDOW_SECONDS):
                    while self._room(batch):
                        item = await self.completed.get()
                        if not self._add(batch, item, size):
                            break
                        size += item.size  # type: ignore[union-attr]
                        size = self._take_waiting(batch, size)
            except TimeoutError:
                pass
        return batch

    def _room(self, batch: list[Completion]) -> bool:
        return (
            len(batch) < BATCH_MAX_COMPLETIONS
            and self._carry is None
            and not self._stop_seen
            and not self._flushed
        )

    def _add(self, batch: list[Completion], item: Completion | None, size: int) -> bool:
        if item is STOP:
            self._stop_seen = True
            return False
        if item is FLUSH:
            self._flushed = True  # the window closes: nothing more comes before a claim
            return False
        assert item is not None
        if size + item.size > BATCH_MAX_BYTES:
            self._carry = item
            return False
        batch.append(item)
        return True

    def _take_waiting(self, batch: list[Completion], size: int) -> int:
        while self._room(batch) and not self.completed.empty():
            item = self.completed.get_nowait()
            if not self._add(batch, item, size):
                break
            size += item.size  # type: ignore[union-attr]
        return size

    def flush(self) -> None:
        """The claimer found nothing due: close a waiting batch's window now. (A full
        channel needs no such nudge: the batch fills from it.)"""
        with contextlib.suppress(asyncio.QueueFull):
            self.completed.put_nowait(FLUSH)

    async def write(self, batch: list[Completion]) -> set[int]:
        """One ``complete_executions`` call for the whole batch, repeated until it lands."""
        started = self.clock.now()
        # The batch usually fills as the executors finish a claim's rows, which is also
        # when the claimer asks for the next ones: let it send first (one loop turn), as
        # the claim is what the executors wait for and this write is not.
        await asyncio.sleep(0)
        try:
            applied = await self._land(batch)
        except _GivenUp:
            # Left in the registry as Finalizing: the stop counts and logs them.
            return set()
        self.written_at = self.clock.now()
        self._settle(batch, applied, self.written_at - started)
        return applied

    async def _land(self, batch: list[Completion], fallback: bool = False) -> set[int]:
        """Write ``batch`` until it lands: every error repeats (1 s -> 30 s, +-25 %) except
        one that proves the data unwritable, which splits the batch (``_write_apart``). The
        single writes of a split repeat the same way, so a transient error while writing
        apart (a lock timeout, a lost connection) delays them instead of ending the stage."""
        tries = 0
        while True:
            try:
                if faults.active is not None:  # tests only (acta_sqla.testing.faults)
                    await faults.active.reached("before_completion_commit")
                return await self.store.complete_executions(batch)
            except StatementRefused as exc:
                if _is_data_error(exc):
                    return await self._write_apart(batch, exc, fallback)
                error: Exception = exc
            except Exception as exc:
                error = exc
            tries += 1
            if not self.abandon:
                delay = repeat_delay(tries, self.rng)
                level = "WARNING" if tries <= WRITE_REPEAT_WARNINGS else "ERROR"
                log.bind(event="completion_write_failed", tries=tries).log(
                    level,
                    "writing {} completions failed (try {}), repeating in {:.1f}s: {}",
                    len(batch),
                    tries,
                    delay,
                    error,
                )
                await self._pause_before_repeat(delay)
            if self.abandon:  # the second signal, before the try or during the pause
                raise _GivenUp

    async def _pause_before_repeat(self, seconds: float) -> None:
        """The clock's sleep, cut short by :meth:`give_up`."""
        self._pause = asyncio.ensure_future(self.clock.sleep(seconds))
        try:
            await asyncio.wait((self._pause,))
        finally:
            self._pause.cancel()
            self._pause = None

    async def _write_apart(
        self, batch: list[Completion], exc: StatementRefused, fallback: bool
    ) -> set[int]:
        """A statement the database refused for its data (never for the connection): write
        each completion alone, and one that still fails becomes a plain failure without
        its result, so one poison completion cannot block the rest."""
        if len(batch) > 1:
            applied: set[int] = set()
            for c in batch:
                applied |= await self._land([c])
            return applied
        c = batch[0]
        if fallback:
            # Even the plain failure (no result, a short error text) cannot be stored: the
            # row is left to its lease, and recovery charges the attempt.
            log.bind(event="completion_refused", job_id=c.job_id).error(
                "job {}: even the fallback completion was refused ({}); its row comes back "
                "through recovery",
                c.job_id,
                exc,
            )
            return set()
        log.bind(event="completion_refused", job_id=c.job_id).error(
            "the database refused job {}'s completion ({}); recording it as failed",
            c.job_id,
            exc,
        )
        return await self._land([completions.refused(c, str(exc))], fallback=True)

    def _settle(self, batch: Sequence[Completion], applied: set[int], seconds: float) -> None:
        lost = [c for c in batch if c.job_id not in applied] if len(applied) < len(batch) else []
        if lost:
            log.bind(event="lease_lost", count=len(lost)).warning(
                "{} completion(s) matched nothing (lease lost: the row was recovered or taken "
                "by another worker): jobs {}",
                len(lost),
                [c.job_id for c in lost[:10]],
            )
        for c in batch:
            self.registry.remove((c.job_id, c.execution_id))
        self.batches += 1
        if self.on_written is not None:
            self.on_written(batch, applied, seconds)


class _GivenUp(Exception):
    """A failed write is not repeated: the worker is stopping now (:meth:`Finalizer.give_up`)."""


def _is_data_error(exc: StatementRefused) -> bool:
    """True only when the error proves the data itself unwritable (class 22 or 54): any
    other refusal (a revoked privilege 42501, an internal error XX000, a lock timeout) may
    pass, so the write repeats like a lost connection instead of failing jobs whose
    handlers succeeded (the seed: "the write repeats until it lands")."""
    return exc.data_unwritable
