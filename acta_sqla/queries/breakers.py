"""Circuit breakers' statements on the application's session (SQLAlchemy Core, so they
honour ``schema_translate_map``): what ``acta definitions ls``, ``acta status``, the
dashboard and ``acta doctor`` show, and an operator's close by hand. The worker's own
statements (``admit``, ``breaker_record``) are in ``queries.admission``."""

from __future__ import annotations

from sqlalchemy import Select, Update, and_, case, func, literal, select, update

from ..models import BreakerState as B


def list_breakers(namespace: str) -> Select[tuple[object, ...]]:
    """A namespace's breakers: kind, key, state as it is now (an open breaker past its
    ``open_until`` is half-open: its next job is a probe), when it changes next (an open
    one's ``open_until``; None: on an outcome), live-or-not probes held, since when."""
    past = and_(B.state == "open", B.open_until <= func.now())
    return (
        select(
            B.kind,
            B.key,
            case((past, literal("half_open")), else_=B.state),
            case((and_(B.state == "open", B.open_until > func.now()), B.open_until)),
            func.cardinality(B.probe_jobs),
            B.changed_at,
        )
        .where(B.namespace == namespace)
        .order_by(B.kind, B.key)
    )


def lock_breaker(namespace: str, kind: str, key: str) -> Select[tuple[object]]:
    """The breaker's advisory lock until commit (the one ``admit`` and ``breaker_record``
    take), so a close by hand does not interleave with a worker's decision."""
    name = func.concat_ws(func.chr(31), "acta.breaker", namespace, kind, key)
    return select(func.pg_advisory_xact_lock(func.hashtextextended(name, 0)))


def close_breaker(namespace: str, kind: str, key: str) -> Update:
    """Close a breaker by hand: counts and probes reset; answers the state it had."""
    old = (
        select(B.state)
        .where(B.namespace == namespace, B.kind == kind, B.key == key)
        .scalar_subquery()
    )
    return (
        update(B)
        .where(B.namespace == namespace, B.kind == kind, B.key == key)
        .values(
            state="closed",
            open_until=None,
            changed_at=func.now(),
            window_start=func.now(),
            calls=0,
            failures=0,
            prev_calls=0,
            prev_failures=0,
            probe_jobs=[],
            probe_executions=[],
        )
        .returning(old)
    )
