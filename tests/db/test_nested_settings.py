"""``ActaSettings`` nested in an application's own pydantic-settings model drives a real
worker: the database, the namespace and the heartbeat come from the application's
variables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.ext.asyncio import AsyncSession

from acta_sqla import Acta, ActaSettings, Context
from acta_sqla.testing import drain

acta = Acta(namespace="nested")


@acta.job
async def double(ctx: Context, n: int) -> int:
    return 2 * n


class AppSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="SHOP_", env_nested_delimiter="__", env_file=".env", extra="ignore"
    )
    acta: ActaSettings = Field(default_factory=ActaSettings)
    title: str = "shop"


async def test_a_worker_runs_on_settings_nested_in_the_application_s(
    db: str, async_session: AsyncSession, sql, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    for name in list(os.environ):
        if name.startswith("ACTA_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SHOP_ACTA__DATABASE_URL", db)
    (tmp_path / ".env").write_text("SHOP_ACTA__NAMESPACE=nested\nSHOP_ACTA__HEARTBEAT_INTERVAL=6\n")
    settings = AppSettings()
    assert (settings.acta.namespace, settings.acta.database_url) == ("nested", db)

    job = double.job(n=21)
    async_session.add(job)
    await async_session.commit()
    result = await drain(acta, settings=settings.acta)

    assert not result.crashed and result.claimed == 1
    assert sql("SELECT status, result FROM acta.job WHERE id = %s", job.id) == [("succeeded", 42)]
    assert sql("SELECT namespace, heartbeat_seconds FROM acta.worker") == [("nested", 6.0)]
