"""What an application does in its own session: enqueue, enqueue many, cancel, retry.

Each function takes the application's synchronous ``Session`` (``Acta``'s async methods run
them through ``AsyncSession.run_sync``) and runs the named builders of
``queries.session``; they add to the caller's transaction and never commit. SQLAlchemy is
imported lazily: a worker imports ``acta_sqla.app`` without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .errors import InvalidJob, InvalidSignal, JobFinished, JobNotFound, UniqueKeyHeld
from .handler import JobBatch, Rows
from .status import TERMINAL_STATUSES, JobStatus

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from .models import Job


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """What ``enqueue_many`` did with one job: its id, and whether it was inserted or an
    existing job holding its unique key was returned."""

    id: int
    inserted: bool


CancelOutcome = Literal["cancelled", "requested", "finished", "missing"]


def rows(jobs: Sequence[Job] | JobBatch) -> Rows:
    """Jobs as the bulk INSERT's columns (a ``JobBatch`` is already encoded)."""
    if isinstance(jobs, JobBatch):
        return jobs.rows()
    from . import queries

    return queries.bulk_params(jobs)


def enqueue(session: Session, job: Job) -> Job:
    """Add ``job``; when a non-terminal job holds its unique key, return that one instead."""
    if job.unique_key is None:
        session.add(job)
        return job
    from . import queries

    while True:
        values = queries.job_insert_values(job)
        inserted = session.scalars(queries.insert_unique_job(values)).one_or_none()
        if inserted is not None:
            return inserted
        existing = session.scalars(
            queries.select_unique_holder(job.namespace, job.unique_key)
        ).one_or_none()
        if existing is not None:
            return existing
        # The holder reached a terminal state between the two statements: insert again.


def _take(rows: Rows, indexes: Sequence[int]) -> Rows:
    return {name: [column[i] for i in indexes] for name, column in rows.items()}


def insert_bulk(session: Session, rows: Rows) -> list[int | None]:
    """Insert ``rows``; the new id of each, or None where its unique key was held."""
    from . import queries

    inserted = session.execute(queries.insert_jobs_bulk(), queries.insert_bulk_params(rows)).all()
    ids = iter(sorted(job_id for job_id, _ in inserted))
    won = {key for _, key in inserted if key is not None}
    out: list[int | None] = []
    taken: set[tuple[str, str]] = set()
    for namespace, key in zip(rows["namespace"], rows["unique_key"], strict=True):
        if key is None:
            out.append(next(ids))
        elif key in won and (namespace, key) not in taken:
            # Within a batch the first row with a key wins; the ids grow in input order.
            taken.add((namespace, key))
            out.append(next(ids))
        else:
            out.append(None)
    return out


def enqueue_many(session: Session, rows: Rows) -> list[EnqueueResult]:
    """Insert ``rows`` in one statement; per job, its id and whether it was inserted (a
    held unique key gives the holder's id)."""
    from . import queries

    count = len(rows["kind"])
    if count == 0:
        return []
    keyed = [i for i, key in enumerate(rows["unique_key"]) if key is not None]
    if len({rows["namespace"][i] for i in keyed}) > 1:
        raise InvalidJob("enqueue_many takes unique-key jobs of one namespace per call")
    results: list[EnqueueResult | None] = [
        None if job_id is None else EnqueueResult(job_id, True)
        for job_id in insert_bulk(session, rows)
    ]
    while keyed:
        pending: dict[tuple[str, str], list[int]] = {}
        for i in keyed:
            pending.setdefault((rows["namespace"][i], rows["unique_key"][i]), []).append(i)
        unresolved = {
            pair: indexes
            for pair, indexes in pending.items()
            if any(results[i] is None for i in indexes)
        }
        if not unresolved:
            break
        holders = {
            (ns, key): job_id
            for job_id, ns, key in session.execute(
                queries.select_unique_holders(), queries.unique_holders_params(list(unresolved))
            )
        }
        orphans: list[int] = []
        for pair, indexes in unresolved.items():
            holder = holders.get(pair)
            if holder is None:
                orphans.append(indexes[0])
                continue
            for i in indexes:
                if results[i] is None:
                    results[i] = EnqueueResult(holder, False)
        if orphans:
            # Their holders ended between the two statements: insert the first claimant.
            for i, job_id in zip(orphans, insert_bulk(session, _take(rows, orphans)), strict=True):
                if job_id is not None:
                    results[i] = EnqueueResult(job_id, True)
    return [r for r in results if r is not None]


MAX_CANCEL_REASON = 1000
"""Characters of a cancel's reason at most."""
MAX_CANCEL_BY = 200
"""Characters of a cancel's ``by`` (who cancelled) at most."""


def cancel_note(field: str, value: object, maximum: int) -> str | None:
    """A cancel's ``by`` or ``reason`` checked before the database: None or text of at
    most ``maximum`` characters that PostgreSQL can store (no NUL, no lone surrogate);
    ``ValueError`` naming the field otherwise. Surrounding blanks are dropped; blank is
    None."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{field} must be text, got {type(value).__name__}")
    text = value.strip()
    if "\x00" in text:
        raise ValueError(f"{field} holds a NUL character (\\x00), which PostgreSQL cannot store")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{field} holds a lone surrogate, which is not valid text") from None
    if len(text) > maximum:
        raise ValueError(f"{field} is {len(text):,} characters long; at most {maximum:,}")
    return text or None


def cancel(
    session: Session, job_id: int, *, reason: str | None = None, by: str | None = None
) -> CancelOutcome:
    """A ready or waiting job ends ``cancelled`` at once; an executing one is asked to stop.

    The row is locked first and the decision made on what it says then: a completion
    committing meanwhile (a retry, a bounce, a park in a wait) is waited for, and its
    outcome cancelled, never mistaken for a finished job. Who cancelled it (``by``) and
    why (``reason``) are stored with the job, in ``last_error["cancel"]``."""
    from . import queries

    by = cancel_note("by", by, MAX_CANCEL_BY)
    reason = cancel_note("reason", reason, MAX_CANCEL_REASON)
    found = session.execute(queries.lock_job_status(job_id)).first()
    if found is None:
        return "missing"
    status = JobStatus(found[0])
    if status in (JobStatus.READY, JobStatus.WAITING):
        session.execute(queries.cancel_waiting(job_id, by, reason))
        return "cancelled"
    if status is JobStatus.EXECUTING:
        session.execute(queries.request_cancel(job_id, by, reason))
        return "requested"
    return "finished"


def retry(session: Session, job_id: int) -> bool:
    """A finished job goes back to ``ready`` now with a fresh budget; False when it is not
    finished (or missing); ``UniqueKeyHeld`` when another job holds its unique key (nothing
    changed, the transaction stays usable).

    The write runs inside a SAVEPOINT: a racing retry or enqueue of the same key that
    commits first makes it fail on the unique index (the holder was not yet visible when the
    statement began), and only the savepoint is rolled back, so the caller's transaction
    goes on and the refusal names the holder, now committed and visible."""
    from . import queries
    from .errors import DuplicateJob

    while True:
        try:
            with session.begin_nested():
                if session.execute(queries.retry_job(job_id)).first() is not None:
                    return True
        except DuplicateJob:
            pass  # lost a race on the key: the holder committed meanwhile; name it below
        held = session.execute(queries.unique_key_holder(job_id)).first()
        if held is not None:
            raise UniqueKeyHeld(job_id, held[0], held[1], held[2])
        found = session.execute(queries.job_status(job_id)).first()
        if found is None or JobStatus(found[0]) not in TERMINAL_STATUSES:
            return False
        # Still finished and no holder now: the racing holder finished too between the two
        # statements. Try again.


def signal_payload(name: object, payload: object) -> str:
    """The payload as stored (JSON text), after checking the name; ``InvalidSignal`` says
    what is wrong."""
    import json

    from .payload import explain
    from .waits import check_signal_name

    check_signal_name(name, InvalidSignal)
    try:
        # The args' own checks (NUL, lone surrogates, depth, huge integers, NaN, types),
        # iterative: whatever PostgreSQL or the worker could not take is refused here.
        explain(f"signal {name!r}", payload, root="payload")
    except InvalidJob as exc:
        raise InvalidSignal(str(exc)) from None
    return json.dumps(payload, separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def signal(session: Session, job_id: int, name: str, payload: object = None) -> str:
    """Record signal ``name`` with ``payload`` on job ``job_id`` in the caller's transaction
    (see ``Acta.signal``); answers the job's status afterwards."""
    from . import queries

    text = signal_payload(name, payload)
    row = session.execute(queries.signal_job(job_id, name, text)).first()
    if row is not None:
        return str(row[0])
    found = session.execute(queries.job_status(job_id)).first()
    if found is None:
        raise JobNotFound(job_id)
    raise JobFinished(job_id, str(found[0]))


def _check_kind(kind: object) -> None:
    """A kind to look up: by the rule of every name (``policy.check_key``), before the
    database (a NUL was a DataError, a lone surrogate an encoding error)."""
    from .errors import ConfigurationError
    from .policy import Refused, check_key, shown

    try:
        check_key(kind)
    except Refused as why:
        raise ConfigurationError(f"kind={shown(kind)} {why}") from None


def resume_kind(session: Session, namespace: str, kind: str) -> dict[str, Any]:
    """Resume ``kind``: drop an operator's ``paused``, or, when the code declares the kind
    paused, override it with ``paused=False`` (a later declaration is then the operator's
    to lift again with ``reset``). Answers the overrides now stored."""
    from . import queries

    _check_kind(kind)
    row = session.execute(queries.definition_for_update(namespace, kind)).first()
    if row is not None and row[0].get("paused") is True:
        return set_policy(session, namespace, kind, {"paused": False})
    return set_policy(session, namespace, kind, {}, ["paused"])


def set_policy(
    session: Session, namespace: str, kind: str, fields: dict[str, Any], reset: Sequence[str] = ()
) -> dict[str, Any]:
    """Override ``fields`` of a kind's policy (and drop the overrides named in ``reset``;
    ``reset=["*"]``: all of them) in the caller's transaction, moving the namespace's
    definitions version with it. Every value is checked first by the policy's rule, and the
    resulting policy as a whole (``backoff_base <= backoff_max``): ``ConfigurationError``
    naming the field and the value, nothing changed. Answers the overrides now stored."""
    import json

    from . import queries
    from .errors import ConfigurationError
    from .policy import OVERRIDABLE, Policy, Refused, override_value, shown

    _check_kind(kind)
    values: dict[str, Any] = {}
    for name, value in fields.items():
        try:
            values[name] = override_value(name, value)
        except Refused as why:
            raise ConfigurationError(f"{kind}: {name}={shown(value)} {why}") from None
    for name in reset:
        if name != "*" and name not in OVERRIDABLE:
            raise ConfigurationError(
                f"{kind}: {name!r} is not a field an operator can set; one of: "
                f"{', '.join(OVERRIDABLE)}"
            )
    row = session.execute(queries.definition_for_update(namespace, kind)).first()
    if row is None:
        known = [k for (k,) in session.execute(queries.stored_kinds(namespace))]
        raise ConfigurationError(
            f"no kind {kind!r} in namespace {namespace!r} (kinds are stored when a worker "
            f"that has their handler starts; stored: {', '.join(known) or 'none'})"
        )
    declared, current = row
    overrides = {} if "*" in reset else {k: v for k, v in current.items() if k not in reset}
    overrides.update(values)
    known_fields = set(Policy.field_names())
    try:
        Policy(**{k: v for k, v in {**declared, **overrides}.items() if k in known_fields})
    except ConfigurationError as exc:
        raise ConfigurationError(f"{kind}: {exc}") from None
    session.execute(queries.write_overrides(namespace, kind, json.loads(json.dumps(overrides))))
    session.execute(queries.bump_definitions_version(namespace))
    return overrides
