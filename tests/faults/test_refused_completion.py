"""A completion the database refuses for a reason other than its data is repeated until it
lands (issue 10, item 9b; the seed: "the write repeats until it lands").

A test-only trigger on ``acta.job`` refuses the completion's update with SQLSTATE 42501
(insufficient_privilege, as a revoked grant would) while a flag row says so. The handler
succeeds; the write is refused and repeated; once the flag is cleared it lands. Before the
fix, a class 42 refusal took the isolate-and-fail path: the job whose handler succeeded
ended ``failed`` with ``acta.CompletionRefused``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import Sql, Workers, read_runs
from tests.waiting import wait_for

from .conftest import enqueue

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
    assert sql("SELECT outcome, error_type FROM acta.execution WHERE job_id = %s", job) == [
        ("succeeded", None)
    ]
    assert "CompletionRefused" not in w.output()
    assert "42501" in w.output() or "permission denied" in w.output()
    runs = [r for r in read_runs(runs_log) if r.job_id == job and r.event == "start"]
    assert len(runs) == 1
