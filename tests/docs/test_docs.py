"""Every ```python block of README.md and docs/*.md runs (``pytest -m docs``).

A block gets its setup from the hidden ``<!-- test-setup: ... -->`` comment above it and
its check from ``<!-- test-check ... -->`` below it (tests/docs/markdown.py); the README's
"Testing the docs" part says how to write them. ``ACTA_DOCS_ROOT`` points the collection
at another folder (the proof below that a broken block fails the run uses it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.docs.markdown import DocBlock, collect, python_fences
from tests.docs.runner import DocContext, run_block
from tests.harness import REPO_ROOT

pytestmark = pytest.mark.docs

ROOT = Path(os.environ.get("ACTA_DOCS_ROOT") or REPO_ROOT)
BLOCKS = collect(ROOT)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
async def test_doc_block(block: DocBlock, doc_context: DocContext) -> None:
    await run_block(block, doc_context)


def test_every_python_fence_is_collected() -> None:
    assert BLOCKS, f"no ```python block found under {ROOT}"
    assert len(BLOCKS) == python_fences(ROOT)
