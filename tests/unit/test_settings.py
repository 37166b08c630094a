"""Settings: ACTA_* variables and .env, validation naming the variable and the value, and
the lease clock derived from the one heartbeat interval."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from acta_sqla import ActaSettings, ConfigurationError
from acta_sqla import settings as settings_module
from acta_sqla.settings import (
    Timings,
    available_cpus,
    cgroup_cpu_limit,
    default_executors,
    load_settings,
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No ACTA_* variable and no .env of the developer's leaks into these tests."""
    for name in list(os.environ):
        if name.startswith("ACTA_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def test_defaults() -> None:
    settings = load_settings()
    assert settings.database_url is None  # the embedded default
    assert settings.namespace == "default"
    assert settings.app is None
    assert settings.db_schema == "acta"
    assert settings.heartbeat_interval == 45.0
    assert settings.safety_poll_interval == 1.0
    assert settings.executors == default_executors()
    assert settings.data_dir.name == "pgdata"


def test_derived_timings_follow_the_heartbeat() -> None:
    assert load_settings().timings == Timings(
        heartbeat=45.0,
        lease=180.0,
        attempt_deadline=112.5,
        worker_dead_after=315.0,
        recovery_interval=180.0,
    )
    fast = Timings.from_heartbeat(2.0)
    assert (fast.lease, fast.attempt_deadline, fast.worker_dead_after) == (8.0, 5.0, 14.0)
    assert fast.recovery_interval == fast.lease


def test_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTA_DATABASE_URL", "postgresql+psycopg://app@db:5432/app")
    monkeypatch.setenv("ACTA_NAMESPACE", "billing")
    monkeypatch.setenv("ACTA_APP", "myapp.jobs:acta")
    monkeypatch.setenv("ACTA_SCHEMA", "jobs")
    monkeypatch.setenv("ACTA_HEARTBEAT_INTERVAL", "10")
    monkeypatch.setenv("ACTA_EXECUTORS", "12")
    monkeypatch.setenv("ACTA_SAFETY_POLL_INTERVAL", "0.5")
    monkeypatch.setenv("ACTA_DATA_DIR", "/srv/acta")

    settings = load_settings()

    assert settings.database_url == "postgresql+psycopg://app@db:5432/app"
    assert (settings.namespace, settings.app, settings.db_schema) == (
        "billing",
        "myapp.jobs:acta",
        "jobs",
    )
    assert (settings.heartbeat_interval, settings.executors) == (10.0, 12)
    assert settings.safety_poll_interval == 0.5
    assert settings.data_dir == Path("/srv/acta")
    assert settings.timings.lease == 40.0


def test_dotenv_is_read(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("ACTA_NAMESPACE=from-dotenv\nACTA_HEARTBEAT_INTERVAL=5\n")
    settings = load_settings()
    assert settings.namespace == "from-dotenv"
    assert settings.heartbeat_interval == 5.0


def test_overrides_beat_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTA_NAMESPACE", "from-env")
    assert load_settings(namespace="given").namespace == "given"
    assert load_settings(namespace=None).namespace == "from-env"  # None: not given


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("ACTA_HEARTBEAT_INTERVAL", "0", "greater than 0"),
        ("ACTA_HEARTBEAT_INTERVAL", "-3", "greater than 0"),
        ("ACTA_HEARTBEAT_INTERVAL", "soon", "number"),
        ("ACTA_EXECUTORS", "0", "greater than or equal to 1"),
        ("ACTA_EXECUTORS", "2.5", "integer"),
        ("ACTA_SAFETY_POLL_INTERVAL", "0", "greater than 0"),
        ("ACTA_NAMESPACE", "has space", "LISTEN channel"),
        ("ACTA_NAMESPACE", "x" * 64, "1-63 characters"),
        ("ACTA_SCHEMA", "Acta-Schema", "lower-case PostgreSQL identifier"),
        ("ACTA_DATABASE_URL", "mysql://root@localhost/app", "needs PostgreSQL"),
        ("ACTA_DATABASE_URL", "not a url", "is not a database URL"),
    ],
)
def test_a_bad_value_names_the_variable_and_the_value(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, says: str
) -> None:
    monkeypatch.setenv(variable, value)

    with pytest.raises(ConfigurationError) as caught:
        load_settings()

    message = str(caught.value)
    assert f"{variable}={value!r}" in message
    assert says in message
    assert "\n" not in message


def test_empty_database_url_means_the_embedded_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTA_DATABASE_URL", "")
    assert load_settings().database_url is None


@pytest.mark.parametrize(("cores", "expected"), [(1, 8), (2, 8), (3, 12), (8, 32), (64, 64)])
def test_default_executors_are_4_per_core_clamped_to_8_64(
    monkeypatch: pytest.MonkeyPatch, cores: int, expected: int
) -> None:
    monkeypatch.setattr(settings_module, "available_cpus", lambda: cores)
    assert default_executors() == expected
    assert load_settings().executors == expected


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"cpu.max": "200000 100000\n"}, 2.0),
        ({"cpu.max": "150000 100000\n"}, 1.5),
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3.0),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({}, None),
    ],
)
def test_cgroup_cpu_quota_is_read_from_v2_then_v1(
    tmp_path: Path, files: dict[str, str], expected: float | None
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cgroup_cpu_limit(tmp_path) == expected


def test_a_container_quota_caps_the_cores_the_executors_count_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A pod limited to 2 CPUs on a 32-core node: 8 executors, not 64.
    monkeypatch.setattr(os, "process_cpu_count", lambda: 32, raising=False)
    (tmp_path / "cpu.max").write_text("200000 100000\n")
    assert available_cpus(tmp_path) == 2
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert available_cpus(tmp_path) == 2  # a fraction of a core still needs a loop of its own
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert available_cpus(tmp_path) == 32


def test_derived_timings_are_not_settable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTA_LEASE", "1")
    monkeypatch.setenv("ACTA_WORKER_DEAD_AFTER", "1")
    settings = load_settings()
    assert settings.timings.lease == 180.0
    assert not hasattr(settings, "lease")
    with pytest.raises(ValidationError):
        settings.heartbeat_interval = 1.0  # type: ignore[misc]  # frozen


def test_settings_class_is_public() -> None:
    assert ActaSettings(namespace="x").namespace == "x"


def test_the_head_constant_matches_the_migrations() -> None:
    from acta_sqla import migrate

    assert migrate.heads() == [migrate.HEAD]
