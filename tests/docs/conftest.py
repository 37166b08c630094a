"""Fixtures of the docs tier: the context a markdown block's setups get."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.docs.runner import DocContext


@pytest.fixture
def doc_context(
    db: str,
    tmp_path: Path,
    scratch_database: Callable[[], str],
    monkeypatch: pytest.MonkeyPatch,
) -> DocContext:
    """The test database emptied; ``ACTA_DATABASE_URL`` names it, so that a block that
    reads acta's settings reaches it, as a user's program reaches theirs."""
    for name in [n for n in __import__("os").environ if n.startswith("ACTA_")]:
        if name != "ACTA_TEST_DATABASE_URL":
            monkeypatch.delenv(name)
    monkeypatch.setenv("ACTA_DATABASE_URL", db)
    return DocContext(database_url=db, tmp_path=tmp_path, scratch_database=scratch_database)
