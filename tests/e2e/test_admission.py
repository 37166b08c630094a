"""Admission across three real `acta worker` processes: concurrency keys and rate limits,
checked from the handlers' own records of when they started and ended."""

from __future__ import annotations

import secrets
import signal
import string
import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from tests.harness import Sql, Workers, insert_jobs, read_runs
from tests.waiting import wait_for

APP = "tests.e2e.app_admission:acta"
NAMESPACE = "admission"


@pytest.fixture
def three_workers(db: str, sql: Sql, runs_log: Path, tmp_path: Path) -> Iterator[Workers]:
    with Workers(APP, db, sql, runs_log, tmp_path) as workers:
        for _ in range(3):
            workers()
        # All three must be up before the jobs arrive, or the first could drain them alone.
        wait_for(
            lambda: sql("SELECT count(*) FROM acta.worker WHERE status = 'running'") == [(3,)],
            what="three workers to register",
        )
        yield workers


def succeeded(sql: Sql) -> int:
    return int(sql("SELECT count(*) FROM acta.job WHERE status = 'succeeded'")[0][0])


def stop(workers: Workers) -> None:
    for w in workers.started:
        w.signal(signal.SIGTERM)
    assert [w.wait(timeout=60) for w in workers.started] == [0, 0, 0]


def test_60_jobs_over_5_keys_with_limit_2_never_run_more_than_2_of_a_key_at_once(
    sql: Sql, three_workers: Workers, runs_log: Path
) -> None:
    # The keys interleaved, as an application's traffic would be.
    rows = sql(
        "INSERT INTO acta.job (namespace, kind, args, concurrency_key) "
        "SELECT %s, 'keyed', jsonb_build_object('key', 'k' || i %% 5), 'k' || i %% 5 "
        "FROM generate_series(1, 60) AS i RETURNING id",
        NAMESPACE,
    )
    ids = [int(r[0]) for r in rows]
    wait_for(lambda: succeeded(sql) == 60, timeout=120, what="60 successes")
    stop(three_workers)
    runs = read_runs(runs_log)
    starts = [r for r in runs if r.event == "start"]
    assert sorted(r.job_id for r in starts) == sorted(ids), "every job ran exactly once"
    # Bounces are uncharged: every job succeeded on its first charged attempt.
    attempts = sql("SELECT DISTINCT attempts FROM acta.job")
    assert attempts == [(1,)], attempts
    assert sql("SELECT count(*) FROM acta.attempt") == [(60,)]
    assert sql("SELECT count(*) FROM acta.concurrency_slot") == [(0,)]
    # Sweep each key's [start, end] intervals: never more than 2 at once.
    events: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for r in runs:
        # At one instant an end sorts before a start: the slot was freed first.
        events[r.key].append((r.t, 1 if r.event == "start" else -1))
    peaks = {}
    for key, evs in events.items():
        level = peak = 0
        for _, step in sorted(evs):
            level += step
            peak = max(peak, level)
        peaks[key] = peak
    assert max(peaks.values()) == 2, peaks  # the limit was reached, never passed
    # The limit held across processes: some key's jobs ran on more than one worker. (Which
    # worker wins a freed slot is a race; with 60 jobs one of the three may win none, so
    # the test asks for the property itself, not for all three.)
    workers_of_key: dict[str, set[int]] = defaultdict(set)
    for r in starts:
        workers_of_key[r.key].add(r.pid)
    assert max(len(p) for p in workers_of_key.values()) >= 2, dict(workers_of_key)


def test_a_rate_of_10_per_second_holds_across_3_workers(
    sql: Sql, three_workers: Workers, runs_log: Path
) -> None:
    ids = insert_jobs(sql, NAMESPACE, "rated", 45)
    wait_for(lambda: succeeded(sql) == 45, timeout=120, what="45 successes")
    stop(three_workers)
    starts = sorted(r.t for r in read_runs(runs_log) if r.event == "start")
    assert len(starts) == len(ids)
    for i, first in enumerate(starts):
        in_window = [t for t in starts[i:] if t < first + 1.0]
        assert len(in_window) <= 10, f"{len(in_window)} starts in the second from {first}"
    # No burst: 45 starts at one per 100 ms take more than 4 s.
    assert starts[-1] - starts[0] >= 4.0
    assert sql("SELECT DISTINCT attempts FROM acta.job") == [(1,)]


def test_5_lanes_of_40_jobs_from_2_concurrent_sessions_run_one_at_a_time_in_commit_order(
    sql: Sql, three_workers: Workers, runs_log: Path, sync_engine: Engine
) -> None:
    from tests.e2e.app_admission import acta, laned

    committed: dict[str, list[int]] = defaultdict(list)
    guard = threading.Lock()

    def session_enqueueing(offset: int) -> None:
        # One job per transaction, the lanes interleaved, through the public API.
        for i in range(100):
            lane = f"lane-{(i + offset) % 5}"
            with Session(sync_engine) as session, session.begin():
                job = acta.enqueue_sync(session, laned.job(line=lane, seq=i))
                session.flush()
                job_id = job.id
                # Still inside the transaction, which holds the lane's lock until it
                # commits: no other enqueue of this lane can commit between this append
                # and the commit, so this list is the lane's commit order.
                with guard:
                    committed[lane].append(job_id)

    threads = [threading.Thread(target=session_enqueueing, args=(k,)) for k in (0, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(len(v) for v in committed.values()) == [40] * 5
    wait_for(lambda: succeeded(sql) == 200, timeout=180, what="200 successes")
    stop(three_workers)
    runs = read_runs(runs_log)
    for lane, ids in committed.items():
        mine = sorted((r.t, r.event, r.job_id) for r in runs if r.key == lane)
        started = [job for _, event, job in mine if event == "start"]
        assert started == ids, f"{lane} ran out of commit order"
        # Strictly alternating start, end, start, end: never two of the lane at once.
        assert [event for _, event, _ in mine] == ["start", "end"] * len(ids)
    assert sql("SELECT DISTINCT attempts FROM acta.job") == [(1,)]


def test_a_rate_key_too_long_for_its_index_fails_alone_and_its_batch_mates_run(
    db: str, sql: Sql, runs_log: Path, tmp_path: Path
) -> None:
    """Issue 28, item 2: a row whose rate key no btree entry can hold, written past acta's
    checks by a plain INSERT (the job table does not index rate keys, so it is stored; a
    concurrency key, lane or unique key that long is refused by the INSERT itself), made
    every admission call that carried it fail on ``rate_meter_pkey``, and all its
    batch-mates bounced, uncharged, for ever. The call is now asked again request by
    request: the bad row fails (its budget of 1 spent, the database's reason as its
    error), the 40 others each run once."""
    # Random letters: PostgreSQL compresses a repetitive key small enough to index.
    huge = "".join(secrets.choice(string.ascii_letters) for _ in range(6000))
    # One statement: the worker claims the rows together, so the bad one shares calls.
    sql(
        "INSERT INTO acta.job (namespace, kind, args, concurrency_key, rate_key, max_attempts) "
        "SELECT %s, 'rated', '{}', NULL, %s, 1 "
        "UNION ALL SELECT %s, 'keyed', jsonb_build_object('key', 'k' || i %% 4), "
        "'k' || i %% 4, NULL, NULL FROM generate_series(1, 20) AS i "
        "UNION ALL SELECT %s, 'rated', '{}', NULL, 'rated', NULL FROM generate_series(1, 20)",
        NAMESPACE,
        huge,
        NAMESPACE,
        NAMESPACE,
    )
    with Workers(APP, db, sql, runs_log, tmp_path) as workers:
        worker = workers(ready=True)
        wait_for(
            lambda: (
                sql("SELECT count(*) FROM acta.job WHERE status IN ('succeeded', 'failed')")
                == [(41,)]
            ),
            timeout=60,
            what="every job terminal",
        )
        worker.signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    assert succeeded(sql) == 40
    failed = sql(
        "SELECT length(rate_key), last_error->>'type', last_error->>'message', attempts "
        "FROM acta.job WHERE status = 'failed'"
    )
    assert [(n, type_, attempts) for n, type_, _, attempts in failed] == [
        (6000, "acta.AdmissionRefused", 1)
    ]
    message = failed[0][2]
    assert message.startswith("the database refused this job's admission: "), message
    assert "rate_meter_pkey" in message, message  # PostgreSQL's own reason
    assert sql("SELECT DISTINCT attempts FROM acta.job WHERE status = 'succeeded'") == [(1,)]
    assert sql("SELECT count(*) FROM acta.concurrency_slot") == [(0,)]
