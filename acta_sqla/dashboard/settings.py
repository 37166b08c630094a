"""The dashboard's own settings: ``ACTA_DASHBOARD_*`` environment variables and the
``.env`` file of the current folder (the environment wins), read by pydantic-settings.

They live here, not in ``ActaSettings``: a worker never needs them, and the worker's
start-up never pays for reading them. ``acta dashboard`` reads them all;
``acta_dashboard(...)`` reads them for what its caller does not pass, so a password in
``.env`` is never silently ignored.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from ..settings import NAMESPACE_PATTERN, NAMESPACE_RULE
from .security import DEFAULT_LIFETIME

MAX_LIFETIME = 30 * 86_400.0

Names = Annotated[tuple[str, ...], NoDecode]


class DashboardSettings(BaseSettings):
    """``ACTA_DASHBOARD_<FIELD>`` for each field (``ACTA_DASHBOARD_PASSWORD`` ...)."""

    model_config = SettingsConfigDict(
        env_prefix="ACTA_DASHBOARD_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        frozen=True,
    )

    password: SecretStr | None = Field(
        default=None, description="Asked on the login page; empty = no password."
    )
    secret: SecretStr | None = Field(
        default=None,
        description="Signs the CSRF and login tokens; share it between the processes of a "
        "deployment (random per process when unset).",
    )
    session_lifetime: Annotated[float, Field(gt=0, le=MAX_LIFETIME)] = Field(
        default=DEFAULT_LIFETIME, description="Seconds a login lasts (default 8 h)."
    )
    allowed_hosts: Names = Field(
        default=(),
        description="Host names the dashboard answers to, comma-separated (`*.example.com` "
        "for subdomains, `*` for any); `acta dashboard` defaults to its bound address.",
    )
    namespaces: Names = Field(
        default=(),
        description="The only namespaces shown, comma-separated (empty = every namespace).",
    )
    login_failures_per_client: Annotated[int, Field(ge=1)] = Field(
        default=10, description="Failed passwords one client address may try per window."
    )
    login_failures_overall: Annotated[int, Field(ge=1)] = Field(
        default=30, description="Failed passwords all clients together may try per window."
    )
    login_window: Annotated[float, Field(gt=0, le=86_400)] = Field(
        default=60.0, description="Seconds over which failed passwords are counted."
    )

    @field_validator("password", "secret", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("allowed_hosts", "namespaces", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _lower_hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(h.lower().strip("[]").rstrip(".") for h in value)

    @field_validator("namespaces")
    @classmethod
    def _check_namespaces(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not NAMESPACE_PATTERN.match(name):
                raise ValueError(f"namespace {name!r} {NAMESPACE_RULE}")
        return value


def settings_problem(exc: Exception) -> str:
    """One line for a ``ValidationError`` of :class:`DashboardSettings` (never a value: it
    may be the password)."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return str(exc)
    first = exc.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else "?"
    return f"ACTA_DASHBOARD_{field.upper()}: {first['msg']}"
