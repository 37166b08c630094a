"""The public API type-checks for a user: mypy --strict on tests/typing/user_app.py, run
outside the repository so that acta_sqla is found as an installed package (PEP 561: only
through its py.typed marker), must reveal the types and report the errors its comments
expect, and nothing else.

mypy keeps its incremental cache in pytest's cache folder (``.pytest_cache/d/mypy``), so
that a run after the first re-checks only what changed (about 0.2 s of CPU instead of 6 s
for acta_sqla, SQLAlchemy and pydantic); mypy validates every cached module against its
source and options, so the report is the same as a cold run's. Without pytest's cache
(``-p no:cacheprovider``) it runs cold (``--no-incremental``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from acta_sqla import Acta, Context, InvalidJobArgs

HERE = Path(__file__).parent
LINE = re.compile(r"^[^:]+:(\d+): (error|note): (.*?)(?:  \[([\w-]+)\])?$")


def expectations(source: str) -> tuple[dict[int, str], dict[int, str]]:
    reveals, errors = {}, {}
    for number, line in enumerate(source.splitlines(), 1):
        if m := re.search(r"# R: (.+)$", line):
            reveals[number] = m.group(1).strip()
        if m := re.search(r"# E: ([\w-]+)$", line):
            errors[number] = m.group(1)
    return reveals, errors


def _cache_options(config: pytest.Config) -> list[str]:
    cache = getattr(config, "cache", None)
    if cache is None:
        return ["--no-incremental"]
    return ["--cache-dir", str(cache.mkdir("mypy"))]


def test_mypy_reads_the_public_api_as_typed(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    source = (HERE / "user_app.py").read_text()
    (tmp_path / "user_app.py").write_text(source)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", *_cache_options(pytestconfig), "user_app.py"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    reveals, errors = expectations(source)
    got_reveals: dict[int, str] = {}
    got_errors: dict[int, str] = {}
    for line in done.stdout.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        number, what, text, code = int(m[1]), m[2], m[3], m[4]
        if what == "note" and text.startswith("Revealed type is "):
            got_reveals[number] = text.removeprefix("Revealed type is ").strip('"')
        elif what == "error":
            got_errors[number] = code or text
    assert "import-untyped" not in done.stdout, done.stdout  # the py.typed marker
    assert got_reveals == reveals, done.stdout
    assert got_errors == errors, done.stdout


def test_the_package_ships_its_py_typed_marker() -> None:
    import acta_sqla

    assert (Path(acta_sqla.__file__).parent / "py.typed").is_file()


def test_handler_job_takes_args_by_position_as_its_type_allows() -> None:
    acta = Acta("typing")

    @acta.job
    def copy(ctx: Context, src: str, dst: str = "out") -> None:
        return None

    assert copy.job("a", "b").args == {"src": "a", "dst": "b"}
    assert copy.job("a", delay=5).args == {"src": "a"}
    with pytest.raises(InvalidJobArgs, match=r"3 positional arguments given, the handler takes 2"):
        copy.job("a", "b", "c")
    with pytest.raises(InvalidJobArgs, match=r"\['src'\] given twice"):
        copy.job("a", src="b")
