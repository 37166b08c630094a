"""Checks on what a job carries: JSON only, no NUL, bounded size."""

from __future__ import annotations

import json
from typing import Any

from .errors import InvalidJobArgs, PayloadTooLarge


def check_json(field: str, value: Any, limit: int) -> Any:
    try:
        encoded = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidJobArgs(
            f"{field} must be JSON-serializable (dict, list, str, int, float, bool, None): {exc}; "
            "pass ids or ISO strings instead of objects"
        ) from None
    if "\\u0000" in encoded:
        raise InvalidJobArgs(
            f"{field} contains a NUL character (\\u0000), which PostgreSQL's JSONB cannot store"
        )
    if len(encoded) > limit:
        raise PayloadTooLarge(
            f"{field} is {len(encoded):,} bytes as JSON; the limit is {limit:,}. Store large data "
            "in your own table and pass its id"
        )
    return value
