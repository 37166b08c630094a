"""Run one markdown python block: its named setups, its inline setup, the block, its check.

The block runs as the body of a fresh module (so classes, pydantic models and FastAPI
endpoints defined in it resolve their annotations), compiled with its markdown file's name
and line numbers so that a traceback points at the doc. Top-level ``await`` is allowed in
the block and its directives: such code is awaited on the test's event loop.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import re
import sys
import types
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _pytest.assertion.rewrite import rewrite_asserts

from tests.docs.markdown import DocBlock

Setup = Callable[["DocContext"], AbstractAsyncContextManager[dict[str, Any]]]


@dataclass(slots=True)
class DocContext:
    """What a named setup may use: the test database, a scratch folder, more databases."""

    database_url: str
    tmp_path: Path
    scratch_database: Callable[[], str]


class UnknownSetup(LookupError):
    pass


def _compile(source: str, filename: str, first_line: int) -> types.CodeType:
    # Padding keeps the line numbers of the markdown file in tracebacks.
    padded = "\n" * (first_line - 1) + source
    tree = ast.parse(padded, filename)
    # pytest's own assertion rewriting: a failed assert in a doc says what it compared.
    rewrite_asserts(tree, padded.encode(), filename)
    return compile(tree, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


async def _run(code: types.CodeType, namespace: dict[str, Any]) -> None:
    if code.co_flags & inspect.CO_COROUTINE:
        await eval(code, namespace)
    else:
        exec(code, namespace)


def _register_source(path: Path) -> str:
    """Let tracebacks quote the markdown file's lines."""
    filename = str(path)
    text = path.read_text(encoding="utf-8")
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
    return filename


async def run_block(
    block: DocBlock, ctx: DocContext, setups: dict[str, Setup] | None = None
) -> dict[str, Any]:
    """Run ``block``; raise what it raises. Returns the namespace it ran in."""
    if setups is None:
        from tests.docs.setups import SETUPS as setups
    filename = _register_source(block.path)
    module_name = "docblock_" + re.sub(r"\W", "_", block.id)
    module = types.ModuleType(module_name)
    module.__file__ = filename
    namespace = module.__dict__
    namespace["DATABASE_URL"] = ctx.database_url
    sys.modules[module_name] = module
    try:
        async with AsyncExitStack() as stack:
            if block.setup is not None:
                for name in block.setup.names:
                    if name not in setups:
                        raise UnknownSetup(
                            f"{block.id}: test-setup names {name!r}, which tests/docs/setups.py "
                            f"does not define (it has: {', '.join(sorted(setups))})"
                        )
                    namespace.update(await stack.enter_async_context(setups[name](ctx)))
                if block.setup.code.strip():
                    await _run(_compile(block.setup.code, filename, block.setup.line), namespace)
            await _run(_compile(block.code, filename, block.line), namespace)
            if block.check is not None and block.check.code.strip():
                await _run(_compile(block.check.code, filename, block.check.line), namespace)
        return namespace
    finally:
        sys.modules.pop(module_name, None)
