"""Circuit breakers seen from the application's session: each breaker's state for the
CLI, the dashboard and the doctor, and an operator's close by hand (docs/breakers.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from loguru import logger
from sqlalchemy.orm import Session

from .queries import breakers as q

log = logger.bind(stage="breaker")


@dataclass(frozen=True, slots=True)
class BreakerRow:
    kind: str
    key: str
    """``''``: the kind's one breaker."""
    state: str
    """``closed``, ``open`` or ``half_open`` (an open breaker past its time is half-open:
    its next job is a probe)."""
    next_change: datetime | None
    """An open breaker's half-open time; None: it changes on an outcome."""
    probes: int
    changed_at: datetime

    @property
    def label(self) -> str:
        return self.kind if not self.key else f"{self.kind} [{self.key}]"

    def shown(self, now: datetime | None = None) -> str:
        """One phrase: ``open until 12:00:03 (in 12s)``, ``half-open (probing)``, ``closed``."""
        if self.state == "open" and self.next_change is not None:
            text = f"open until {self.next_change:%H:%M:%S}"
            if now is not None:
                text += f" (in {max(0.0, (self.next_change - now).total_seconds()):.0f}s)"
            return text
        if self.state == "half_open":
            return "half-open (next outcome of a probe closes or reopens it)"
        return "closed"


def breakers(session: Session, namespace: str) -> list[BreakerRow]:
    """Every breaker of ``namespace`` that has counted or refused anything (a kind with a
    breaker and no row yet is closed)."""
    return [BreakerRow(*row) for row in session.execute(q.list_breakers(namespace)).all()]


def close(session: Session, namespace: str, kind: str, key: str = "", by: str = "") -> str | None:
    """Close the breaker of ``kind`` (``key``: a breaker per key) by hand, in the session's
    transaction: counts and probes reset, jobs start again at once. Answers the state it
    had (None: no such breaker). One audited log line names who (``by``)."""
    session.execute(q.lock_breaker(namespace, kind, key))
    before = session.execute(q.close_breaker(namespace, kind, key)).scalar_one_or_none()
    if before is not None:
        log.bind(event="breaker", kind=kind, key=key, state="closed", by=by).warning(
            "breaker {} closed by hand{} (it was {})",
            kind if not key else f"{kind} [{key}]",
            f" by {by}" if by else "",
            before,
        )
    return before


def close_kind(session: Session, namespace: str, kind: str, by: str = "") -> int:
    """Close every breaker of ``kind`` that is not closed (one per kind, or one per key):
    the dashboard's button. How many it closed."""
    closed = 0
    for row in breakers(session, namespace):
        if row.kind == kind and row.state != "closed":
            closed += close(session, namespace, kind, row.key, by) is not None
    return closed
