"""The docs collector and runner can fail: a broken block, a fragment without its setup
and a mistyped directive each fail the run, pointing at the markdown's own line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.docs.markdown import DocSyntaxError, collect, parse, python_fences
from tests.docs.runner import DocContext, UnknownSetup, run_block
from tests.harness import REPO_ROOT

pytestmark = pytest.mark.docs

BROKEN = """\
# A doc

<!-- test-setup:
from acta_sqla import Acta, Context
acta = Acta(namespace="default")
-->
```python
@acta.job(max_attempts=0)  # drifted: the code refuses it
async def send(ctx: Context) -> None: ...
```

```text
shell output is not run
```

  ```python
  value = 1 + 1
  ```
  <!-- test-check
  assert value == 3, "the prose said 3"
  -->
"""


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_blocks_their_lines_and_directives_are_parsed(tmp_path: Path) -> None:
    _write(tmp_path, "README.md", BROKEN)
    first, second = collect(tmp_path)
    assert (first.id, first.line, second.line) == ("README.md:8", 8, 17)
    assert first.setup is not None and "Acta(namespace" in first.setup.code
    assert second.code == "value = 1 + 1\n"  # the list item's indentation is gone
    assert second.check is not None and second.check.code.startswith("assert value == 3")
    assert python_fences(tmp_path) == 2


async def test_a_drifted_block_fails_at_its_own_line(
    tmp_path: Path, doc_context: DocContext
) -> None:
    _write(tmp_path, "README.md", BROKEN)
    drifted, checked = collect(tmp_path)
    with pytest.raises(Exception, match="max_attempts") as raised:
        await run_block(drifted, doc_context)
    # The traceback names the markdown file and the block's line (pytest counts from 0).
    assert (str(tmp_path / "README.md"), 8) in [
        (str(e.path), e.lineno + 1) for e in raised.traceback
    ]
    with pytest.raises(AssertionError, match="the prose said 3"):
        await run_block(checked, doc_context)


async def test_a_fragment_without_its_setup_fails(tmp_path: Path, doc_context: DocContext) -> None:
    path = _write(tmp_path, "docs/x.md", "```python\nsession.add(job)\n```\n")
    [block] = parse(path)
    with pytest.raises(NameError, match="session"):
        await run_block(block, doc_context)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<!-- test-stup: session -->\n```python\npass\n```\n", "unknown directive 'test-stup'"),
        ("<!-- test-setup: session -->\n\nsome prose\n\n```python\npass\n```\n", "not next to"),
        ("```python\npass\n```\n<!-- test-setup: x -->\n", "not next to"),
        ("```python\npass\n", "never closed"),
    ],
)
def test_a_mistyped_or_stray_directive_is_an_error(tmp_path: Path, text: str, error: str) -> None:
    with pytest.raises(DocSyntaxError, match=error):
        parse(_write(tmp_path, "a.md", text))


async def test_an_unknown_setup_name_fails(tmp_path: Path, doc_context: DocContext) -> None:
    [block] = parse(_write(tmp_path, "a.md", "<!-- test-setup: sesion -->\n```python\npass\n```\n"))
    with pytest.raises(UnknownSetup, match="'sesion'"):
        await run_block(block, doc_context)


def test_pytest_m_docs_fails_on_a_broken_block(tmp_path: Path, server_url: str) -> None:
    """The run CI makes, on a copy of the docs with one block broken on purpose (its own
    test database, on this run's server; in one process: ``-n 0``)."""
    _write(tmp_path, "README.md", BROKEN)
    env = {**os.environ, "ACTA_DOCS_ROOT": str(tmp_path), "ACTA_TEST_DATABASE_URL": server_url}
    env.pop("ACTA_DATABASE_URL", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "docs",
            "-q",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
            "tests/docs/test_docs.py",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 failed, 1 passed" in done.stdout, done.stdout
    assert "README.md:8" in done.stdout and "the prose said 3" in done.stdout
