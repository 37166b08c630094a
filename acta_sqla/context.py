"""What a handler receives as its first argument."""

from __future__ import annotations

import json
import threading
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from loguru import logger


@dataclass(slots=True)
class Context:
    """The running attempt of one job.

    ``attempt`` is 1 on the first run and counts every charged attempt since;
    ``execution_id`` is the attempt's fencing token (and its ``Execution`` row's id).
    """

    job_id: int
    kind: str
    args_json: str = field(repr=False)
    """The job's arguments as stored (JSON text); ``args`` is them parsed."""
    attempt: int
    execution_id: int
    namespace: str
    worker_id: int | None = None
    resumed: str | None = None
    """Why this run follows a durable wait: ``"signal"`` (the awaited signal came),
    ``"timeout"`` (it did not, in time), ``"children"`` (every child finished); None if the
    job never left a wait. It stays set on the retries that follow, until the job waits
    again (docs/waits.md)."""
    scheduled_at: datetime | None = None
    """A schedule's fire: its tick (when it was due by the cron); None for other jobs, and
    ``acta schedules run``'s extra fires carry the time they were asked for."""
    children: tuple[Any, ...] = ()
    """The children of this job's waits, in spawn order (``acta_sqla.waits.Child``: ``id``,
    ``kind``, ``status``, ``result``, ``error``); empty for a job that spawned none."""
    trace_id: str | None = None
    """The job's trace id (32 hex digits) from the trace context stored at enqueue; None
    when it has none, or when the worker did not read it (it does with an OpenTelemetry
    SDK configured)."""
    signals_json: str | None = field(default=None, repr=False)
    _signals: dict[str, Any] | None = field(default=None, repr=False)
    _log: Any = field(default=None, repr=False)
    _locker: Any = field(default=None, repr=False)
    _args: dict[str, Any] | None = field(default=None, repr=False)
    _stop: threading.Event | None = field(default=None, repr=False)

    @property
    def should_stop(self) -> bool:
        """True once this attempt has been asked to stop: its execution timeout passed, its
        lease was lost, an operator cancelled the job, or the worker is shutting down.

        For sync (``def``) handlers, which run in a thread that cannot be killed: poll it in
        long loops and return (or raise) soon after it turns True. Until the handler
        returns, the worker holds the job (no retry can start, here or elsewhere) and one of
        its executors; then the attempt is recorded by why it was stopped (a timeout is a
        failure under the budget), whatever the handler returned. An async handler is
        cancelled instead (``CancelledError`` at its next ``await``), and this stays False.
        """
        return self._stop is not None and self._stop.is_set()

    @property
    def args(self) -> dict[str, Any]:
        """The job's arguments as stored (the handler receives them validated, as its
        keyword arguments); parsed on first use."""
        if self._args is None:
            self._args = json.loads(self.args_json)
        return self._args

    @property
    def signals(self) -> dict[str, Any]:
        """Every signal the job has received so far, by name, with its payload (the same
        name sent twice keeps the later payload)."""
        if self._signals is None:
            self._signals = json.loads(self.signals_json) if self.signals_json else {}
        return self._signals

    def lock(self, name: str, wait: float = 0.0) -> AbstractAsyncContextManager[None]:
        """Hold the named lock for the block: exclusive within this namespace (across every
        worker serving it), renewed with this attempt's lease, released when the block
        ends. Waits up to ``wait`` seconds for a holder to let go, then raises
        ``LockUnavailable`` (which, uncaught, retries the job after a second)."""
        from . import durations

        seconds = durations.seconds(wait)
        if seconds is None:
            from .policy import shown

            raise ValueError(f"ctx.lock({name!r}, wait={shown(wait)}): wait {durations.rule()}")
        if self._locker is None:
            raise RuntimeError("ctx.lock() is only available inside a worker")
        return self._locker.hold(name, seconds)

    @property
    def log(self) -> Any:
        """A loguru logger bound to this job (``job_id``, ``kind``, ``attempt`` and, when
        known, ``trace_id``): the ``acta`` CLI's format prints them, and
        ``acta_sqla.logging.to_stdlib()`` hands them to the standard library's records."""
        if self._log is None:
            bound: dict[str, Any] = {"job_id": self.job_id, "kind": self.kind}
            bound["attempt"] = self.attempt
            if self.trace_id is not None:
                bound["trace_id"] = self.trace_id
            self._log = logger.bind(**bound, stage="handler")
        return self._log
