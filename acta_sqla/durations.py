"""The one bound of every delay-like value: how far ahead (or back) acta lets a time go.

Every value that becomes a timestamp, or is added to or subtracted from one, is a number of
seconds in ``0..MAX_SECONDS`` (finite, never NaN): a job's ``delay=`` and ``run_at=``
(within ``MAX_SECONDS`` of now), ``Retry(after=...)``, a kind's ``timeout``,
``backoff_base``, ``backoff_max`` and ``retention``, ``WaitForSignal(timeout=...)`` and
``ctx.lock(wait=...)``, on every path that takes one (``Job(...)``, ``handler.job/jobs``,
``enqueue_many``, ``@acta.job``, ``acta definitions set``, the dashboard). The bound keeps
every timestamp acta computes (now + 1.25 x the bound, the most a back-off's jitter adds)
inside what both Python's ``datetime`` (years 1..9999) and PostgreSQL represent, for the
next several thousand years; a value past it is refused where it is given, with an error
naming the field, instead of a due time that crashes every reader (``OverflowError``) or
fails the job for good. docs/jobs.md states the bound; docs/reliability.md tells the story.

No import of SQLAlchemy or of the rest of acta: ``errors`` (``Retry``) imports it.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

MAX_SECONDS = 1e10
"""About 317 years: the longest delay, timeout, back-off or retention, in seconds."""

SPAN_TEXT = "1e10 seconds (about 317 years)"
MAX_TEXT = f"at most {SPAN_TEXT}"
"""How error messages say the bound."""

SPAN = timedelta(seconds=MAX_SECONDS)


def seconds(value: Any, *, positive: bool = False, timedelta_ok: bool = True) -> float | None:
    """``value`` as seconds when it is an acceptable delay-like value (a number, or a
    ``timedelta`` when ``timedelta_ok``; finite; >= 0, or > 0 when ``positive``; at most
    :data:`MAX_SECONDS`), else None: the caller names the field in its own error."""
    if timedelta_ok and isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        return None
    if not math.isfinite(number) or number > MAX_SECONDS:
        return None
    if number < 0 or (positive and number == 0):
        return None
    return number


def rule(*, positive: bool = False, timedelta_ok: bool = True) -> str:
    """What :func:`seconds` accepts, for an error message."""
    kinds = "a number of seconds or a timedelta" if timedelta_ok else "a number"
    return f"must be {kinds}, finite, {'> 0' if positive else '>= 0'} and {MAX_TEXT}"


def due_in_range(at: datetime) -> bool:
    """Whether an aware datetime given as a due time is within :data:`MAX_SECONDS` of now
    (either way: a time already past is due at once, but one centuries back is a mistake
    that would leave the represented range when read in another time zone)."""
    now = datetime.now(UTC)
    try:
        return now - SPAN <= at <= now + SPAN
    except OverflowError:  # pragma: no cover - near datetime.min/max
        return False
