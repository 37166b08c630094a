"""Each of a worker's connections killed by the server during a drain
(``pg_terminate_backend``): the worker reconnects and goes on; nothing is lost or doubled."""

from __future__ import annotations

from pathlib import Path

from tests.harness import Sql, Workers
from tests.waiting import wait_for

from . import oracle
from .conftest import SLOW_POLL, all_terminal, count_status, enqueue, pickup_latencies

ROLES = ("claim", "complete", "heartbeat", "listen", "admin")


def test_terminating_each_connection_role_during_a_drain(
    sql: Sql, workers: Workers, runs_log: Path
) -> None:
    w = workers(env=SLOW_POLL)
    ids: list[int] = []
    replaced: dict[str, tuple[int, int]] = {}
    for role in ROLES:
        ids += enqueue(sql, "quick", 300, '{"pause": 0.01}')
        wait_for(lambda: count_status(sql, "executing"), 10, "the drain to be under way")
        old = wait_for(
            lambda: w.backend(role, or_unnamed=True),  # noqa: B023
            10,
            f"the {role} connection",
        )
        assert sql("SELECT pg_terminate_backend(%s)", old) == [(True,)]
        new = wait_for(
            lambda: (pid := w.backend(role, or_unnamed=True)) != old and pid,  # noqa: B023
            15,
            f"the {role} connection to be re-established",
        )
        replaced[role] = (int(old), int(new))  # type: ignore[call-overload]
        assert w.alive(), w.output()
    wait_for(lambda: all_terminal(sql, len(ids)), 60, "the drain to finish")
    assert set(replaced) == set(ROLES)
    # LISTEN was re-established: wake-ups come at once, not at the 5 s idle poll.
    latencies = pickup_latencies(sql, 5)
    assert max(latencies) < 0.5, latencies
    report = oracle.check(sql, runs_log, attempts=1, max_starts=1)
    assert len(report.jobs) == len(ids) + 5
    assert w.alive(), w.output()


def test_every_connection_role_names_its_worker(sql: Sql, workers: Workers) -> None:
    """An operator finds (and a test kills) one worker's connection of one role by its
    application_name 'acta:<role>:<worker id>' (listen included)."""
    w = workers()
    wait_for(lambda: w.backend("heartbeat"), 10, "the first heartbeat")
    wait_for(lambda: w.backend("claim"), 10, "the first claim")
    named = {
        role: w.backend(role) is not None
        # complete is opened at start-up (before the id is known) and renamed after it
        for role in ("claim", "complete", "heartbeat", "listen", "admin")
    }
    assert named == dict.fromkeys(named, True), named
