"""Named setups of the markdown python blocks (``<!-- test-setup: NAME, NAME -->``).

Each is an async context manager taking the :class:`~tests.docs.runner.DocContext` and
yielding the names it puts in the block's namespace; what it created is undone on exit.
Plain imports and small definitions belong in the directive's own code lines instead.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import types
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Annotated, Any

import httpx
from fastapi import FastAPI
from pydantic import BaseModel
from sqlalchemy import String, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from acta_sqla import Acta, Context
from tests.docs.runner import DocContext, Setup

SETUPS: dict[str, Setup] = {}


def setup(func: Any) -> Any:
    wrapped = asynccontextmanager(func)
    SETUPS[func.__name__] = wrapped
    return wrapped


def _async_url(url: str) -> str:
    return make_url(url).set(drivername="postgresql+asyncpg").render_as_string(False)


@setup
async def session(ctx: DocContext) -> AsyncIterator[dict[str, Any]]:
    """``session``: an ``AsyncSession`` on the test database (``expire_on_commit=False``),
    ``engine`` its engine; a transaction left open is rolled back."""
    engine = create_async_engine(_async_url(ctx.database_url))
    try:
        async with AsyncSession(engine, expire_on_commit=False) as opened:
            yield {"session": opened, "engine": engine}
    finally:
        await engine.dispose()


@setup
async def users(ctx: DocContext) -> AsyncIterator[dict[str, Any]]:
    """``User`` (id, email): the application's own model, its ``users`` table created in
    the test database for the block and dropped after it."""

    class Base(DeclarativeBase):
        pass

    class User(Base):
        __tablename__ = "users"
        id: Mapped[int] = mapped_column(primary_key=True)
        email: Mapped[str] = mapped_column(String(320), unique=True)

    engine = create_async_engine(_async_url(ctx.database_url))
    try:
        async with engine.begin() as conn:
            await conn.execute(text("DROP TABLE IF EXISTS public.users"))
            await conn.run_sync(Base.metadata.create_all)
        yield {"User": User, "Base": Base}
        async with engine.begin() as conn:
            # A session of the block still open on the table would make this wait: name
            # this setup before ``session`` (which then closes first).
            await conn.execute(text("SET LOCAL lock_timeout = '5s'"))
            await conn.run_sync(Base.metadata.drop_all)
    finally:
        await engine.dispose()


@setup
async def signup_app(ctx: DocContext) -> AsyncIterator[dict[str, Any]]:
    """The pieces around a FastAPI sign-up endpoint: ``app`` (a new FastAPI app), ``acta``
    with ``send_welcome``, ``Session`` bound to the test database, ``User`` (its table
    created), ``SignupIn``/``SignupOut`` and ``Annotated``; ``client``, an httpx client of
    the app, for the check."""
    acta = Acta(namespace="default")

    @acta.job(max_attempts=5)
    async def send_welcome(ctx: Context, user_id: int) -> dict[str, Any]:
        return {"sent": True, "user_id": user_id}

    class SignupIn(BaseModel):
        email: str

    class SignupOut(BaseModel):
        user_id: int
        job_id: int

    async with users(ctx) as names:
        engine = create_async_engine(_async_url(ctx.database_url))
        app = FastAPI()
        transport = httpx.ASGITransport(app=app)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://docs") as client:
                yield {
                    **names,
                    "Annotated": Annotated,
                    "acta": acta,
                    "send_welcome": send_welcome,
                    "Session": async_sessionmaker(engine, expire_on_commit=False),
                    "SignupIn": SignupIn,
                    "SignupOut": SignupOut,
                    "app": app,
                    "client": client,
                }
        finally:
            await engine.dispose()


@contextmanager
def _modules(**modules: types.ModuleType) -> Iterator[None]:
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _module(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


@setup
async def otel(ctx: DocContext) -> AsyncIterator[dict[str, Any]]:
    """OpenTelemetry's global providers made settable for the block and put back after it
    (the test process has its own, tests/telemetry.py). The exporters the docs name but the
    test extra does not install are stand-ins: the OTLP span exporter an in-memory one,
    the Prometheus reader an in-memory reader, ``prometheus_client.start_http_server`` a
    recorder of its port (``started_ports``)."""
    from opentelemetry import trace
    from opentelemetry.metrics import _internal as metrics_internal
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.util._once import Once

    class OTLPSpanExporter(InMemorySpanExporter):
        pass

    class PrometheusMetricReader(InMemoryMetricReader):
        pass

    started_ports: list[int] = []
    stand_ins: dict[str, types.ModuleType] = {}
    for name, attrs in {
        "opentelemetry.exporter.otlp.proto.http.trace_exporter": {
            "OTLPSpanExporter": OTLPSpanExporter
        },
        "opentelemetry.exporter.prometheus": {"PrometheusMetricReader": PrometheusMetricReader},
        "prometheus_client": {
            "start_http_server": lambda port, *a, **k: started_ports.append(port)
        },
    }.items():
        try:
            importlib.import_module(name)
        except ImportError:
            stand_ins[name] = _module(name, **attrs)
            parts = name.split(".")
            for i in range(1, len(parts)):
                parent = ".".join(parts[:i])
                if parent not in sys.modules:
                    stand_ins.setdefault(parent, _module(parent, __path__=[]))

    saved_trace = (trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE)
    saved_metrics = (
        metrics_internal._METER_PROVIDER,
        metrics_internal._METER_PROVIDER_SET_ONCE,
    )
    trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = None, Once()
    metrics_internal._METER_PROVIDER = None
    metrics_internal._METER_PROVIDER_SET_ONCE = Once()
    try:
        with _modules(**stand_ins):
            yield {"started_ports": started_ports}
    finally:
        for provider in (trace._TRACER_PROVIDER, metrics_internal._METER_PROVIDER):
            if provider is not None and hasattr(provider, "shutdown"):
                provider.shutdown()
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved_trace
        metrics_internal._METER_PROVIDER, metrics_internal._METER_PROVIDER_SET_ONCE = saved_metrics


_APP_REVISION = """
import sqlalchemy as sa
from alembic import op

revision = "app0001"
down_revision = None


def upgrade() -> None:
    op.create_table("app_user", sa.Column("id", sa.Integer(), primary_key=True))


def downgrade() -> None:
    op.drop_table("app_user")
"""


@setup
async def alembic_env(ctx: DocContext) -> AsyncIterator[dict[str, Any]]:
    """The block runs as an application's alembic ``env.py`` does, inside ``alembic
    upgrade head`` on a new, empty database (``app_url``): ``alembic.context`` is live,
    ``myapp.models`` is an application with one model and one migration (``app_user``)."""
    from alembic.config import Config
    from alembic.runtime.environment import EnvironmentContext
    from alembic.script import ScriptDirectory
    from sqlalchemy import Column, Integer
    from sqlalchemy.orm import declarative_base

    Base = declarative_base()
    type("AppUser", (Base,), {"__tablename__": "app_user", "id": Column(Integer, primary_key=True)})
    myapp = _module("myapp", __path__=[])
    models = _module("myapp.models", Base=Base)
    myapp.models = models  # type: ignore[attr-defined]

    url = make_url(ctx.scratch_database()).set(drivername="postgresql+psycopg")
    scripts = ctx.tmp_path / "migrations"
    (scripts / "versions").mkdir(parents=True)
    (scripts / "env.py").write_text("raise AssertionError('the doc block is the env.py')\n")
    (scripts / "versions" / "app0001.py").write_text(textwrap.dedent(_APP_REVISION))
    config = Config()
    config.set_main_option("script_location", str(scripts))
    config.set_main_option(
        "sqlalchemy.url", url.render_as_string(hide_password=False).replace("%", "%%")
    )
    script = ScriptDirectory.from_config(config)

    def upgrade(rev: Any, context: Any) -> Any:
        return script._upgrade_revs("head", rev)

    with (
        _modules(myapp=myapp, **{"myapp.models": models}),
        EnvironmentContext(config, script, fn=upgrade, destination_rev="head"),
    ):
        yield {"app_url": url.render_as_string(hide_password=False)}
