"""The programs a doc tells its reader to run come with what it tells them to install:
docs/fastapi.md says ``pip install 'acta-sqla[fastapi]'``, then runs ``uvicorn``."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import entry_points

import pytest

from tests.harness import REPO_ROOT

pytestmark = pytest.mark.docs

_SHELL_BLOCK = re.compile(r"^```(bash|console)\n(.*?)^```", re.M | re.S)
_NAME = re.compile(r"^[A-Za-z0-9._-]+")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _programs(doc: str) -> set[str]:
    """The first word of every command of the doc's bash and console blocks (a console
    block's commands are its ``$`` lines)."""
    found = set()
    for info, body in _SHELL_BLOCK.findall(doc):
        for line in body.splitlines():
            if info == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            words = line.split("#", 1)[0].split()
            while words and "=" in words[0]:  # VAR=value before the program
                words.pop(0)
            if words:
                found.add(words[0])
    return found


def _requirements(names: list[str]) -> set[str]:
    return {_canonical(_NAME.match(r)[0]) for r in names}  # type: ignore[index]


def test_the_fastapi_extra_brings_every_program_docs_fastapi_md_runs() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    installed = (
        _requirements(project["dependencies"])
        | _requirements(project["optional-dependencies"]["fastapi"])
        | {_canonical(project["name"])}
    )
    doc = (REPO_ROOT / "docs" / "fastapi.md").read_text()
    assert "pip install 'acta-sqla[fastapi]'" in doc or "`acta-sqla[fastapi]`" in doc
    programs = _programs(doc) - {"curl"}  # the reader's own HTTP client
    assert {"uvicorn", "acta"} <= programs
    scripts = {ep.name: ep.dist.name for ep in entry_points(group="console_scripts") if ep.dist}
    missing = {
        p: scripts.get(p) for p in programs if _canonical(scripts.get(p, p)) not in installed
    }
    assert missing == {}, "programs docs/fastapi.md runs that acta-sqla[fastapi] does not install"
