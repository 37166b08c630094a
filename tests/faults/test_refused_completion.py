"""A completion the database refuses for a reason other than its data is repeated until it
lands (issue 10, item 9b; the seed: "the write repeats until it lands").

A test-only trigger on ``acta.job`` refuses the completion's update with SQLSTATE 42501
(insufficient_privilege, as a revoked grant would) while a flag row says so. The handler
succeeds; the write is refused and repeated; once the flag is cleared it lands. Before the
fix, a class 42 refusal took the isolate-and-fail path: the job whose handler succeeded
ended ``failed`` with ``acta.CompletionRefused``.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import Sql, Workers, read_runs
from tests.waiting import wait_for

from .conftest import all_terminal, count_status, enqueue

REFUSE = """
CREATE TABLE acta_test_refuse (refuse boolean NOT NULL);
INSERT INTO acta_test_refuse VALUES (true);
CREATE FUNCTION acta_test_refuse_completion() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT refuse FROM acta_test_refuse) THEN
        RAISE EXCEPTION 'permission denied for table job (test)' USING ERRCODE = '42501';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER acta_test_refuse BEFORE UPDATE ON acta.job
    FOR EACH ROW WHEN (OLD.status = 'executing' AND NEW.status = 'succeeded')
    EXECUTE FUNCTION acta_test_refuse_completion();
"""

UNDO = """
DROP TRIGGER IF EXISTS acta_test_refuse ON acta.job;
DROP FUNCTION IF EXISTS acta_test_refuse_completion();
DROP TABLE IF EXISTS acta_test_refuse;
"""


@pytest.fixture
def refusing(sql: Sql) -> Iterator[None]:
    for statement in (UNDO, REFUSE):
        sql(statement)
    try:
        yield
    finally:
        sql(UNDO)


def test_a_completion_refused_with_42501_repeats_until_it_lands(
    sql: Sql, workers: Workers, runs_log: Path, refusing: None
) -> None:
    w = workers()
    [job] = enqueue(sql, "quick")
    wait_for(
        lambda: [r for r in read_runs(runs_log) if r.job_id == job and r.event == "end"],
        what="the handler to succeed",
    )
    # Refused at least twice (the first try and one repeat): the finalizer keeps the row,
    # and the heartbeat keeps renewing its lease while the write waits.
    wait_for(
        lambda: "completions failed (try 2)" in w.output(),
        timeout=15,
        what="the refused completion to be repeated",
    )
    assert sql("SELECT status FROM acta.job WHERE id = %s", job) == [("executing",)]
    assert "CompletionRefused" not in w.output()

    sql("UPDATE acta_test_refuse SET refuse = false")
    wait_for(
        lambda: sql("SELECT status FROM acta.job WHERE id = %s", job) == [("succeeded",)],
        timeout=30,
        what="the repeated completion to land",
    )
    [(attempts, last_error)] = sql("SELECT attempts, last_error FROM acta.job WHERE id = %s", job)
    assert attempts == 1
    assert last_error is None
    assert sql("SELECT outcome, error_type FROM acta.attempt WHERE job_id = %s", job) == [
        ("succeeded", None)
    ]
    assert "CompletionRefused" not in w.output()
    assert "42501" in w.output() or "permission denied" in w.output()
    runs = [r for r in read_runs(runs_log) if r.job_id == job and r.event == "start"]
    assert len(runs) == 1


def test_refused_completions_that_fill_the_channel_do_not_hold_the_stop(
    sql: Sql, workers: Workers, refusing: None
) -> None:
    """Completions refused while the claims go on fill the Completed channel: the batch in
    hand (up to 128), the channel behind it (128 + 8) and the 8 executors waiting for room. The
    stop's STOP marker could then never enter the channel, and the worker hung on SIGTERM
    (a second signal too) for as long as the writes failed (found 2026-12-04). Now the
    flush time counts from the stop, and after a second signal no failed write is
    repeated: the unwritten completions are given up at once, their rows stay
    'executing' under their leases, and recovery brings every one of them back once the
    writes land again (I1, I6)."""
    n = 400
    w = workers("--grace", "1", "--executors", "8")
    enqueue(sql, "quick", n)
    # The batch in hand is what the finalizer had gathered at its first write: 128 at
    # most, fewer when the machine is busy and the executors were slower than the writer.
    first = wait_for(
        lambda: re.search(r"writing (\d+) completions failed", w.output()),
        timeout=30,
        what="the first refused completion write",
    )
    held = int(first.group(1)) + (128 + 8) + 8
    wait_for(
        lambda: count_status(sql, "executing") >= held,
        timeout=30,
        what=f"{held} rows in flight: the Completed channel full",
    )
    assert "completions failed" in w.output()
    # A renewal has told the database that these attempts started (so recovery takes
    # them back as ordinary losses, in batches, rather than one by one as suspects).
    started = "SELECT count(*) FROM acta.job WHERE status = 'executing' AND started_at IS NOT NULL"
    wait_for(
        lambda: sql(started)[0][0] >= held,
        timeout=15,
        what="the held attempts to be known as started",
    )

    sent = time.monotonic()
    w.signal(signal.SIGTERM)
    wait_for(lambda: "SIGTERM received" in w.output(), what="the first SIGTERM to be seen")
    w.signal(signal.SIGTERM)
    status = w.wait(timeout=60)
    took = time.monotonic() - sent
    out = w.output()
    assert status == 0, out
    # Nothing waits out the forced-stop wait (10 s) or the flush time (30 s): once no
    # write is repeated, the channel drains and the executors waiting for room go.
    assert took < 10, f"exited {took:.1f}s after the first SIGTERM:\n{out}"
    assert f"giving up on {held} unwritten completion(s)" in out, out
    assert count_status(sql, "succeeded", "failed", "cancelled") == 0
    assert count_status(sql, "executing") == held

    sql("UPDATE acta_test_refuse SET refuse = false")
    workers()
    wait_for(lambda: all_terminal(sql, n), timeout=60, what="every job to end")
    assert count_status(sql, "succeeded") == n
