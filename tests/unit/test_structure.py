"""The house's structure, checked: which package may import which (counting imports inside
functions), so an arrow removed on purpose does not come back unseen."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import acta_sqla

PACKAGE = Path(acta_sqla.__file__).parent


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, top level or inside a function, resolved to
    ``acta_sqla.x.y`` for relative imports."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    package = parts[:-1]  # a module's package; an __init__'s is its own folder
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return found


def _importers(under: str, target: str) -> list[str]:
    return sorted(
        str(path.relative_to(PACKAGE))
        for path in (PACKAGE / under).rglob("*.py")
        if any(m == target or m.startswith(target + ".") for m in _imports(path))
    )


def test_the_dashboard_imports_nothing_of_the_cli() -> None:
    # describe_error lives in errors.py, shared by both.
    assert _importers("dashboard", "acta_sqla.cli") == []


def test_the_executor_takes_one_frozen_config_and_a_store() -> None:
    import dataclasses
    import inspect

    from acta_sqla.worker.executor import Executor, ExecutorConfig

    params = list(inspect.signature(Executor.__init__).parameters)[1:]
    assert params == ["config", "registry", "permits", "claimed", "completed", "store", "clock"]
    assert ExecutorConfig.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert dataclasses.is_dataclass(ExecutorConfig)


STORE_MODULES = ("store.py", "store_lifecycle.py", "store_recovery.py", "store_schedules.py")
"""``WorkerStore`` and the parts it is made of (one class owns the connections)."""


@pytest.mark.parametrize("module", STORE_MODULES)
def test_the_store_imports_no_feature_module(module: str) -> None:
    """The store is a door: statements run, rows turned into values. Which tick a schedule
    fires next (worker/fires.py), what a policy is, what a wait means: decided elsewhere."""
    features = ("schedules", "waits", "policy", "handler", "app", "session", "worker")
    imported = _imports(PACKAGE / module)
    assert not [m for m in imported for f in features if m.startswith(f"acta_sqla.{f}")]


def _class_lines(path: Path, name: str) -> int:
    [cls] = [n for n in ast.parse(path.read_text()).body if getattr(n, "name", None) == name]
    assert cls.end_lineno is not None
    return cls.end_lineno - cls.lineno + 1


def test_the_supervisor_is_wiring_and_the_store_a_door() -> None:
    """Start-up and re-registration live in worker/startup.py, the stop in
    worker/shutdown.py; the store's statements by role in store_*.py."""
    assert len((PACKAGE / "worker" / "supervisor.py").read_text().splitlines()) <= 350
    assert _class_lines(PACKAGE / "store.py", "WorkerStore") <= 300
    from acta_sqla.store import WorkerStore

    # One class owns the connections; its parts only run statements on them.
    for part in WorkerStore.__mro__[1:-1]:
        assert "__init__" not in vars(part), part


def test_the_worker_public_names() -> None:
    from acta_sqla import testing
    from acta_sqla.fastapi import in_process_worker
    from acta_sqla.store import Declared, Definitions, WorkerStore
    from acta_sqla.worker import Worker

    assert Worker.__module__ == "acta_sqla.worker.supervisor"
    assert callable(in_process_worker) and callable(testing.drain)
    for method in ("start", "run", "shutdown", "kill", "force", "request_stop"):
        assert callable(getattr(Worker, method)), method
    for method in ("register_worker", "store_schedules", "recover_expired", "claim"):
        assert callable(getattr(WorkerStore, method)), method
    assert Declared and Definitions


def test_every_completion_shape_goes_through_ended() -> None:
    """One constructor of an executor's completions (the cancel rule applied once): only
    ``_ended``, ``refused`` (a refused completion rewritten) and recovery's
    ``lease_expired`` build a ``Completion`` themselves."""
    tree = ast.parse((PACKAGE / "worker" / "completions.py").read_text())
    builders = sorted(
        fn.name
        for fn in tree.body
        if isinstance(fn, ast.FunctionDef)
        for call in ast.walk(fn)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == "Completion"
    )
    assert builders == ["_ended", "lease_expired", "refused"]
