"""The ```python blocks of a markdown file, with their hidden test directives.

A block is every fenced code block whose info string is ``python`` (or ``py``,
``python3``), indented or not (a block inside a list item is dedented by its fence's
indentation). Two HTML comments, invisible when the markdown is rendered, may sit next to
it, separated from the fence by blank lines only:

* above the opening fence, the block's setup (Sphinx's ``testsetup``)::

      <!-- test-setup: session, users
      from acta_sqla import Acta, Context
      acta = Acta(namespace="default")
      -->

  The first line names setups of tests/docs/setups.py (comma-separated, maybe none); the
  lines after it are Python run before the block, in the block's namespace;
* below the closing fence, a check run after it in the same namespace (``test-check``,
  same form, usually assertions that the block did what the prose says).

Any other comment starting with ``test-`` is an error, and so is a directive that is not
next to a python block: a typo never turns into a silently untested block.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

PYTHON_INFO = frozenset({"python", "py", "python3"})
DIRECTIVES = ("test-setup", "test-check")

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)\s*(?P<info>[^`\s]*)")
_COMMENT_START = re.compile(r"^(?P<indent> *)<!--\s*(?P<body>.*)$")


class DocSyntaxError(ValueError):
    """A malformed directive or fence; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class Directive:
    kind: str
    names: tuple[str, ...]
    code: str
    line: int
    """The 1-based line of the directive's first code line (for tracebacks)."""


@dataclass(frozen=True, slots=True)
class DocBlock:
    path: Path
    line: int
    """The 1-based line of the block's first code line."""
    code: str
    setup: Directive | None = None
    check: Directive | None = None
    relpath: str = field(default="", compare=False)

    @property
    def id(self) -> str:
        return f"{self.relpath or self.path.name}:{self.line}"


@dataclass(slots=True)
class _Comment:
    start: int  # 0-based line index of "<!--"
    end: int  # 0-based line index of the line holding "-->"
    text: str  # between "<!--" and "-->", dedented


def _comments(lines: list[str]) -> dict[int, _Comment]:
    """Every HTML comment of the file outside code fences, keyed by its start line."""
    found: dict[int, _Comment] = {}
    fence: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened["fence"].startswith(fence) and not opened["info"]:
                fence = None
            i += 1
            continue
        if opened:
            fence = opened["fence"]
            i += 1
            continue
        start = _COMMENT_START.match(line)
        if start:
            indent = len(start["indent"])
            body = [start["body"]]
            j = i
            while "-->" not in body[-1]:
                j += 1
                if j == len(lines):
                    raise DocSyntaxError(f"line {i + 1}: an HTML comment that never ends")
                body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            body[-1] = body[-1].split("-->", 1)[0]
            found[i] = _Comment(i, j, "\n".join(body))
            i = j + 1
            continue
        i += 1
    return found


def _directive(comment: _Comment, where: str) -> Directive | None:
    text = comment.text
    if not text.startswith("test-"):
        return None
    head, _, rest = text.partition("\n")
    kind, colon, names = head.partition(":")
    kind = kind.strip()
    if kind not in DIRECTIVES:
        raise DocSyntaxError(
            f"{where}:{comment.start + 1}: unknown directive {kind!r} "
            f"(the directives are {', '.join(DIRECTIVES)})"
        )
    if not colon and names.strip():
        raise DocSyntaxError(f"{where}:{comment.start + 1}: write {kind}: NAME, NAME")
    listed = tuple(n.strip() for n in names.split(",") if n.strip())
    return Directive(kind, listed, textwrap.dedent(rest), comment.start + 2)


def _neighbour(lines: list[str], index: int, step: int) -> int:
    """The first non-blank line from ``index`` going by ``step`` (-1 or len(lines))."""
    while 0 <= index < len(lines) and not lines[index].strip():
        index += step
    return index


def parse(path: Path, relpath: str = "") -> list[DocBlock]:
    """The python blocks of ``path``, each with its directives."""
    where = relpath or str(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    comments = _comments(lines)
    by_end = {c.end: c for c in comments.values()}
    used: set[int] = set()
    blocks: list[DocBlock] = []
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        indent, fence, info = len(opened["indent"]), opened["fence"], opened["info"].lower()
        j = i + 1
        while j < len(lines):
            closing = _FENCE.match(lines[j])
            if closing and closing["fence"].startswith(fence) and not closing["info"]:
                break
            j += 1
        else:
            raise DocSyntaxError(f"{where}:{i + 1}: a code fence that is never closed")
        if info in PYTHON_INFO:
            body = [
                line[indent:] if line[:indent].strip() == "" else line for line in lines[i + 1 : j]
            ]
            setup = check = None
            above = by_end.get(_neighbour(lines, i - 1, -1))
            if above is not None:
                setup = _directive(above, where)
                if setup is not None:
                    if setup.kind != "test-setup":
                        raise DocSyntaxError(
                            f"{where}:{above.start + 1}: {setup.kind} belongs below a block"
                        )
                    used.add(above.start)
            below = comments.get(_neighbour(lines, j + 1, 1))
            if below is not None:
                check = _directive(below, where)
                if check is not None:
                    if check.kind != "test-check":
                        check = None  # the next block's setup
                    else:
                        used.add(below.start)
            blocks.append(DocBlock(path, i + 2, "\n".join(body) + "\n", setup, check, relpath))
        i = j + 1
    for start, comment in comments.items():
        directive = _directive(comment, where)
        if directive is not None and start not in used:
            raise DocSyntaxError(
                f"{where}:{start + 1}: {directive.kind} is not next to a ```python block"
            )
    return blocks


def collect(root: Path) -> list[DocBlock]:
    """Every python block of ``root``/README.md and ``root``/docs/*.md."""
    files = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    blocks: list[DocBlock] = []
    for path in files:
        if path.exists():
            blocks += parse(path, str(path.relative_to(root)))
    return blocks


def python_fences(root: Path) -> int:
    """The python fences of the same files, counted by a plain pattern (a cross-check of
    :func:`collect`: no block escapes the parser)."""
    pattern = re.compile(r"^ *(```+|~~~+) *(python|py|python3)\s*$", re.I | re.M)
    files = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return sum(len(pattern.findall(p.read_text(encoding="utf-8"))) for p in files if p.exists())
