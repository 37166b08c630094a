"""worker/completions.py: every shape of the one Completion, and the rules that decide them."""

from __future__ import annotations

import json

import pytest

from acta_sqla.policy import Policy
from acta_sqla.queries import complete
from acta_sqla.status import JobStatus
from acta_sqla.values import CORE_FIELDS, Completion, ExpiredLease, Outcome
from acta_sqla.worker import completions as c
from acta_sqla.worker.completions import ErrorFields

from .fakes import job

ERR = ErrorFields("pkg.E", "boom", "tb")
POLICY = Policy(max_attempts=3, backoff_base=2.0)


def lost(**kw: object) -> ExpiredLease:
    fields: dict[str, object] = dict(
        id=7,
        execution_id=70,
        attempts=1,
        max_attempts=None,
        override_max_attempts=None,
        declared_max_attempts=None,
        started=True,
        alone=False,
        lost_before=False,
        worker_id=3,
    )
    fields.update(kw)
    return ExpiredLease(**fields)  # type: ignore[arg-type]


def test_the_statement_reads_the_core_fields_in_completion_order() -> None:
    # The positions e->>0 ... are rendered from queries/complete.CORE: it must name
    # Completion's fields in order, and features must stay out of the core array.
    assert tuple(name for name, _ in complete.CORE) == Completion._fields[:CORE_FIELDS]
    assert Completion._fields[CORE_FIELDS:] == ("features",)


def test_encode_puts_features_beside_the_core_array() -> None:
    plain = c.succeeded(job(1), '{"a":1}', 0.5)
    featured = plain._replace(job_id=2, features={"next_fire": 60})
    core, features = complete.encode([plain, featured])
    rows = json.loads(core)
    assert [len(r) for r in rows] == [CORE_FIELDS, CORE_FIELDS]
    assert rows[0][:4] == [1, 1001, "succeeded", "succeeded"]
    assert json.loads(features) == {"2": {"next_fire": 60}}
    assert complete.encode([plain])[1] == "{}"


def test_succeeded() -> None:
    done = c.succeeded(job(1, attempts=2), "[1]", 0.25)
    assert (done.status, done.outcome, done.result_json, done.attempt) == (
        JobStatus.SUCCEEDED,
        Outcome.SUCCEEDED,
        "[1]",
        2,
    )
    assert not done.refund and done.record and not done.cancel_wins


def test_failed_is_retried_under_the_budget_then_fails_saying_so() -> None:
    first = c.failed(job(1, attempts=1), POLICY, ERR, 0.1)
    assert (first.status, first.outcome) == (JobStatus.READY, Outcome.FAILED)
    assert 1.0 <= first.delay <= 3.0  # the policy's back-off for attempt 1 (jittered)
    assert first.cancel_wins and not first.refund and first.error_message == "boom"
    last = c.failed(job(1, attempts=3), POLICY, ERR, 0.1)
    assert last.status is JobStatus.FAILED and not last.cancel_wins
    assert last.error_message == "boom (attempt 3 of 3: failure budget spent)"


def test_the_jobs_own_budget_wins_over_the_policy() -> None:
    assert c.failed(job(1, attempts=1, max_attempts=1), POLICY, ERR, 0).status == "failed"
    assert c.budget(None, 5) == 5 and c.budget(2, 5) == 2


def test_retry_at_is_charged_and_due_when_asked() -> None:
    r = c.retry_at(job(1), POLICY, ERR, 0.1, 42.0)
    assert (r.status, r.outcome, r.delay, r.refund) == (JobStatus.READY, Outcome.RETRY, 42.0, False)
    assert c.retry_at(job(1, attempts=3), POLICY, ERR, 0.1, 42.0).status is JobStatus.FAILED


def test_fail_now_cancelled_interrupted_and_handback() -> None:
    now = c.fail_now(job(1), ERR, None)
    assert (now.status, now.outcome) == (JobStatus.FAILED, Outcome.FAIL)
    gone = c.cancelled(job(1), ERR, 0.1)
    assert (gone.status, gone.outcome) == (JobStatus.CANCELLED, Outcome.CANCELLED)
    stop = c.interrupted(job(1), ERR, 0.1)
    assert (stop.status, stop.refund, stop.record) == (JobStatus.READY, True, True)
    back = c.handback(job(1), 1.5)
    assert (back.status, back.outcome, back.delay, back.refund, back.record) == (
        JobStatus.READY,
        Outcome.HANDBACK,
        1.5,
        True,
        False,
    )


def test_cancel_wins_over_every_return_to_ready_and_nothing_else() -> None:
    assert c.cancel_wins(JobStatus.READY)
    for status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED):
        assert not c.cancel_wins(status)
    for shape in (c.handback(job(1), 0), c.interrupted(job(1), ERR, 0)):
        assert shape.cancel_wins


@pytest.mark.parametrize(
    ("reason", "status", "outcome"),
    [
        (Outcome.TIMEOUT, JobStatus.READY, Outcome.TIMEOUT),
        (Outcome.LEASE_LOST, JobStatus.READY, Outcome.FAILED),
        (Outcome.LOCK_LOST, JobStatus.READY, Outcome.FAILED),
        (Outcome.CANCELLED, JobStatus.CANCELLED, Outcome.CANCELLED),
        (Outcome.INTERRUPTED, JobStatus.READY, Outcome.INTERRUPTED),
    ],
)
def test_stopped_says_why(reason: Outcome, status: JobStatus, outcome: Outcome) -> None:
    s = c.stopped(job(1), POLICY, reason, 1.0)
    assert (s.status, s.outcome, s.error_type) == (status, outcome, "acta." + reason.value)
    assert s.refund is (reason is Outcome.INTERRUPTED)


def test_refused_fails_the_job_without_its_result() -> None:
    r = c.refused(c.succeeded(job(1), '"x"', 0.5), "invalid byte sequence")
    assert (r.status, r.outcome, r.result_json, r.error_type) == (
        JobStatus.FAILED,
        Outcome.FAIL,
        None,
        "acta.CompletionRefused",
    )
    assert "invalid byte sequence" in (r.error_message or "") and r.ran_seconds == 0.5


def test_error_fields_qualify_the_type_and_strip_nul() -> None:
    try:
        raise json.JSONDecodeError("bad\x00", "doc", 0)
    except ValueError as exc:
        fields = c.error_fields(exc)
    assert fields.type == "json.decoder.JSONDecodeError"
    assert "\x00" not in fields.message and "\\x00" in fields.message


# -------------------------------------------------------------- recovery


def test_a_lost_attempt_that_started_is_charged_and_retried() -> None:
    done, isolate = c.lease_expired(lost(started=True, attempts=1), 20)
    assert (done.status, done.refund, done.outcome) == (JobStatus.READY, False, Outcome.LOST)
    assert done.error_type == "acta.LeaseExpired" and not done.keep_last_error
    assert done.ran_by == 3 and done.cancel_wins and done.record
    assert "stopped renewing its lease" in (done.error_message or "")
    assert "attempt 1 of 20" in (done.error_message or "")
    assert not isolate  # a first loss of a started attempt: a crash or a stall, not a suspect


def test_an_unstarted_loss_among_others_is_given_back_and_isolates_the_job() -> None:
    """A worker killed within a beat of a claim loses its whole batch "unstarted": nothing
    tells the culprit from its batch-mates, so none is charged, however often it happens;
    each becomes a suspect, claimed alone from now on."""
    for before in (False, True):
        row = lost(started=False, lost_before=before, attempts=5, max_attempts=5)
        done, isolate = c.lease_expired(row, 20)
        assert not c.loss_is_charged(row)
        assert (done.status, done.refund, done.keep_last_error) == (JobStatus.READY, True, True)
        assert "before the attempt was known to start" in (done.error_message or "")
        assert "not charged" in (done.error_message or "")
        assert isolate


def test_a_loss_of_a_job_claimed_alone_is_charged_and_says_so() -> None:
    """The culprit names itself: lost while it ran alone, started or not, it is charged,
    ends failed once its budget is spent, and stays a suspect (isolate is for a change)."""
    for started in (False, True):
        row = lost(alone=True, started=started, lost_before=True, attempts=2, max_attempts=6)
        done, isolate = c.lease_expired(row, 20)
        assert c.loss_is_charged(row) and not done.refund and not done.keep_last_error
        assert done.status is JobStatus.READY and not isolate
        assert "alone" in (done.error_message or "")
        assert "attempt 2 of 6" in (done.error_message or "")
        last, _ = c.lease_expired(row._replace(attempts=6), 20)
        assert last.status is JobStatus.FAILED
        assert (last.error_message or "").endswith("attempt 6 of 6, failure budget spent")


def test_a_second_started_loss_among_others_is_charged_and_isolates_the_job() -> None:
    """A job that kills its worker a while after it starts is charged each time (the
    database knew it ran); lost with its worker a second time, it runs alone from then on,
    so it stops taking others' attempts down with it."""
    done, isolate = c.lease_expired(lost(started=True, lost_before=True), 20)
    assert not done.refund and isolate
    assert "runs alone from now on" in (done.error_message or "")


@pytest.mark.parametrize(
    ("own", "override", "declared", "default", "spent_at"),
    [
        (2, 5, 5, 20, 2),
        (None, 2, 5, 20, 2),
        (None, None, 2, 20, 2),
        (None, None, None, 2, 2),
    ],
)
def test_recovery_spends_the_effective_budget(
    own: int | None, override: int | None, declared: int | None, default: int, spent_at: int
) -> None:
    row = lost(
        attempts=spent_at,
        max_attempts=own,
        override_max_attempts=override,
        declared_max_attempts=declared,
    )
    done, _ = c.lease_expired(row, default)
    assert done.status is JobStatus.FAILED
    assert f"attempt {spent_at} of {spent_at}, failure budget spent" in (done.error_message or "")
    again, _ = c.lease_expired(row._replace(attempts=spent_at - 1), default)
    assert again.status is JobStatus.READY


# ------------------------------------------------------------------ conclude: what a run came to


def test_conclude_turns_each_way_a_run_ends_into_its_completion() -> None:
    """The executor reports (``Ran``); ``conclude`` decides, with no I/O."""
    from acta_sqla.errors import Cancel, Fail, Retry
    from acta_sqla.waits import WaitForChildren, WaitForSignal

    policy = Policy(max_attempts=3)
    j = job(1, "k", attempts=1)

    def outcome(ran: c.Ran) -> tuple[str, Outcome, float | None]:
        done = c.conclude(j, policy, ran)
        return done.status, done.outcome, done.ran_seconds

    assert outcome(c.Ran({"ok": 1}, None, 0.5)) == ("succeeded", Outcome.SUCCEEDED, 0.5)
    assert outcome(c.Ran(None, ValueError("x"), 0.5)) == ("ready", Outcome.FAILED, 0.5)
    assert outcome(c.Ran(None, Retry(after=5), 0.5))[1] is Outcome.RETRY
    assert outcome(c.Ran(None, Fail("no"), 0.5)) == ("failed", Outcome.FAIL, 0.5)
    assert outcome(c.Ran(None, Cancel("stop"), 0.5)) == ("cancelled", Outcome.CANCELLED, 0.5)
    # Never ran: its args no longer load (fails now, no run time).
    assert outcome(c.Ran(None, TypeError("args"), None)) == ("failed", Outcome.FAIL, None)
    # Asked to stop: the reason wins over whatever the handler returned or raised.
    assert outcome(c.Ran("late", None, 2.0, stopped=Outcome.TIMEOUT))[1] is Outcome.TIMEOUT
    # (a lost lease is recorded as a failure: tests above)
    assert outcome(c.Ran(None, None, 0.1, stopped=Outcome.LEASE_LOST)) == (
        "ready",
        Outcome.FAILED,
        0.1,
    )
    assert outcome(c.Ran(WaitForSignal("go"), None, 0.1)) == ("waiting", Outcome.WAITING, 0.1)
    children = object.__new__(WaitForChildren)  # the rows a real one renders from its jobs
    object.__setattr__(children, "children", ())
    object.__setattr__(children, "rows", [{"kind": "k"}])
    assert outcome(c.Ran(children, None, 0.1))[1] is Outcome.WAITING
    stranded = c.conclude(j, policy, c.Ran(children, None, 0.1, stranded="lane 'a' is held"))
    assert (
        stranded.outcome is Outcome.FAILED and stranded.error_type == "acta_sqla.errors.InvalidJob"
    )
    unstorable = c.conclude(j, policy, c.Ran(object(), None, 0.1))
    assert unstorable.outcome is Outcome.FAILED and "not JSON-serializable" in (
        unstorable.error_message or ""
    )
