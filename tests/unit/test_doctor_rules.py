"""The doctor's rules on given facts: the thresholds of docs/observability.md, where a
real database would need gigabytes (index bloat, frozen-xid age) or hours (a transaction
open for an hour) to show them. tests/db/test_doctor.py produces the others for real."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from acta_sqla.doctor import (
    Finding,
    Holder,
    IndexFacts,
    Report,
    ServerFacts,
    Severity,
    TableFacts,
    Thresholds,
    judge_holders,
    judge_schema,
    judge_tables,
)

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)
MIB = 1024 * 1024
SERVER = ServerFacts(
    autovacuum=True, track_counts=True, freeze_max_age=200_000_000, server_version="16", now=NOW
)
TABLE = TableFacts(
    name="job",
    live_rows=1_000_000,
    dead_rows=1_000,
    modified_since_analyze=1_000,
    last_vacuum=None,
    last_autovacuum=NOW - timedelta(minutes=5),
    last_analyze=None,
    last_autoanalyze=NOW - timedelta(minutes=5),
    autovacuum_enabled=True,
    table_bytes=200 * MIB,
    index_bytes=100 * MIB,
    frozen_xid_age=10_000,
    indexes=(IndexFacts("job", "job_pkey", 60 * MIB, 1_000_000),),
)


def checks(findings: list[Finding]) -> list[tuple[str, Severity]]:
    return [(f.check, f.severity) for f in findings]


def test_a_busy_healthy_table_has_no_finding() -> None:
    assert judge_tables("acta", [TABLE], SERVER, Thresholds()) == []


@pytest.mark.parametrize(
    ("index_bytes", "table_bytes", "expected"),
    [
        (500 * MIB, 200 * MIB, [("index_size", Severity.WARNING)]),  # 2.5x, large
        (300 * MIB, 200 * MIB, []),  # 1.5x: indexes of 7 columns may be that big
        (40 * MIB, 1 * MIB, []),  # 40x but small: not worth a REINDEX
    ],
)
def test_index_size_is_a_bloat_hint_past_twice_the_heap(
    index_bytes: int, table_bytes: int, expected: list[tuple[str, Severity]]
) -> None:
    table = replace(TABLE, index_bytes=index_bytes, table_bytes=table_bytes)
    findings = judge_tables("acta", [table], SERVER, Thresholds())
    assert checks(findings) == expected
    if findings:
        assert "job_pkey" in findings[0].message
        assert findings[0].advice.startswith("REINDEX TABLE CONCURRENTLY acta.job")


@pytest.mark.parametrize(
    ("age", "expected"),
    [
        (399_000_000, []),
        (401_000_000, [("frozen_xid_age", Severity.WARNING)]),
        (1_600_000_000, [("frozen_xid_age", Severity.PROBLEM)]),
    ],
)
def test_frozen_xid_age(age: int, expected: list[tuple[str, Severity]]) -> None:
    table = replace(TABLE, frozen_xid_age=age)
    assert checks(judge_tables("acta", [table], SERVER, Thresholds())) == expected


@pytest.mark.parametrize(
    ("dead", "live", "expected"),
    [
        (9_999, 0, []),  # under the floor, whatever the share
        (300_000, 1_000_000, [("dead_tuples", Severity.WARNING)]),  # 23 %
        (1_000_000, 1_000_000, [("dead_tuples", Severity.PROBLEM)]),  # 50 %
    ],
)
def test_dead_tuples_thresholds(dead: int, live: int, expected: list[tuple[str, Severity]]) -> None:
    table = replace(TABLE, dead_rows=dead, live_rows=live)
    assert checks(judge_tables("acta", [table], SERVER, Thresholds())) == expected


def test_autovacuum_off_is_info_when_vacuumed_by_hand_lately_warning_when_not() -> None:
    server = replace(SERVER, autovacuum=False)
    by_hand = replace(TABLE, last_vacuum=NOW - timedelta(hours=3), last_autovacuum=None)
    stale = replace(TABLE, last_vacuum=NOW - timedelta(days=3), last_autovacuum=None)

    assert checks(judge_tables("acta", [by_hand], server, Thresholds())) == [
        ("autovacuum", Severity.INFO)
    ]
    [finding] = judge_tables("acta", [stale], server, Thresholds())
    assert (finding.check, finding.severity) == ("autovacuum", Severity.WARNING)
    assert (
        finding.message
        == "autovacuum is off server-wide (autovacuum = off); last vacuum 3 days ago"
    )


@pytest.mark.parametrize(
    ("holder", "expected"),
    [
        (Holder("session", "pid 1", xmin_age=50, transaction_seconds=5, state="active"), []),
        (
            Holder("session", "pid 1", xmin_age=50, transaction_seconds=400, state="active"),
            [("xmin_horizon", Severity.WARNING)],
        ),
        (
            Holder("session", "pid 1", xmin_age=50, transaction_seconds=4000, state="active"),
            [("xmin_horizon", Severity.PROBLEM)],
        ),
        (
            Holder("session", "pid 1", xmin_age=2_000_000, transaction_seconds=5, state="active"),
            [("xmin_horizon", Severity.PROBLEM)],
        ),
        (
            Holder(
                "session",
                "pid 1",
                xmin_age=None,
                transaction_seconds=90,
                state="idle in transaction",
                state_seconds=90,
            ),
            [("idle_in_transaction", Severity.WARNING)],
        ),
        (
            Holder(
                "session",
                "pid 1",
                xmin_age=None,
                transaction_seconds=5,
                state="idle in transaction",
                state_seconds=5,
            ),
            [],
        ),
        (
            Holder("prepared", "prepared transaction 'x'", xmin_age=10, transaction_seconds=400),
            [("xmin_horizon", Severity.WARNING)],
        ),
        (
            Holder("slot", "replication slot 's'", xmin_age=10, active=False),
            [("xmin_horizon", Severity.PROBLEM)],
        ),
        (Holder("slot", "replication slot 's'", xmin_age=10, active=True), []),
    ],
    ids=[
        "short-query",
        "5-min-transaction",
        "1-hour-transaction",
        "million-xids",
        "idle-90s-no-snapshot",
        "idle-5s",
        "prepared-5-min",
        "inactive-slot",
        "active-slot",
    ],
)
def test_xmin_holders(holder: Holder, expected: list[tuple[str, Severity]]) -> None:
    assert checks(judge_holders([holder], Thresholds())) == expected


def test_schema_revision() -> None:
    assert judge_schema("acta", "0003", "0003", ["0001", "0002", "0003"]) == []
    [behind] = judge_schema("acta", "0002", "0003", ["0001", "0002", "0003"])
    assert "behind" in behind.message and behind.severity is Severity.PROBLEM


def test_exit_code_follows_the_worst_finding() -> None:
    def report(*severities: Severity) -> Report:
        findings = tuple(Finding("c", s, "x", "m", "a") for s in severities)
        return Report("default", "acta", NOW, "0003", "0003", findings, (), (), SERVER)

    assert (report().status, report().exit_code) == ("ok", 0)
    assert report(Severity.INFO).exit_code == 0
    assert report(Severity.INFO, Severity.WARNING).exit_code == 1
    assert (
        report(Severity.WARNING, Severity.PROBLEM).status,
        report(Severity.PROBLEM).exit_code,
    ) == (
        "problem",
        2,
    )
