"""Admission (worker/admission.py) against a fake store: what it asks, what each verdict
becomes, and that plain jobs never ask."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from acta_sqla.errors import StatementRefused, StoreUnavailable
from acta_sqla.policy import Policy, Rate
from acta_sqla.settings import CONCURRENCY_BOUNCE_SECONDS
from acta_sqla.status import JobStatus
from acta_sqla.values import Outcome
from acta_sqla.worker.admission import Admission
from acta_sqla.worker.inflight import Entry
from tests.unit.fakes import job


class FakeAdmissionStore:
    """Answers each request with a verdict from ``answers`` (default: admitted); records
    every call."""

    def __init__(self) -> None:
        self.calls: list[list[list[Any]]] = []
        self.answers: dict[int, tuple[str, float]] = {}
        self.error: Exception | None = None

    async def admit(self, requests: Sequence[Sequence[Any]]) -> list[tuple[int, str, float]]:
        self.calls.append([list(r) for r in requests])
        await asyncio.sleep(0)
        if self.error is not None:
            raise self.error
        return [(r[0], *self.answers.get(r[0], ("admitted", 0.0))) for r in requests]


POLICIES = {
    "plain": Policy(),
    "keyed": Policy(concurrency_key="c:{n}", concurrency_limit=3),
    "rated": Policy(rate=Rate.parse("10/min")),
}


def entry(job_id: int, kind: str, key: str | None = None) -> Entry:
    return Entry(job(job_id, kind, concurrency_key=key), deadline=1e9)


@pytest.fixture
def store() -> FakeAdmissionStore:
    return FakeAdmissionStore()


@pytest.fixture
def admission(store: FakeAdmissionStore) -> Admission:
    return Admission(store, POLICIES.__getitem__, "default")


async def test_a_plain_job_is_admitted_without_asking(
    admission: Admission, store: FakeAdmissionStore
) -> None:
    assert await admission(entry(1, "plain")) is None
    # A per-job key on a plain kind does ask: one slot per key (Policy's rule).
    assert await admission(entry(2, "plain", key="mine")) is None
    assert store.calls == [[[2, 1002, 1, None, None, CONCURRENCY_BOUNCE_SECONDS]]]


async def test_an_admitted_keyed_job_runs(admission: Admission, store: FakeAdmissionStore) -> None:
    assert await admission(entry(1, "keyed", key="c:1")) is None
    assert await admission(entry(2, "rated")) is None
    assert store.calls == [
        [[1, 1001, 3, None, None, 2.0]],
        [[2, 1002, None, 10, 60.0, 2.0]],
    ]


async def test_a_job_refused_a_slot_bounces_uncharged_for_the_bounce_delay(
    admission: Admission, store: FakeAdmissionStore
) -> None:
    store.answers[1] = ("slot", CONCURRENCY_BOUNCE_SECONDS)
    bounced = await admission(entry(1, "keyed", key="c:1"))
    assert bounced is not None
    assert bounced.status is JobStatus.READY
    assert bounced.delay == CONCURRENCY_BOUNCE_SECONDS
    assert bounced.refund and not bounced.record and bounced.error_type is None
    assert bounced.cancel_wins  # an operator's cancel still wins over the bounce


async def test_a_job_refused_by_the_rate_bounces_to_the_meters_time(
    admission: Admission, store: FakeAdmissionStore
) -> None:
    store.answers[1] = ("rate", 12.5)
    bounced = await admission(entry(1, "rated"))
    assert bounced is not None and bounced.delay == 12.5 and bounced.refund


async def test_the_admissions_of_one_loop_turn_go_in_one_call(
    admission: Admission, store: FakeAdmissionStore
) -> None:
    store.answers[3] = ("slot", 2.0)
    results = await asyncio.gather(
        *(admission(entry(i, "keyed", key="c:1")) for i in range(1, 6)),
        admission(entry(9, "plain")),
    )
    assert len(store.calls) == 1 and [r[0] for r in store.calls[0]] == [1, 2, 3, 4, 5]
    assert [r is None for r in results] == [True, True, False, True, True, True]


async def test_requests_made_while_a_call_is_in_flight_go_in_the_next_one(
    admission: Admission, store: FakeAdmissionStore
) -> None:
    first = asyncio.create_task(admission(entry(1, "keyed", key="c:1")))
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # the first call is in flight now
    second = [asyncio.create_task(admission(entry(i, "keyed", key="c:1"))) for i in (2, 3)]
    await asyncio.gather(first, *second)
    assert [[r[0] for r in call] for call in store.calls] == [[1], [2, 3]]


async def test_a_failed_admission_bounces_uncharged(
    admission: Admission, store: FakeAdmissionStore
) -> None:
    store.error = StoreUnavailable("admission: connection lost")
    bounced = await admission(entry(1, "keyed", key="c:1"))
    assert bounced is not None and bounced.refund and bounced.delay == 2.0
    store.error = None
    assert await admission(entry(2, "keyed", key="c:1")) is None  # the next call is made


class RefusingStore(FakeAdmissionStore):
    """Refuses every call that carries a request of a job in ``poison`` with ``sqlstate``."""

    def __init__(self, poison: set[int], sqlstate: str) -> None:
        super().__init__()
        self.poison = poison
        self.sqlstate = sqlstate

    async def admit(self, requests: Sequence[Sequence[Any]]) -> list[tuple[int, str, float]]:
        if any(r[0] in self.poison for r in requests):
            self.calls.append([list(r) for r in requests])
            raise StatementRefused("admission: index row size 6016 exceeds ...", self.sqlstate)
        return await super().admit(requests)


async def test_a_request_the_database_refuses_for_its_data_fails_alone() -> None:
    # Issue 28, item 2: one row with a rate key too long for rate_meter_pkey failed every
    # call that carried it, and its batch-mates bounced with it, for ever.
    store = RefusingStore({3}, "54000")
    admission = Admission(store, POLICIES.__getitem__, "default")
    store.answers[4] = ("slot", 2.0)
    results = await asyncio.gather(*(admission(entry(i, "keyed", key="c:1")) for i in range(1, 6)))
    # One refused call of five, then each request alone.
    assert [[r[0] for r in call] for call in store.calls] == [
        [1, 2, 3, 4, 5],
        [1],
        [2],
        [3],
        [4],
        [5],
    ]
    assert [r is None for r in results] == [True, True, False, False, True]
    assert results[3] is not None and results[3].outcome is Outcome.HANDBACK  # a plain bounce
    refused = results[2]
    assert refused is not None and refused.outcome is Outcome.FAILED and not refused.refund
    assert refused.status is JobStatus.READY  # under its budget: retried (3 attempts left)
    assert refused.error_type == "acta.AdmissionRefused"
    assert refused.error_message == (
        "the database refused this job's admission: admission: index row size 6016 exceeds ..."
    )


async def test_a_refusal_that_is_not_about_data_bounces_the_batch_uncharged() -> None:
    # A revoked privilege, a lock timeout: no fault of any job's row; nothing fails.
    store = RefusingStore({3}, "42501")
    admission = Admission(store, POLICIES.__getitem__, "default")
    results = await asyncio.gather(*(admission(entry(i, "keyed", key="c:1")) for i in (1, 3)))
    assert len(store.calls) == 1
    assert all(r is not None and r.refund and r.error_type is None for r in results)


async def test_a_fenced_out_job_is_handed_back_without_running(
    admission: Admission, store: FakeAdmissionStore
) -> None:
    store.answers[1] = ("lost", 0.0)
    done = await admission(entry(1, "keyed", key="c:1"))
    assert done is not None and done.outcome is Outcome.HANDBACK and done.refund


def test_a_malformed_rate_is_refused_at_decoration_naming_the_kind_and_the_value() -> None:
    from acta_sqla import Acta, Context
    from acta_sqla.errors import ConfigurationError

    app = Acta()
    with pytest.raises(ConfigurationError, match=r"handler 'limited': .*rate='garbage'"):

        @app.job(rate="garbage")
        async def limited(ctx: Context) -> None: ...
