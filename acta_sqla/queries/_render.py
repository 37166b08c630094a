"""Small helpers shared by the statement builders: quoting and the status sets, rendered
from ``status.py`` so that no statement spells a status list of its own."""

from __future__ import annotations

from ..status import ACTIVE_STATUSES, TERMINAL_STATUSES


def quote(schema: str) -> str:
    """The schema as a quoted identifier (``ACTA_SCHEMA`` is checked to be a plain name)."""
    return f'"{schema}"'


def sql_list(values: tuple[str, ...]) -> str:
    """``('a', 'b')``: a tuple of plain words as an SQL list of literals."""
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


TERMINAL = sql_list(tuple(TERMINAL_STATUSES))
"""``('succeeded', 'failed', 'cancelled')``"""
ACTIVE = sql_list(tuple(ACTIVE_STATUSES))
"""``('ready', 'executing', 'waiting')``"""
