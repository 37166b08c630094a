"""The pytest plugin is registered through its entry point, costs nothing until used, and
its fixtures do not shadow this project's own (tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from acta_sqla import pytest_plugin
from tests import conftest

PLUGIN_FIXTURES = {
    "acta_database_url",
    "acta_engine",
    "acta_session",
    "acta_sync_engine",
    "acta_sync_session",
    "acta_worker",
}


def test_the_plugin_is_a_pytest11_entry_point() -> None:
    (found,) = [e for e in entry_points(group="pytest11") if e.name == "acta_sqla"]
    assert found.value == "acta_sqla.pytest_plugin"


def test_the_plugin_is_loaded_here(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.pluginmanager.has_plugin("acta_sqla")


def test_its_fixtures_do_not_shadow_this_projects() -> None:
    ours = {name for name in vars(conftest) if not name.startswith("_")}
    ours |= {"acta_env_for"}  # registered under its own name
    assert PLUGIN_FIXTURES <= set(vars(pytest_plugin))
    assert not PLUGIN_FIXTURES & ours


def test_loading_it_imports_neither_sqlalchemy_nor_a_driver() -> None:
    code = (
        "import sys, acta_sqla.pytest_plugin; "
        "print(sorted(m for m in ('sqlalchemy', 'asyncpg', 'psycopg', 'alembic') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
