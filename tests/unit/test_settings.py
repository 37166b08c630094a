"""Settings: ACTA_* variables and .env, validation naming the variable and the value, and
the lease clock derived from the one heartbeat interval."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

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
    masked_url,
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
    assert settings.forced_stop_wait == 10.0 == settings_module.DEFAULT_FORCED_STOP_SECONDS
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
    monkeypatch.setenv("ACTA_FORCED_STOP_WAIT", "2.5")
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
    assert settings.forced_stop_wait == 2.5
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
        ("ACTA_FORCED_STOP_WAIT", "0", "must be a finite number of seconds > 0"),
        ("ACTA_FORCED_STOP_WAIT", "-1", "must be a finite number of seconds > 0"),
        ("ACTA_FORCED_STOP_WAIT", "nan", "must be a finite number of seconds > 0"),
        ("ACTA_FORCED_STOP_WAIT", "inf", "must be a finite number of seconds > 0"),
        ("ACTA_FORCED_STOP_WAIT", "soon", "number"),
        ("ACTA_NAMESPACE", "has space", "LISTEN channel"),
        ("ACTA_NAMESPACE", "x" * 59, "1-58 characters"),
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


# ---------------------------------------------------------------- the database URL


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql://app@db:notaport/app", "port 'notaport' is not a number from 1 to 65535"),
        ("postgresql://postgres@127.0.0.1:99999/app", "port '99999' is not a number"),
        ("postgresql://app@db:0/app", "port '0' is not a number"),
        ("postgresql://app@[::1/app", "unclosed '[' or ']' around an IPv6 host"),
        ("postgresql://app@[::1]x/app", "not a bracketed IPv6 address"),
        ("postgresql://app@h1:5432,h2:nope/app", "port 'nope' is not a number"),
        ("postgresql://app@db/app?port=x", "port 'x' is not a number"),
        ("postgresql://app@db/app?sslmode", "malformed query string"),
        ("postgresql://app@db/app?connect_timeout=soon", "connect_timeout 'soon' is not a whole"),
    ],
)
def test_a_malformed_database_url_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, url: str, says: str
) -> None:
    monkeypatch.setenv("ACTA_DATABASE_URL", url)

    with pytest.raises(ConfigurationError) as caught:
        load_settings()

    message = str(caught.value)
    assert message.startswith(f"invalid setting ACTA_DATABASE_URL={url!r}: "), message
    assert says in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app:pw@h1:5432,h2:5433/app?target_session_attrs=read-write",
        "postgresql://app@[::1]:5432/app",
        "postgresql://app@/app?host=/var/run/postgresql",
        "postgresql+asyncpg://app@db/app?sslmode=require&application_name=x&connect_timeout=5",
        "postgres://app@db:5432/app?options=-c%20statement_timeout%3D5s",
    ],
)
def test_well_formed_database_urls_pass(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("ACTA_DATABASE_URL", url)
    assert load_settings().database_url == url


@pytest.mark.parametrize(
    "url",
    [
        "postgress://app:S3cretPw@db.internal:5432/app",  # a typo in the scheme
        "postgresql://app:S3cretPw@db.internal:notaport/app",
        "postgresql://app:S3cretPw@[::1/app",
        "mysql://app:S3cretPw@db/app?password=S3cretPw",
        "host=db password=S3cretPw",  # a keyword DSN, not a URL
        "app:S3cretPw@db/app",  # no scheme
        "postgresql://app@db:5432,x/app?sslpassword=S3cretPw&sslmode",
    ],
)
def test_a_refused_database_url_never_shows_its_password(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.setenv("ACTA_DATABASE_URL", url)

    with pytest.raises(ConfigurationError) as caught:
        load_settings()

    message = str(caught.value)
    assert "S3cretPw" not in message
    assert "ACTA_DATABASE_URL=" in message
    assert "***" in message


def test_masked_url_hides_the_password_and_keeps_the_rest() -> None:
    assert masked_url("postgresql+psycopg://app:s3cret@db:5432/app?sslmode=require") == (
        "postgresql+psycopg://app:***@db:5432/app?sslmode=require"
    )
    assert masked_url("postgresql://app@db/app") == "postgresql://app@db/app"
    assert masked_url("postgresql://app:@db/app") == "postgresql://app@db/app"
    # Unquoted '/' or '?' in a password, and a password parameter: masked all the same.
    assert masked_url("postgresql://app:pa/ss@db/app") == "postgresql://app:***@db/app"
    assert masked_url("postgresql://app:pa?ss@db/app") == "postgresql://app:***@db/app"
    assert (
        masked_url("postgresql://db/app?password=pw&x=1") == "postgresql://db/app?password=***&x=1"
    )
    assert masked_url("postgresql://db/app?sslpassword=pw") == "postgresql://db/app?sslpassword=***"
    assert masked_url("app:pw@db/app") == "app:***@db/app"


def test_the_asyncpg_dsn_keeps_what_asyncpg_reads_and_drops_what_it_cannot() -> None:
    from acta_sqla.database import asyncpg_dsn, connect_arguments

    plain = "postgresql+asyncpg://app:pw@db:5432/app?sslmode=require&application_name=x"
    assert (
        asyncpg_dsn(plain) == "postgresql://app:pw@db:5432/app?sslmode=require&application_name=x"
    )
    # connect_timeout becomes asyncpg's timeout (libpq: at least 2 s, 0 = none); the socket
    # options asyncpg lacks are dropped (the server would refuse them as settings);
    # SQLAlchemy's spelling ?ssl= is libpq's sslmode.
    assert connect_arguments("postgresql://db/app?connect_timeout=5&keepalives=1&ssl=disable") == (
        "postgresql://db/app?sslmode=disable",
        {"timeout": 5.0},
    )
    assert connect_arguments("postgresql://db/app?connect_timeout=1") == (
        "postgresql://db/app",
        {"timeout": 2.0},
    )
    assert connect_arguments("postgresql://db/app?connect_timeout=0&sslmode=require&ssl=x") == (
        "postgresql://db/app?sslmode=require",
        {},
    )
    # SQLAlchemy's asyncpg-dialect option, from an application's own URL: not the server's.
    assert connect_arguments(
        "postgresql+asyncpg://db/app?prepared_statement_cache_size=0&application_name=a"
    ) == ("postgresql://db/app?application_name=a", {})
    with pytest.raises(ConfigurationError, match="connect_timeout='soon'"):
        connect_arguments("postgresql://db/app?connect_timeout=soon")


# ---------------------------------------------------------------- pydantic-settings


def test_the_settings_are_a_pydantic_settings_base_settings() -> None:
    from pydantic_settings import BaseSettings

    assert issubclass(ActaSettings, BaseSettings)
    assert ActaSettings.model_config["env_prefix"] == "ACTA_"
    assert ActaSettings.model_config["env_file"] == ".env"


def test_the_environment_beats_dotenv_and_what_is_given_beats_both(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / ".env").write_text("ACTA_NAMESPACE=from-dotenv\nacta_schema=dotenv_schema\n")
    monkeypatch.setenv("acta_namespace", "from-env")  # names match without regard to case
    settings = load_settings()
    assert (settings.namespace, settings.db_schema) == ("from-env", "dotenv_schema")
    assert load_settings(namespace="given", db_schema="given").namespace == "given"
    assert load_settings(db_schema="given").db_schema == "given"


def test_only_acta_schema_names_the_schema(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The field is db_schema, its variable ACTA_SCHEMA; ACTA_DB_SCHEMA sets nothing."""
    monkeypatch.setenv("ACTA_DB_SCHEMA", "elsewhere")
    (tmp_path / ".env").write_text("ACTA_DB_SCHEMA=elsewhere\n")
    assert load_settings().db_schema == "acta"
    assert ActaSettings(db_schema="a").db_schema == "a"
    assert ActaSettings(ACTA_SCHEMA="b").db_schema == "b"  # the alias, as before


def test_a_bad_schema_names_the_option_it_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_settings({"db_schema": "--schema"}, db_schema="Bad-Schema")
    assert str(caught.value).startswith("invalid setting --schema='Bad-Schema': must be")
    monkeypatch.setenv("ACTA_SCHEMA", "Bad-Schema")
    with pytest.raises(ConfigurationError) as caught:
        load_settings({"db_schema": "--schema"})
    assert str(caught.value).startswith("invalid setting ACTA_SCHEMA='Bad-Schema': must be")


def test_a_bad_value_in_dotenv_names_the_variable(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("ACTA_EXECUTORS=lots\n")
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    assert str(caught.value).startswith("invalid setting ACTA_EXECUTORS='lots': ")


class TestNestedInAnApplicationsSettings:
    """``ActaSettings`` as a field of an application's own ``BaseSettings``."""

    @staticmethod
    def app_settings() -> tuple[type[Any], type[Any]]:
        from pydantic import Field
        from pydantic_settings import BaseSettings, SettingsConfigDict

        class Factory(BaseSettings):
            model_config = SettingsConfigDict(env_prefix="APP_", env_nested_delimiter="__")
            acta: ActaSettings = Field(default_factory=ActaSettings)
            name: str = "shop"

        class Instance(BaseSettings):
            model_config = SettingsConfigDict(env_prefix="APP_", env_nested_delimiter="__")
            acta: ActaSettings = ActaSettings()

        return Factory, Instance

    def test_nested_fields_come_from_the_application_s_variables(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        factory, instance = self.app_settings()
        monkeypatch.setenv("APP_ACTA__NAMESPACE", "billing")
        monkeypatch.setenv("APP_ACTA__SCHEMA", "jobs")
        monkeypatch.setenv("APP_ACTA__HEARTBEAT_INTERVAL", "10")
        monkeypatch.setenv("APP_ACTA__DATABASE_URL", "postgresql://app@db/app")
        for cls in (factory, instance):
            acta = cls().acta
            assert isinstance(acta, ActaSettings)
            assert (acta.namespace, acta.db_schema) == ("billing", "jobs")
            assert acta.heartbeat_interval == 10.0 and acta.timings.lease == 40.0
            assert acta.database_url == "postgresql://app@db/app"
        monkeypatch.delenv("APP_ACTA__SCHEMA")
        monkeypatch.setenv("APP_ACTA__DB_SCHEMA", "by_field_name")
        assert factory().acta.db_schema == "by_field_name"

    def test_nested_in_dotenv_and_as_json(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
        from pydantic_settings import BaseSettings, SettingsConfigDict

        class FromDotenv(BaseSettings):
            model_config = SettingsConfigDict(
                env_prefix="APP_", env_nested_delimiter="__", env_file=".env", extra="ignore"
            )
            acta: ActaSettings = ActaSettings()

        (tmp_path / ".env").write_text("APP_ACTA__NAMESPACE=from-dotenv\n")
        assert FromDotenv().acta.namespace == "from-dotenv"
        factory, _ = self.app_settings()
        monkeypatch.setenv("APP_ACTA", '{"namespace": "json", "executors": 3}')
        assert (factory().acta.namespace, factory().acta.executors) == ("json", 3)

    def test_without_nested_values_the_factory_reads_acta_s_variables(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        factory, _ = self.app_settings()
        monkeypatch.setenv("ACTA_NAMESPACE", "from-acta-env")
        monkeypatch.setenv("ACTA_SCHEMA", "acta_env")
        acta = factory().acta
        assert (acta.namespace, acta.db_schema) == ("from-acta-env", "acta_env")

    @pytest.mark.parametrize(
        ("variable", "value", "field", "says"),
        [
            ("APP_ACTA__NAMESPACE", "has space", "namespace", "LISTEN channel"),
            ("APP_ACTA__HEARTBEAT_INTERVAL", "0", "heartbeat_interval", "greater than 0"),
            ("APP_ACTA__DATABASE_URL", "mysql://r@h/a", "database_url", "needs PostgreSQL"),
            ("APP_ACTA__SCHEMA", "No-Way", "ACTA_SCHEMA", "lower-case PostgreSQL identifier"),
        ],
    )
    def test_the_same_validation_applies_nested(
        self, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, field: str, says: str
    ) -> None:
        factory, _ = self.app_settings()
        monkeypatch.setenv(variable, value)
        with pytest.raises(ValidationError) as caught:
            factory()
        [error] = caught.value.errors()
        assert error["loc"] == ("acta", field)
        assert says in error["msg"]


def test_one_rule_for_the_executor_count_and_the_grace() -> None:
    """``ACTA_EXECUTORS``, ``acta worker --executors`` and ``in_process_worker(executors=)``
    share the bounds; ``--grace`` and ``in_process_worker(grace=)`` share the grace's rule."""
    from acta_sqla.settings import (
        MAX_EXECUTORS,
        MIN_EXECUTORS,
        ActaSettings,
        check_executors,
        check_grace,
    )

    metadata = ActaSettings.model_fields["executors"].metadata
    bounds = {type(m).__name__: getattr(m, type(m).__name__.lower()) for m in metadata}
    assert bounds == {"Ge": MIN_EXECUTORS, "Le": MAX_EXECUTORS}
    assert check_executors(1, "x") == 1 and check_executors(1024, "x") == 1024
    for bad in (0, 1025, 2.0, "8", None):
        with pytest.raises(
            ConfigurationError, match=r"^--executors .*: must be between 1 and 1024$"
        ):
            check_executors(bad, f"--executors {bad}")
    assert check_grace(0.0, "x") == 0.0 and check_grace(float("inf"), "x") == float("inf")
    for bad_grace in (-1.0, float("nan")):
        with pytest.raises(ConfigurationError, match=r"^--grace .*: must be >= 0 seconds$"):
            check_grace(bad_grace, f"--grace {bad_grace:g}")


def test_one_rule_for_the_forced_stop_wait() -> None:
    """``ACTA_FORCED_STOP_WAIT`` (the field's validator) and ``acta worker
    --forced-stop-wait`` (:func:`check_forced_stop`) refuse the same values, saying the same:
    a finite number of seconds > 0."""
    from acta_sqla.settings import FORCED_STOP_RULE, check_forced_stop

    assert check_forced_stop(0.001, "x") == 0.001 and check_forced_stop(2.0, "x") == 2.0
    assert load_settings(forced_stop_wait=0.25).forced_stop_wait == 0.25
    for bad in (0.0, -0.0, -1.0, float("nan"), float("inf"), float("-inf")):
        with pytest.raises(ConfigurationError) as by_option:
            check_forced_stop(bad, f"--forced-stop-wait {bad:g}")
        assert str(by_option.value) == f"--forced-stop-wait {bad:g}: {FORCED_STOP_RULE}"
        with pytest.raises(ConfigurationError) as by_setting:
            load_settings(forced_stop_wait=bad)
        assert str(by_setting.value) == (
            f"invalid setting ACTA_FORCED_STOP_WAIT={bad!r}: {FORCED_STOP_RULE}"
        )
        assert "\n" not in str(by_setting.value)
