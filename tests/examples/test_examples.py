"""Every file of examples/ runs as ``python examples/NAME.py`` against the test database
(``ACTA_DATABASE_URL``), and prints what the README says it shows."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from acta_sqla import embedded
from tests.harness import REPO_ROOT

Run = Callable[[str], str]


def test_quickstart(run_example: Run) -> None:
    assert run_example("quickstart").splitlines() == [
        "send_welcome: succeeded after 1 attempt(s), result "
        "{'sent': True, 'user_id': 42, 'template': 'basic'}",
        "resize_avatar: succeeded after 2 attempt(s), result "
        "{'sizes': [64, 128, 256], 'user_id': 42}",
    ]


def test_lanes(run_example: Run) -> None:
    assert run_example("lanes").splitlines() == [
        "enqueued: account:1=ready, account:2=ready, account:1=waiting, account:2=waiting, "
        "account:1=waiting, account:2=waiting",
        "account 1: entries applied in commit order [100, -30, 5]",
        "account 2: entries applied in commit order [100, -30, 5]",
        "balances: [100, 70, 75]",
    ]


def test_concurrency_keys(run_example: Run) -> None:
    assert run_example("concurrency_keys").splitlines() == [
        "customer 1: 4 jobs, at most 2 at once",
        "customer 2: 1 jobs, at most 1 at once",
        "attempts charged: [1]",
    ]


def test_rate_limits(run_example: Run) -> None:
    first, charged = run_example("rate_limits").splitlines()
    found = re.fullmatch(r"api:acme made 4 calls over ([\d.]+) s", first)
    assert found, first
    # GCRA admits a key's starts period / N = 0.5 s apart on the database's clock; a claim
    # precedes its admission, and the 4th job's last claim follows at least the 2nd
    # admission plus 0.5 s: the claims span at least 1 s (without the rate: ~0 s).
    assert float(found[1]) >= 1.0
    assert charged == "attempts charged: [1]"


def test_signals(run_example: Run) -> None:
    parked, done = run_example("signals").splitlines()
    assert re.fullmatch(r"refund job \d+: waiting, waiting for 'approved'", parked), parked
    assert re.fullmatch(
        r"refund job \d+: succeeded, result "
        r"\{'order_id': 7, 'refunded': 1250, 'approved_by': 'grace'\}",
        done,
    ), done


def test_children(run_example: Run) -> None:
    assert run_example("children").splitlines() == [
        "sales report: succeeded, result {'total': 500, 'missing': ['mars']}"
    ]


def test_orders(run_example: Run) -> None:
    assert run_example("orders").splitlines() == [
        "order job: waiting, waiting for 'shipped'",
        "order job: succeeded, result {'items': 2, 'order_id': 7, 'tracking': '1Z999'}",
    ]


def test_schedules(run_example: Run) -> None:
    assert run_example("schedules").splitlines() == [
        "2 fires, 1.0 s apart, on the second: True",
        "results: ['eu prices', 'eu prices']",
    ]


def test_definitions(run_example: Run) -> None:
    assert run_example("definitions").splitlines() == [
        "with max_attempts=1: failed after 1 attempt(s)",
        "paused: ready",
        "resumed: succeeded, result 'sent to ada@example.com'",
    ]


def test_fastapi_app(run_example: Run) -> None:
    signed_up, welcome, failed = run_example("fastapi_app").splitlines()
    assert signed_up == "signed up: ['job_id', 'user_id']"
    assert welcome == "welcome job: succeeded, sent: True"
    assert failed.startswith("failed sign-up: 500, sign-up of grace@example.com failed")
    assert failed.endswith("neither the user nor the job was committed")


def test_every_example_is_run_here_and_linked_from_the_readme() -> None:
    examples = sorted(p.stem for p in (REPO_ROOT / "examples").glob("*.py"))
    tested = [name.removeprefix("test_") for name in globals() if name.startswith("test_")]
    assert set(examples) <= set(tested), set(examples) - set(tested)
    readme = (REPO_ROOT / "README.md").read_text()
    assert [e for e in examples if f"(examples/{e}.py)" not in readme] == []


def test_an_example_runs_on_the_embedded_default(
    acta_env: dict[str, str], fresh_data_dir: Path
) -> None:
    """With no ACTA_DATABASE_URL the examples start the embedded PostgreSQL, as a user's
    first run does (here in a data folder of its own, a cluster never started before, as
    initdb left it; stopped and removed after). The folder is not under pytest's base
    temp: the server runs as its own user when the tests run as root, and must reach it
    (tests/conftest.py's ``private_tmp``)."""
    data_dir = fresh_data_dir
    env = {k: v for k, v in acta_env.items() if k != "ACTA_DATABASE_URL"}
    env["ACTA_DATA_DIR"] = str(data_dir)
    try:
        done = subprocess.run(
            [sys.executable, "examples/lanes.py"],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "account 1: entries applied in commit order [100, -30, 5]" in done.stdout
    finally:
        embedded.stop(data_dir)
