"""Real `acta worker` processes: exactly-once success, retries, timeouts, shutdown."""

from __future__ import annotations

import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.harness import insert_jobs, invoke_acta, read_runs
from tests.harness import run_acta as harness_run_acta
from tests.waiting import wait_for


def enqueue(sql, kind: str, n: int = 1, args: str = "{}", **cols: object) -> list[int]:  # type: ignore[no-untyped-def]
    return insert_jobs(sql, "e2e", kind, n, args, **cols)


def statuses(sql) -> Counter[str]:  # type: ignore[no-untyped-def]
    return Counter({s: n for s, n in sql("SELECT status, count(*) FROM acta.job GROUP BY 1")})


def test_two_workers_run_2000_jobs_each_succeeding_exactly_once(
    sql, start_worker, runs_log
) -> None:  # type: ignore[no-untyped-def]
    a = start_worker()
    b = start_worker()
    # Both must be up before the jobs arrive, or the first could drain them alone.
    wait_for(
        lambda: sql("SELECT count(*) FROM acta.worker WHERE status = 'running'") == [(2,)],
        what="both workers to register",
    )
    ids = enqueue(sql, "work", 2000, '{"n": 7}')
    wait_for(lambda: statuses(sql)["succeeded"] == 2000, timeout=120, what="2000 successes")
    for w in (a, b):
        w.signal(signal.SIGTERM)
    assert a.wait() == 0 and b.wait() == 0
    runs = read_runs(runs_log)
    started = Counter(r.job_id for r in runs if r.event == "start")
    assert set(started) == set(ids)
    assert max(started.values()) == 1, "a job ran twice"
    pids = {r.pid for r in runs}
    assert len(pids) == 2, "both workers took a share"
    assert sql(
        "SELECT count(*), count(DISTINCT job_id) FROM acta.attempt WHERE outcome = 'succeeded'"
    ) == [(2000, 2000)]
    assert sql("SELECT DISTINCT attempts, result::text FROM acta.job") == [(1, '{"n": 7}')]
    assert sql("SELECT count(*) FROM acta.worker WHERE status = 'stopped'") == [(2,)]


def test_retries_end_failed_after_max_attempts(sql, start_worker, runs_log) -> None:  # type: ignore[no-untyped-def]
    [job_id] = enqueue(sql, "always_fails")
    w = start_worker()
    wait_for(lambda: statuses(sql)["failed"] == 1, timeout=60, what="the job to fail")
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    [(attempts, error)] = sql(
        "SELECT attempts, last_error->>'message' FROM acta.job WHERE id = %s", job_id
    )
    assert attempts == 3
    assert "attempt 3 failed" in error and "failure budget spent" in error
    history = sql("SELECT attempt, outcome FROM acta.attempt WHERE job_id = %s ORDER BY id", job_id)
    assert history == [(1, "failed"), (2, "failed"), (3, "failed")]
    assert [r.attempt for r in read_runs(runs_log) if r.event == "start"] == [1, 2, 3]


def test_a_handler_past_its_timeout_is_cancelled_and_failed(sql, start_worker) -> None:  # type: ignore[no-untyped-def]
    [job_id] = enqueue(sql, "too_slow")
    w = start_worker()
    wait_for(lambda: statuses(sql)["failed"] == 1, timeout=30, what="the timeout")
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    [(error_type, message)] = sql(
        "SELECT error_type, error_message FROM acta.attempt WHERE job_id = %s", job_id
    )
    assert error_type == "acta.timeout" and "0.3s" in message


def test_sigterm_lets_running_handlers_finish_and_leaves_the_rest_uncharged(
    sql, start_worker, runs_log
) -> None:  # type: ignore[no-untyped-def]
    running = enqueue(sql, "sleepy", 2, '{"seconds": 1.0}', priority=-1)
    waiting = enqueue(sql, "work", 5)
    w = start_worker("--executors", "2")
    wait_for(
        lambda: sum(1 for r in read_runs(runs_log) if r.event == "start") == 2,
        what="both sleepy handlers to start",
    )
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=30) == 0
    done = dict(sql("SELECT id, status FROM acta.job WHERE id = ANY(%s)", running))
    assert set(done.values()) == {"succeeded"}, "running handlers finished within the grace"
    rest = sql("SELECT DISTINCT status, attempts FROM acta.job WHERE id = ANY(%s)", waiting)
    assert rest == [("ready", 0)]
    assert sql("SELECT status FROM acta.worker") == [("stopped",)]


def test_a_second_signal_cancels_running_handlers_which_are_retried_uncharged(
    sql, start_worker, runs_log
) -> None:  # type: ignore[no-untyped-def]
    [job_id] = enqueue(sql, "sleepy", 1, '{"seconds": 60}')
    w = start_worker()
    wait_for(lambda: read_runs(runs_log), what="the handler to start")
    w.signal(signal.SIGTERM)
    wait_for(lambda: "stopping" in w.output(), what="the first signal to be seen")
    w.signal(signal.SIGINT)
    assert w.wait(timeout=30) == 0
    assert sql("SELECT status, attempts FROM acta.job WHERE id = %s", job_id) == [("ready", 0)]
    assert sql("SELECT outcome FROM acta.attempt WHERE job_id = %s", job_id) == [("interrupted",)]


def test_the_grace_period_ends_in_a_cancel(sql, start_worker, runs_log) -> None:  # type: ignore[no-untyped-def]
    [job_id] = enqueue(sql, "sleepy", 1, '{"seconds": 60}')
    w = start_worker("--grace", "0.5")
    wait_for(lambda: read_runs(runs_log), what="the handler to start")
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=30) == 0
    assert sql("SELECT status, attempts FROM acta.job WHERE id = %s", job_id) == [("ready", 0)]


def run_acta(db: str, *args: str) -> subprocess.CompletedProcess[str]:
    """An operator's command (never `acta worker`), in-process (tests/harness.py), in the
    folder pytest runs in, as the process it replaces did."""
    return invoke_acta(db, "e2e", Path.cwd(), *args)


def test_cancel_stops_an_executing_job_within_a_heartbeat(db, sql, start_worker, runs_log) -> None:  # type: ignore[no-untyped-def]
    [job_id] = enqueue(sql, "sleepy", 1, '{"seconds": 60}')
    [waiting] = enqueue(sql, "work", 1, run_at="2999-01-01T00:00:00Z")
    w = start_worker(env={"ACTA_HEARTBEAT_INTERVAL": "0.5"})
    wait_for(lambda: read_runs(runs_log), what="the handler to start")
    done = run_acta(db, "jobs", "cancel", str(job_id))
    assert done.returncode == 0, done.stderr
    assert "cancel requested" in done.stdout
    wait_for(
        lambda: sql("SELECT status FROM acta.job WHERE id = %s", job_id) == [("cancelled",)],
        timeout=10,
        what="the heartbeat to cancel the handler",
    )
    # A ready (not yet due) job is cancelled at once.
    assert "cancelled" in run_acta(db, "jobs", "cancel", str(waiting)).stdout
    assert sql("SELECT status FROM acta.job WHERE id = %s", waiting) == [("cancelled",)]
    again = run_acta(db, "jobs", "cancel", str(waiting))
    assert again.returncode == 1 and "already finished" in again.stderr
    # An operator's retry is the one way back out of a terminal state.
    retried = run_acta(db, "jobs", "retry", str(job_id))
    assert retried.returncode == 0, retried.stderr
    wait_for(
        lambda: sql("SELECT status FROM acta.job WHERE id = %s", job_id) == [("executing",)],
        what="the retried job to run again",
    )
    w.signal(signal.SIGTERM)
    # Two identical signals sent back to back may merge into one: wait for the first.
    wait_for(lambda: "stopping" in w.output(), what="the first signal to be seen")
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    shown = run_acta(db, "jobs", "show", str(job_id))
    assert "cancelled" in shown.stdout and "sleepy" in shown.stdout
    status = run_acta(db, "status", "--namespace", "e2e")
    assert status.returncode == 0 and "sleepy" in status.stdout
    every = run_acta(db, "status")
    assert every.returncode == 0 and every.stdout.splitlines()[1].startswith("e2e ")


def test_acta_demo_runs_the_whole_system(db) -> None:  # type: ignore[no-untyped-def]
    done = run_acta(db, "demo", "--users", "20")
    assert done.returncode == 0, done.stderr
    assert "the rolled-back one: absent" in done.stdout
    assert "charge_card recovered after retries" in done.stdout
    assert "import_feed used up its budget" in done.stdout
    assert "acta db stop" not in done.stdout  # a URL's server is not acta's to stop


def test_a_named_lock_is_exclusive_across_workers(sql, start_worker, runs_log) -> None:  # type: ignore[no-untyped-def]
    a = start_worker()
    b = start_worker()
    wait_for(
        lambda: sql("SELECT count(*) FROM acta.worker WHERE status = 'running'") == [(2,)],
        what="both workers to register",
    )
    ids = enqueue(sql, "exclusive", 30)
    wait_for(lambda: statuses(sql)["succeeded"] == 30, timeout=120, what="30 successes")
    for w in (a, b):
        w.signal(signal.SIGTERM)
    assert a.wait() == 0 and b.wait() == 0
    events = [(r.event, r.job_id) for r in read_runs(runs_log)]
    assert len(events) == 60
    # Inside the lock, every start is followed by the same job's end: never two at once.
    for (e1, j1), (e2, j2) in zip(events[::2], events[1::2], strict=True):
        assert (e1, e2, j1) == ("start", "end", j2)
    assert {j for _, j in events} == set(ids)
    assert sql("SELECT count(*) FROM acta.lock") == [(0,)]


# The spellings of --app the Typer command reads: the long option and a short one with its
# value attached.
PATHS = {"long": ("--app", "tests.e2e.app:acta"), "attached": ("-atests.e2e.app:acta",)}


@pytest.mark.parametrize("args", [("--burst",), ("--no-burst", "--burst")], ids=["one", "last"])
def test_the_app_named_in_dotenv_is_served(db, sql, tmp_path, args) -> None:  # type: ignore[no-untyped-def]
    """ACTA_APP is a setting like any other: read from the environment or from the `.env`
    file of the folder `acta worker` starts in (of a repeated flag, the last one counts)."""
    [job_id] = enqueue(sql, "work", 1, '{"n": 3}')
    (tmp_path / ".env").write_text("ACTA_APP=tests.e2e.app:acta\n")
    done = harness_run_acta(db, "e2e", tmp_path, "worker", *args)
    assert done.returncode == 0, done.stderr
    assert sql("SELECT status FROM acta.job WHERE id = %s", job_id) == [("succeeded",)]


@pytest.mark.parametrize("app", PATHS.values(), ids=PATHS.keys())
@pytest.mark.parametrize("grace", ["nan", "NaN"])
def test_a_nan_grace_is_one_line_and_exit_2(db, sql, tmp_path, app, grace) -> None:  # type: ignore[no-untyped-def]
    """A NaN grace would be a grace of 0 (every comparison with it is false): running
    handlers interrupted at the first signal. Refused before the worker starts."""
    done = harness_run_acta(db, "e2e", tmp_path, "worker", *app, "--burst", "--grace", grace)
    assert done.returncode == 2
    assert done.stderr == "acta worker: --grace nan: must be >= 0 seconds\n"
    assert sql("SELECT count(*) FROM acta.worker") == [(0,)]


@pytest.mark.parametrize(
    ("args", "dotenv", "line"),
    [
        (
            ("--forced-stop-wait", "nan"),
            "",
            "--forced-stop-wait nan: must be a finite number of seconds > 0",
        ),
        (
            (),
            "ACTA_FORCED_STOP_WAIT=-1\n",
            "invalid setting ACTA_FORCED_STOP_WAIT='-1': must be a finite number of seconds > 0",
        ),
    ],
    ids=["option", "setting"],
)
def test_a_bad_forced_stop_wait_is_one_line_and_exit_2(  # type: ignore[no-untyped-def]
    db, sql, tmp_path, args: tuple[str, ...], dotenv: str, line: str
) -> None:
    """The option, or ACTA_FORCED_STOP_WAIT (here from the .env file of the folder the
    worker starts in): refused before the worker registers, in one line."""
    (tmp_path / ".env").write_text(dotenv)
    done = harness_run_acta(db, "e2e", tmp_path, "worker", *PATHS["long"], "--burst", *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"acta worker: {line}\n"
    assert sql("SELECT count(*) FROM acta.worker") == [(0,)]
