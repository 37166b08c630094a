"""The one check of a job's args: what PostgreSQL's JSONB stores AND the worker loads.

Every enqueue path ends here (``Job(...)``, ``handler.job()``, ``handler.jobs()``, and so
``acta.enqueue`` / ``acta.enqueue_many``), so a value is refused the same way, with the same
message, wherever it is given. Refused, as ``InvalidJobArgs`` naming the argument:

* values that are not JSON (objects, sets, bytes…);
* NaN and ±Infinity: JSON has neither; encoders would write ``null``, silently;
* strings or keys holding NUL (JSONB cannot store it) or a lone surrogate such as
  ``"\\ud800"`` (not valid Unicode: the driver or PostgreSQL fails at commit);
* integers of more than ``MAX_ARGS_INT_DIGITS`` digits and nesting deeper than
  ``MAX_ARGS_DEPTH``: PostgreSQL stores them, but the worker's JSON parser (pydantic's jiter)
  refuses them, so the job would fail at every attempt;
* more than ``MAX_ARGS_BYTES`` of JSON (``PayloadTooLarge``).

The bulk path encodes thousands of jobs with pydantic (in Rust); :func:`suspect` is a cheap
scan of the text that lets a clean job through and sends any other to :func:`explain`, the
precise walk that names the problem, so the fast path stays fast and every path shares one
message.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, NoReturn

from .errors import InvalidJobArgs, PayloadTooLarge
from .policy import shown
from .settings import MAX_ARGS_BYTES, MAX_ARGS_DEPTH, MAX_ARGS_INT_DIGITS

_LONG_DIGITS = re.compile(rf"\d{{{MAX_ARGS_INT_DIGITS + 1}}}")
_INT_LIMIT = 10**MAX_ARGS_INT_DIGITS
_SURROGATE = re.compile("[\ud800-\udfff]")


def suspect(text: str, *, encoded_by_pydantic: bool = False) -> bool:
    """Whether encoded args may hold a problem: False proves they do not (size aside).
    ``encoded_by_pydantic``: the text came from ``model_dump_json``, which raises on a lone
    surrogate itself, so the UTF-8 test (about 0.6 µs a job of 270 bytes) is skipped."""
    # Marks of a problem in encoded text: an escaped NUL, the NaN/Infinity tokens pydantic
    # writes for non-finite floats. A mark inside an ordinary string is a false alarm that
    # explain() clears. Plain substring tests: a regex alternation scans several times slower,
    # which showed on bulk validation (+70 % on 20,000 jobs of 270 bytes).
    if "\\u0000" in text or "NaN" in text or "Infinity" in text:
        return True
    if not encoded_by_pydantic and not text.isascii():  # isascii() is O(1) in CPython
        try:
            text.encode()
        except UnicodeEncodeError:  # a lone surrogate
            return True
    size = len(text)
    # Nesting deeper than the limit needs more than that many '[' or '{' (and as many
    # closers); counting them costs two C scans, done only for text long enough to hold them.
    if size > 2 * MAX_ARGS_DEPTH and text.count("[") + text.count("{") > MAX_ARGS_DEPTH:
        return True
    return size > MAX_ARGS_INT_DIGITS and _LONG_DIGITS.search(text) is not None


def _path(path: tuple[Any, ...], root: str = "args") -> str:
    shown_path = path if len(path) <= 6 else (*path[:6], ...)
    return root + "".join("[…]" if p is ... else f"[{shown(p, 40)}]" for p in shown_path)


def explain(
    kind: str, args: Any, where: str = "", *, types: bool = True, root: str = "args"
) -> None:
    """Raise ``InvalidJobArgs`` for the first problem in ``args`` (document order); return
    when there is none. ``types=False`` skips the is-it-JSON check, for raw input that
    pydantic converts by the handler's signature (a ``datetime`` argument becomes text).
    ``root`` names the value in the message (a signal's ``payload``). Iterative, so no
    nesting depth reaches Python's recursion limit."""

    def refuse(path: tuple[Any, ...], problem: str) -> NoReturn:
        sep = "" if problem.startswith("=") else " "
        raise InvalidJobArgs(f"{kind}: {where}{_path(path, root)}{sep}{problem}")

    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(args, 1, ())]
    while stack:
        value, depth, path = stack.pop()
        if isinstance(value, str):
            if "\x00" in value:
                refuse(
                    path,
                    "contains a NUL character (\\u0000), which PostgreSQL's JSONB "
                    "cannot store; strip it or encode the data (e.g. base64)",
                )
            if _SURROGATE.search(value):
                refuse(
                    path,
                    f"contains a lone surrogate ({shown(value)}), which is not valid "
                    "Unicode and cannot be stored; fix the text's decoding",
                )
        elif isinstance(value, dict | list | tuple):
            if depth > MAX_ARGS_DEPTH:
                refuse(
                    path[:1],
                    f"is nested deeper than {MAX_ARGS_DEPTH} levels (the {root} "
                    "object is level 1; or it contains itself), which the worker's JSON "
                    "parser cannot load; flatten it, or store the data in your own table "
                    "and pass its id",
                )
            if isinstance(value, dict):
                for key in value:
                    if isinstance(key, str) and ("\x00" in key or _SURROGATE.search(key)):
                        refuse(
                            path,
                            f"has a key {shown(key)} holding a NUL or a lone "
                            "surrogate, which cannot be stored",
                        )
                items = [(item, depth + 1, (*path, key)) for key, item in value.items()]
            else:
                items = [(item, depth + 1, (*path, i)) for i, item in enumerate(value)]
            stack.extend(reversed(items))
        elif isinstance(value, bool) or value is None:
            pass
        elif isinstance(value, int):
            if abs(value) >= _INT_LIMIT:
                refuse(
                    path,
                    f"is an integer of more than {MAX_ARGS_INT_DIGITS:,} digits, "
                    "which the worker's JSON parser cannot load; pass it as a string",
                )
        elif isinstance(value, float):
            if not math.isfinite(value):
                refuse(
                    path,
                    f"={value!r} is not JSON-serializable: JSON has no NaN or "
                    "Infinity (an encoder would silently store null); pass None or a string",
                )
        elif types:
            refuse(
                path,
                f"={shown(value)} is not JSON-serializable (type "
                f"{type(value).__name__}); {root} hold dict, list, str, int, float, bool and "
                "None: pass ids or ISO strings instead of objects",
            )


def check_text(kind: str, text: str, value: Callable[[], Any], where: str = "") -> None:
    """The checks of already-encoded args: ``value()`` gives them back as Python values
    for :func:`explain`, only when :func:`suspect` finds something."""
    if suspect(text):
        explain(kind, value(), where)
    # Characters count as bytes until the text could pass the limit: only then encode it.
    size = len(text) if len(text) * 4 <= MAX_ARGS_BYTES else len(text.encode())
    if size > MAX_ARGS_BYTES:
        raise PayloadTooLarge(
            f"{kind}: {where}args are {size:,} bytes as JSON; the limit is {MAX_ARGS_BYTES:,}. "
            "Store large data in your own table and pass its id"
        )


def args_json(kind: str, args: Any) -> str:
    """``args`` (a dict of JSON values) checked, as compact JSON text."""
    if not isinstance(args, dict):
        raise InvalidJobArgs(f"{kind}: args must be a dict of keyword arguments, got {shown(args)}")
    try:
        # ensure_ascii=False: the size is that of the UTF-8 text, as on the bulk path, and a
        # lone surrogate stays visible to suspect().
        text = json.dumps(args, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        explain(kind, args)
        raise InvalidJobArgs(f"{kind}: args cannot be stored as JSON: {exc}") from None
    check_text(kind, text, lambda: args)
    return text
