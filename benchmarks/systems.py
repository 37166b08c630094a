"""The systems under test: how to install each, reset it, drive it, and ask it what is left.

acta runs from this checkout (the interpreter running the harness); PgQueuer runs from a
scratch venv outside the repository, created on first use with
``pip install pgqueuer==1.6.0 asyncpg uvloop psycopg[binary]``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

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


class Acta(System):
    def __init__(self, executors: list[str | None], db_prefix: str = "bench") -> None:
        super().__init__(
            name="acta",
            label="acta-sqla",
            database=f"{db_prefix}_acta",
            python=sys.executable,
            driver=DRIVERS / "acta_driver.py",
            # The terminal statuses are part of the stored data, not of one code version.
            remaining_sql="SELECT count(*) FROM acta.job "
            "WHERE status NOT IN ('succeeded', 'failed', 'cancelled')",
            count_sql="SELECT count(*) FROM acta.job",
            ok_sql="SELECT count(*) FROM acta.job WHERE status = 'succeeded'",
            drain_settings=executors,
        )

    def env(self, dsn: str) -> dict[str, str]:
        env = _base_env(dsn)
        env["ACTA_DATABASE_URL"] = dsn
        # benchmarks.app imports from the checkout, whatever the working directory (the
        # worker runs in the results folder, so that no stray .env of the checkout applies).
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
        )
        return env

    def setup_cmds(self, dsn: str) -> list[list[str]]:
        # Byte-compile the package as pip does on install: PgQueuer runs from a pip-installed
        # venv, while acta may run from an editable checkout in a shell that sets
        # PYTHONDONTWRITEBYTECODE, and would then compile its modules at every worker start.
        compile_cmd = [
            self.python,
            "-c",
            "import compileall, pathlib, acta_sqla, benchmarks; "
            "[compileall.compile_dir(pathlib.Path(m.__file__).parent, quiet=1) "
            "for m in (acta_sqla, benchmarks)]",
        ]
        return [compile_cmd, [self.python, str(self.driver), "setup"]]

    async def reset_sql(self, conn: asyncpg.Connection) -> str:
        # Every table of the schema but the migration version (new tables included).
        rows = await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'acta' "
            "AND tablename <> 'alembic_version' ORDER BY tablename"
        )
        tables = ", ".join(f'acta."{r[0]}"' for r in rows)
        return f"TRUNCATE {tables} RESTART IDENTITY CASCADE"

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
        import acta_sqla

        out = {"acta_sqla": acta_sqla.__version__}
        try:
            head = subprocess.run(
                ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            dirty = subprocess.run(
                ["git", "-C", str(REPO), "status", "--porcelain", "--", "acta_sqla", "alembic"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            out["git"] = head + ("+dirty" if dirty else "")
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
        rows = await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
            "AND tablename LIKE 'pgqueuer%' ORDER BY tablename"
        )
        tables = ", ".join(f'"{r[0]}"' for r in rows)
        return f"TRUNCATE {tables} RESTART IDENTITY CASCADE"

    def worker_cmd(self, setting: str | None) -> list[str]:
        return [self.python, str(self.driver), "worker"]

    def setting_label(self, setting: str | None) -> str:
        return "batch_size=10"

    def versions(self) -> dict[str, str]:
        return {"pgqueuer": self._installed_version() or "?"}
