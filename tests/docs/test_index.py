"""The README's documentation index names every page of docs/, each with its line."""

from __future__ import annotations

import re

import pytest

from tests.harness import REPO_ROOT

pytestmark = pytest.mark.docs


def test_the_readmes_index_lists_every_docs_page() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    start = readme.index("\n## Documentation\n")
    index = readme[start : readme.index("\n## ", start + 1)]
    listed = re.findall(r"^\| \[docs/([^\]]+\.md)\]\(docs/\1\) \| .+ \|$", index, re.M)
    pages = sorted(p.name for p in (REPO_ROOT / "docs").glob("*.md"))
    assert sorted(listed) == pages, "README.md's '## Documentation' table: one row per page"
