"""ActaSettings reads a secrets directory (Docker and Kubernetes mount secrets as files):
its own ``acta_<field>`` files, or, nested in an application's settings, the
application's ``<prefix>acta__<field>`` files through pydantic-settings'
NestedSecretsSettingsSource (docs/operating.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field, ValidationError
from pydantic_settings import (
    BaseSettings,
    NestedSecretsSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from acta_sqla import ActaSettings

URL = "postgresql://app:s3cret@db.internal/app"


@pytest.fixture(autouse=True)
def _no_acta_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("ACTA_DATABASE_URL", "ACTA_NAMESPACE", "APP_ACTA__NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no developer's .env


class AppSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="APP_", env_nested_delimiter="__", secrets_nested_delimiter="__"
    )
    acta: ActaSettings = Field(default_factory=ActaSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        secrets = NestedSecretsSettingsSource(file_secret_settings)
        return init_settings, env_settings, dotenv_settings, secrets


def secrets(tmp_path: Path, **files: str) -> Path:
    folder = tmp_path / "secrets"
    folder.mkdir()
    for name, value in files.items():
        (folder / name).write_text(value)
    return folder


def test_acta_reads_its_own_secret_files(tmp_path: Path) -> None:
    folder = secrets(tmp_path, acta_database_url=URL, acta_namespace="billing")
    settings = ActaSettings(_secrets_dir=folder)  # type: ignore[call-arg]
    assert (settings.database_url, settings.namespace) == (URL, "billing")


def test_nested_acta_reads_them_as_its_default_factory(tmp_path: Path) -> None:
    folder = secrets(tmp_path, acta_database_url=URL)

    class Plain(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="APP_", env_nested_delimiter="__")
        acta: ActaSettings = Field(
            default_factory=lambda: ActaSettings(_secrets_dir=folder)  # type: ignore[call-arg]
        )

    assert Plain().acta.database_url == URL


def test_the_applications_nested_secret_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = secrets(tmp_path, app_acta__database_url=URL, app_acta__namespace="billing")
    settings = AppSettings(_secrets_dir=folder)  # type: ignore[call-arg]
    assert (settings.acta.database_url, settings.acta.namespace) == (URL, "billing")
    # The environment wins over a secret file, as pydantic-settings orders its sources.
    monkeypatch.setenv("APP_ACTA__NAMESPACE", "from-env")
    assert AppSettings(_secrets_dir=folder).acta.namespace == "from-env"  # type: ignore[call-arg]


def test_a_bad_secret_is_refused_by_the_same_validators(tmp_path: Path) -> None:
    folder = secrets(tmp_path, app_acta__namespace="no spaces allowed")
    with pytest.raises(ValidationError) as caught:
        AppSettings(_secrets_dir=folder)  # type: ignore[call-arg]
    assert caught.value.errors()[0]["loc"] == ("acta", "namespace")
