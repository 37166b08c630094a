"""Shutdown with a handler that swallows its cancellation (issue 10 item 4): one SIGTERM
must be enough. The worker used to log "stopped ... 1 left held" and then hang in the event
loop's own shutdown (which cancels and awaits every task) until a second signal."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.harness import Sql, Workers, read_runs
from tests.waiting import wait_for

from .conftest import enqueue

GRACE = 1.0
FORCED_STOP = 2.0
"""The forced-stop wait (`acta worker --forced-stop-wait`; 10 s by default): one SIGTERM
must end the worker past the stubborn handler whatever its length."""
BOUND = FORCED_STOP + 5.0
"""The forced-stop wait, then a short wait for the other executors (1 s), then slack."""


def test_one_sigterm_exits_past_a_handler_that_ignores_its_cancel(
    sql: Sql, workers: Workers, runs_log: Path
) -> None:
    worker = workers("--grace", str(GRACE), "--forced-stop-wait", str(FORCED_STOP))
    [stubborn] = enqueue(sql, "ignores_cancel")
    [innocent] = enqueue(sql, "quick", args='{"pause": 0.2}')
    wait_for(
        lambda: any(r.job_id == stubborn for r in read_runs(runs_log)),
        what="the stubborn handler to start",
    )
    wait_for(
        lambda: sql("SELECT status FROM acta.job WHERE id = %s", innocent)[0][0] == "succeeded",
        what="the innocent job to succeed",
    )

    sent = time.monotonic()
    worker.signal(signal.SIGTERM)
    status = worker.wait(timeout=GRACE + BOUND + 10)
    took = time.monotonic() - sent

    assert status == 0, worker.output()
    assert took < GRACE + BOUND, f"exited {took:.1f}s after SIGTERM"
    # ... and not before its grace and its forced-stop wait were over (the option held).
    assert took >= GRACE + FORCED_STOP, f"exited {took:.1f}s after SIGTERM"
    out = worker.output()
    assert "ignored its cancellation" in out and "ignores_cancel" in out, out
    assert f"waiting up to {FORCED_STOP:g}s for them to end (the forced-stop wait" in out, out
    # No completion was written for the stubborn attempt: its row was left to its lease
    # (with the 2 s test lease, this worker's own recovery pass may already have taken it
    # back before the exit: then its only history is 'lost').
    [(job_status,)] = sql("SELECT status FROM acta.job WHERE id = %s", stubborn)
    assert job_status in ("executing", "ready")
    outcomes = [o for (o,) in sql("SELECT outcome FROM acta.attempt WHERE job_id = %s", stubborn)]
    assert set(outcomes) <= {"lost"}
    assert sql("SELECT status FROM acta.worker WHERE id = %s", worker.id) == [("stopped",)]
