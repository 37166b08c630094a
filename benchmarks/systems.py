"""The systems under test: how to install each, reset it, drive it, and ask it what is left.

acta runs from this checkout (the interpreter running the harness); a baseline acta
(``--acta-baseline``) runs the same interpreter and dependencies with another checkout's
``acta_sqla`` and ``benchmarks`` first on ``PYTHONPATH`` (:func:`prepare_baseline`);
PgQueuer runs from a scratch venv outside the repository, created on first use with
``pip install pgqueuer==1.6.0 asyncpg uvloop psycopg[binary]``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from benchmarks.bytecode import PACKAGES

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DRIVERS = HERE / "drivers"

PGQUEUER_VERSION = "1.6.0"
PGQUEUER_PACKAGES = [f"pgqueuer=={PGQUEUER_VERSION}", "asyncpg", "uvloop", "psycopg[binary]"]


@dataclass
class System:
    name: str
    label: str
    database: str
    python: str
    driver: Path
    remaining_sql: str
    """Jobs not yet terminal; the drain ends when it reaches 0."""
    count_sql: str
    """Jobs present (checks the enqueue counts)."""
    ok_sql: str
    """Jobs that ran successfully (checks the drain)."""
    drain_settings: list[str | None] = field(default_factory=lambda: [None])
    """Worker variants measured in the drain (acta: executor counts)."""
    cwd: Path | None = None
    """Where its setup and driver commands run (None: the harness's own directory)."""

    def env(self, dsn: str) -> dict[str, str]:
        raise NotImplementedError

    def setup_cmds(self, dsn: str) -> list[list[str]]:
        raise NotImplementedError

    async def reset_sql(self, conn: asyncpg.Connection) -> str:
        raise NotImplementedError

    def worker_cmd(self, setting: str | None) -> list[str]:
        raise NotImplementedError

    def setting_label(self, setting: str | None) -> str:
        return ""

    def versions(self) -> dict[str, str]:
        return {}


def _base_env(dsn: str) -> dict[str, str]:
    # No ACTA_* or PG* settings of the caller's shell leak into the systems: each runs at
    # its defaults against the benchmark database only.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACTA_", "PG"))}
    env.update(BENCH_DSN=dsn, PYTHONUNBUFFERED="1")
    return env


async def truncate_all(conn: asyncpg.Connection, schema: str, where: str) -> str:
    """One statement that empties the tables of ``schema`` matching ``where`` (read now,
    so that tables a newer version added are emptied too)."""
    rows = await conn.fetch(
        f"SELECT tablename FROM pg_tables WHERE schemaname = '{schema}' AND {where} "
        "ORDER BY tablename"
    )
    tables = ", ".join(f'"{schema}"."{r[0]}"' for r in rows)
    return f"TRUNCATE {tables} RESTART IDENTITY CASCADE"


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


@dataclass(frozen=True)
class Baseline:
    """Another version of acta to measure beside this checkout: a tree holding its own
    ``acta_sqla``, ``alembic`` and ``benchmarks`` (its driver and app), and its name."""

    tree: Path
    rev: str


def prepare_baseline(spec: str, work: Path, log: object = print) -> Baseline:
    """``spec`` is a directory (another checkout, used as it is) or a git revision of this
    repository, exported once with ``git archive`` to ``work/<sha>`` (outside the repo; no
    worktree is registered, so nothing is left for ``git worktree prune``) and reused."""
    given = Path(spec).expanduser()
    if given.is_dir():
        tree = given.resolve()
        try:
            rev = git("rev-parse", "--short", "HEAD", cwd=tree)
            if git("status", "--porcelain", "--", "acta_sqla", "alembic", cwd=tree):
                rev += "+dirty"
        except (OSError, subprocess.CalledProcessError):
            rev = tree.name
    else:
        try:
            sha = git("rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}")
        except subprocess.CalledProcessError:
            raise ValueError(
                f"--acta-baseline {spec!r}: neither a directory nor a git revision of {REPO}"
            ) from None
        rev = sha[:7]
        tree = work / sha[:12]
        if not tree.exists():
            if callable(log):
                log(f"exporting {spec} ({rev}) to {tree} ...")
            partial = work / f".{sha[:12]}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            archive = subprocess.Popen(
                ["git", "-C", str(REPO), "archive", sha], stdout=subprocess.PIPE
            )
            subprocess.run(["tar", "-x", "-C", str(partial)], stdin=archive.stdout, check=True)
            if archive.wait() != 0:
                raise RuntimeError(f"git archive {sha} failed")
            partial.rename(tree)
    for needed in ("acta_sqla", "benchmarks/app.py", "benchmarks/drivers/acta_driver.py"):
        if not (tree / needed).exists():
            raise ValueError(f"--acta-baseline {spec!r}: {tree} has no {needed}")
    return Baseline(tree, rev)


class Acta(System):
    """acta from this checkout, or from a :class:`Baseline`'s tree (its own package,
    migrations, driver and app; this interpreter and its dependencies)."""

    def __init__(
        self,
        executors: list[str | None],
        db_prefix: str = "bench",
        baseline: Baseline | None = None,
    ) -> None:
        self.baseline = baseline
        self.tree = REPO if baseline is None else baseline.tree
        suffix = "" if baseline is None else f"@{baseline.rev}"
        super().__init__(
            name="acta" + suffix,
            label="acta-sqla" + suffix,
            database=f"{db_prefix}_acta" + ("" if baseline is None else "_base"),
            python=sys.executable,
            driver=self.tree / "benchmarks" / "drivers" / "acta_driver.py",
            # The terminal statuses are part of the stored data, not of one code version.
            remaining_sql="SELECT count(*) FROM acta.job "
            "WHERE status NOT IN ('succeeded', 'failed', 'cancelled')",
            count_sql="SELECT count(*) FROM acta.job",
            ok_sql="SELECT count(*) FROM acta.job WHERE status = 'succeeded'",
            drain_settings=executors,
            # `python -c` puts its working directory first on sys.path: a baseline's setup
            # must run in its own tree, or it would import this checkout's acta_sqla.
            cwd=None if baseline is None else self.tree,
        )

    def env(self, dsn: str) -> dict[str, str]:
        env = _base_env(dsn)
        env["ACTA_DATABASE_URL"] = dsn
        # benchmarks.app imports from the checkout, whatever the working directory (the
        # worker runs in the results folder, so that no stray .env of the checkout applies).
        # PYTHONPATH comes before site-packages: a baseline's tree wins over this
        # checkout's editable install; the setup checks that it did.
        extra = os.environ.get("PYTHONPATH", "") if self.baseline is None else ""
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.tree), extra) if p)
        return env

    def setup_cmds(self, dsn: str) -> list[list[str]]:
        # Byte-compile the package as pip does on install: PgQueuer runs from a pip-installed
        # venv, while acta may run from an editable checkout in a shell that sets
        # PYTHONDONTWRITEBYTECODE, and would then compile its modules at every worker start.
        # The stdlib's command line, run by this system's interpreter on its own tree (a
        # baseline's tree may predate benchmarks.bytecode); the packages are that module's.
        compile_cmd = [
            self.python,
            "-m",
            "compileall",
            "-q",
            *(str(self.tree / package) for package in PACKAGES),
        ]
        # Whatever runs must be this system's tree: a baseline that silently imported this
        # checkout would make every comparison read 1.00x.
        where = [
            self.python,
            "-c",
            "import pathlib, sys, acta_sqla, benchmarks.app; "
            f"tree = pathlib.Path({str(self.tree)!r}).resolve(); "
            "bad = [m.__name__ for m in (acta_sqla, benchmarks.app) "
            "if tree not in pathlib.Path(m.__file__).resolve().parents]; "
            "sys.exit(f'imported from outside {tree}: {bad}' if bad else 0)",
        ]
        return [where, compile_cmd, [self.python, str(self.driver), "setup"]]

    async def reset_sql(self, conn: asyncpg.Connection) -> str:
        # Every table of the schema but the migration version (new tables included).
        return await truncate_all(conn, "acta", "tablename <> 'alembic_version'")

    def worker_cmd(self, setting: str | None) -> list[str]:
        acta = Path(sys.executable).parent / "acta"
        cmd = [str(acta)] if acta.exists() else [sys.executable, "-c", _ACTA_MAIN]
        cmd += ["worker", "--app", "benchmarks.app:acta"]
        if setting is not None:
            cmd += ["--executors", setting]
        return cmd

    def setting_label(self, setting: str | None) -> str:
        if setting is None:
            try:
                from acta_sqla.settings import default_executors

                return f"{default_executors()} executors (default)"
            except ImportError:
                return "default executors"
        return f"{setting} executors"

    def versions(self) -> dict[str, str]:
        if self.baseline is not None:
            return {self.name: self.baseline.rev}
        import acta_sqla

        out = {"acta_sqla": acta_sqla.__version__}
        try:
            dirty = git("status", "--porcelain", "--", "acta_sqla", "alembic")
            out["git"] = git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else "")
        except (OSError, subprocess.CalledProcessError):
            pass
        return out


_ACTA_MAIN = "import sys; from acta_sqla.cli import main; sys.argv[0] = 'acta'; main()"


class PgQueuer(System):
    def __init__(self, venv: Path, db_prefix: str = "bench") -> None:
        self.venv = venv
        super().__init__(
            name="pgqueuer",
            label=f"PgQueuer {PGQUEUER_VERSION}",
            database=f"{db_prefix}_pgqueuer",
            python=str(venv / "bin" / "python"),
            driver=DRIVERS / "pgqueuer_driver.py",
            # Finished jobs leave the queue table (they are logged to pgqueuer_log).
            remaining_sql="SELECT count(*) FROM pgqueuer",
            count_sql="SELECT count(*) FROM pgqueuer",
            ok_sql="SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'",
        )

    def ensure_installed(self, log: object = print) -> None:
        """Create the scratch venv and install PgQueuer in it unless it is already there."""
        if self._installed_version() == PGQUEUER_VERSION:
            return
        if callable(log):
            log(f"installing {' '.join(PGQUEUER_PACKAGES)} into {self.venv} ...")
        if not (self.venv / "bin" / "python").exists():
            self.venv.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True)
        subprocess.run(
            [str(self.venv / "bin" / "python"), "-m", "pip", "install", "-q", *PGQUEUER_PACKAGES],
            check=True,
        )
        found = self._installed_version()
        if found != PGQUEUER_VERSION:
            raise RuntimeError(f"PgQueuer {PGQUEUER_VERSION} wanted in {self.venv}, found {found}")

    def _installed_version(self) -> str | None:
        py = self.venv / "bin" / "python"
        if not py.exists():
            return None
        p = subprocess.run(
            [str(py), "-c", "import importlib.metadata as m; print(m.version('pgqueuer'))"],
            capture_output=True,
            text=True,
        )
        return p.stdout.strip() if p.returncode == 0 else None

    def env(self, dsn: str) -> dict[str, str]:
        return _base_env(dsn)

    def setup_cmds(self, dsn: str) -> list[list[str]]:
        return [[str(self.venv / "bin" / "pgq"), "--pg-dsn", dsn, "install"]]

    async def reset_sql(self, conn: asyncpg.Connection) -> str:
        return await truncate_all(conn, "public", "tablename LIKE 'pgqueuer%'")

    def worker_cmd(self, setting: str | None) -> list[str]:
        return [self.python, str(self.driver), "worker"]

    def setting_label(self, setting: str | None) -> str:
        return "batch_size=10"

    def versions(self) -> dict[str, str]:
        return {"pgqueuer": self._installed_version() or "?"}
