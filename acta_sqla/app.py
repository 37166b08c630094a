"""Acta: the handler registry, ``@acta.job``, and the enqueue helpers."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, TypeVar

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model

from .errors import ConfigurationError, InvalidJob, InvalidJobArgs, UnknownJobKind
from .payload import check_json
from .policy import Policy, render_key, template_fields
from .settings import MAX_ARGS_BYTES, NAMESPACE_PATTERN

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

    from .models import Job

P = ParamSpec("P")
R = TypeVar("R")

JOB_OPTIONS = frozenset(
    {
        "run_at",
        "delay",
        "priority",
        "max_attempts",
        "unique_key",
        "lane",
        "concurrency_key",
        "parent",
    }
)
"""Keyword names that ``handler.job()`` takes as per-job options rather than args; a handler
parameter may therefore not use one of these names."""


def _describe(exc: ValidationError, kind: str, batch: bool = False) -> str:
    parts = []
    for err in exc.errors():
        loc = list(err["loc"])
        where = f"job {loc.pop(0)}: " if batch and loc else ""
        field = ".".join(str(p) for p in loc) or "args"
        if err["type"] == "missing":
            parts.append(f"{where}missing required argument {field!r}")
        elif err["type"] == "extra_forbidden":
            parts.append(f"{where}unexpected argument {field!r}")
        else:
            parts.append(f"{where}argument {field!r}={err.get('input')!r}: {err['msg']}")
    return f"{kind}: " + "; ".join(parts)


def _args_model(fn: Callable[..., Any], kind: str) -> tuple[type[BaseModel], tuple[str, ...]]:
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise ConfigurationError(
            f"handler {kind!r} must take the job's Context as its first positional parameter, "
            f"e.g. `async def {fn.__name__}(ctx: Context, ...)`"
        )
    fields: dict[str, Any] = {}
    extra = "forbid"
    names = []
    hints = inspect.get_annotations(fn, eval_str=True)
    for p in params[1:]:
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            extra = "allow"
            continue
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY):
            raise ConfigurationError(
                f"handler {kind!r}: parameter {p.name!r} must be passable by keyword "
                "(job args are a dict of keyword arguments)"
            )
        if p.name in JOB_OPTIONS:
            raise ConfigurationError(
                f"handler {kind!r}: parameter {p.name!r} has the name of a job option "
                f"({', '.join(sorted(JOB_OPTIONS))}); rename it"
            )
        annotation = hints.get(p.name, Any)
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[p.name] = (annotation, default)
        names.append(p.name)
    model = create_model(  # type: ignore[call-overload]
        f"{kind}_args",
        __config__=ConfigDict(extra=extra, arbitrary_types_allowed=True),
        **fields,
    )
    return model, tuple(names)


def _check_templates(handler: Handler[Any, Any]) -> None:
    """A key template may only name the handler's own parameters: a typo fails at import,
    not at the first enqueue."""
    if handler.args_model.model_config.get("extra") == "allow":
        return  # **kwargs: any name may arrive
    policy = handler.policy
    for option in ("unique_key", "lane", "concurrency_key", "rate_key"):
        template = getattr(policy, option)
        if template is None:
            continue
        unknown = [f for f in template_fields(template) if f not in handler.arg_names]
        if unknown:
            raise ConfigurationError(
                f"handler {handler.kind!r}: {option}={template!r} names {unknown}, which "
                f"is not among its parameters ({', '.join(handler.arg_names) or 'none'})"
            )


class Handler(Generic[P, R]):
    """A registered job handler. Call ``.job(**args)`` to get a ``Job`` to ``session.add``."""

    def __init__(self, acta: Acta, fn: Callable[..., Any], kind: str, policy: Policy) -> None:
        self.acta = acta
        self.fn = fn
        self.kind = kind
        self.policy = policy
        self.is_async = inspect.iscoroutinefunction(fn)
        self.args_model, self.arg_names = _args_model(fn, kind)
        self._list_adapter: TypeAdapter[list[BaseModel]] = TypeAdapter(list[self.args_model])  # type: ignore[name-defined]
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", kind)
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<Handler {self.kind!r}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly (as in a unit test), bypassing the queue."""
        return self.fn(*args, **kwargs)

    def validate_args(self, args: dict[str, Any]) -> dict[str, Any]:
        """Validate ``args`` against the signature; return their JSON form as stored."""
        try:
            model = self.args_model.model_validate(args)
        except ValidationError as exc:
            raise InvalidJobArgs(_describe(exc, self.kind)) from None
        try:
            return model.model_dump(mode="json", exclude_unset=True)
        except Exception as exc:  # a value pydantic validated but cannot write as JSON
            raise InvalidJobArgs(f"{self.kind}: args cannot be stored as JSON: {exc}") from None

    def load_args(self, stored: str) -> dict[str, Any]:
        """Turn stored JSON args (the text) back into the handler's keyword arguments."""
        model = self.args_model.model_validate_json(stored)
        loaded = {name: getattr(model, name) for name in self.arg_names}
        if model.model_extra:
            loaded.update(model.model_extra)
        return loaded

    def jobs(self, args: Iterable[Mapping[str, Any]], **options: Any) -> JobBatch:
        """Many jobs of this kind, validated in one pass, for ``acta.enqueue_many``: the fast
        way to enqueue thousands (no ORM object per job). ``options`` (``delay``,
        ``run_at``, ``priority``, ``max_attempts``, ``parent``) apply to every job; key
        templates of the kind's policy are rendered per job."""
        unknown = set(options) - JOB_OPTIONS
        if unknown:
            raise InvalidJob(f"{self.kind}: unknown job option(s) {sorted(unknown)}")
        per_job = {"unique_key", "lane", "concurrency_key"} & set(options)
        if per_job:
            raise InvalidJob(
                f"{self.kind}.jobs(): {sorted(per_job)} differ per job; give them as key "
                "templates in @acta.job(...) or enqueue Job objects instead"
            )
        items = list(args)
        try:
            models = self._list_adapter.validate_python(items)
        except ValidationError as exc:
            raise InvalidJobArgs(_describe(exc, self.kind, batch=True)) from None
        encoded = [m.model_dump_json(exclude_unset=True) for m in models]
        for i, text in enumerate(encoded):
            if len(text) > MAX_ARGS_BYTES or "\\u0000" in text:
                check_json(f"args of job {i}", json.loads(text), MAX_ARGS_BYTES)
        policy = self.policy
        dumped: list[dict[str, Any]] | None = None
        if policy.unique_key or policy.lane or policy.concurrency_key or policy.rate:
            dumped = [json.loads(text) for text in encoded]

        def keys(template: str | None, what: str) -> list[str | None] | None:
            if template is None or dumped is None:
                return None
            return [render_key(template, d, what, self.kind) for d in dumped]

        delay = options.get("delay")
        if isinstance(delay, timedelta):
            delay = delay.total_seconds()
        if delay is not None and delay < 0:
            raise InvalidJob(f"delay must be >= 0 seconds, got {delay!r}")
        run_at = options.get("run_at")
        if run_at is not None and (not isinstance(run_at, datetime) or run_at.tzinfo is None):
            raise InvalidJob(f"run_at must be a timezone-aware datetime, got {run_at!r}")
        parent = options.get("parent")
        return JobBatch(
            namespace=self.acta.namespace,
            kind=self.kind,
            args_json=encoded,
            priority=options.get("priority", policy.priority),
            run_at=run_at,
            delay=delay,
            max_attempts=options.get("max_attempts"),
            parent_id=parent if parent is None or isinstance(parent, int) else parent.id,
            unique_keys=keys(policy.unique_key, "unique_key"),
            lane_keys=keys(policy.lane, "lane"),
            concurrency_keys=keys(policy.concurrency_key, "concurrency_key"),
            rate_keys=(
                keys(policy.rate_key, "rate_key") or [self.kind] * len(encoded)
                if policy.rate
                else None
            ),
        )

    def job(self, **kwargs: Any) -> Job:
        """A ``Job`` for these args, validated now; per-job options (``delay``, ``run_at``,
        ``priority``, ``max_attempts``, ``unique_key``, ``lane``, ``concurrency_key``,
        ``parent``) may be given beside the args."""
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in JOB_OPTIONS}
        args = self.validate_args(kwargs)
        return self.acta._build_job(self.kind, args, self.policy, options)


@dataclass(frozen=True, slots=True)
class JobBatch:
    """Many jobs of one kind, validated and encoded, ready for ``acta.enqueue_many``."""

    namespace: str
    kind: str
    args_json: list[str]
    priority: int = 0
    run_at: datetime | None = None
    delay: float | None = None
    max_attempts: int | None = None
    parent_id: int | None = None
    unique_keys: list[str | None] | None = None
    lane_keys: list[str | None] | None = None
    concurrency_keys: list[str | None] | None = None
    rate_keys: list[str | None] | None = None

    def __len__(self) -> int:
        return len(self.args_json)

    def rows(self) -> Rows:
        n = len(self.args_json)
        none: list[Any] = [None] * n
        return {
            "namespace": [self.namespace] * n,
            "kind": [self.kind] * n,
            "args": self.args_json,
            "priority": [self.priority] * n,
            "run_at": [self.run_at.isoformat() if self.run_at else None] * n,
            "delay": [self.delay] * n,
            "max_attempts": [self.max_attempts] * n,
            "concurrency_key": self.concurrency_keys or none,
            "rate_key": self.rate_keys or none,
            "lane_key": self.lane_keys or none,
            "unique_key": self.unique_keys or none,
            "parent_id": [self.parent_id] * n,
            "ord": list(range(1, n + 1)),
        }


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """What ``enqueue_many`` did with one job: its id, and whether it was inserted or an
    existing job holding its unique key was returned."""

    id: int
    inserted: bool


class Acta:
    """The registry of handlers for one namespace, and the enqueue helpers.

    ``allow_unknown_kinds=True`` lets ``enqueue`` take kinds this process has no handler
    for (jobs for workers of another service that shares the namespace).
    """

    def __init__(self, namespace: str = "default", *, allow_unknown_kinds: bool = False) -> None:
        if not NAMESPACE_PATTERN.match(namespace):
            raise ConfigurationError(
                f"namespace {namespace!r}: must be 1-63 letters, digits, '_', '.' or '-'"
            )
        self.namespace = namespace
        self.allow_unknown_kinds = allow_unknown_kinds
        self.handlers: dict[str, Handler[Any, Any]] = {}

    def __repr__(self) -> str:
        return f"<Acta namespace={self.namespace!r} kinds={sorted(self.handlers)}>"

    def job(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        kind: str | None = None,
        **policy: Any,
    ) -> Any:
        """Register a handler: ``@acta.job`` or ``@acta.job(max_attempts=5, timeout=60)``.

        Policy options: max_attempts, timeout (seconds), priority, backoff_base,
        backoff_max, concurrency_key, concurrency_limit, rate, rate_key, lane, unique_key,
        retention (seconds)."""
        unknown = set(policy) - set(Policy.field_names())
        if unknown:
            raise ConfigurationError(
                f"@acta.job got unknown option(s) {sorted(unknown)}; known: "
                f"{', '.join(Policy.field_names())}"
            )
        resolved = Policy(**policy)

        def register(func: Callable[..., Any]) -> Handler[Any, Any]:
            name = kind or func.__name__
            if name in self.handlers:
                raise ConfigurationError(
                    f"kind {name!r} is registered twice in namespace {self.namespace!r}; "
                    "pass kind= to tell them apart"
                )
            handler: Handler[Any, Any] = Handler(self, func, name, resolved)
            _check_templates(handler)
            self.handlers[name] = handler
            return handler

        return register(fn) if fn is not None else register

    # ------------------------------------------------------------------ building jobs

    def _build_job(
        self, kind: str, args: dict[str, Any], policy: Policy, options: dict[str, Any]
    ) -> Job:
        from .models import Job

        unknown = set(options) - JOB_OPTIONS
        if unknown:
            raise InvalidJob(f"{kind}: unknown job option(s) {sorted(unknown)}")
        fields: dict[str, Any] = {"namespace": self.namespace}
        fields["priority"] = options.get("priority", policy.priority)
        if options.get("max_attempts") is not None:
            fields["max_attempts"] = options["max_attempts"]
        for column, option, template, what in (
            ("unique_key", "unique_key", policy.unique_key, "unique_key"),
            ("lane_key", "lane", policy.lane, "lane"),
            ("concurrency_key", "concurrency_key", policy.concurrency_key, "concurrency_key"),
        ):
            value = options.get(option)
            fields[column] = value if value is not None else render_key(template, args, what, kind)
        if policy.rate is not None:
            fields["rate_key"] = render_key(policy.rate_key, args, "rate_key", kind) or kind
        parent = options.get("parent")
        if parent is not None:
            fields["parent_id"] = parent if isinstance(parent, int) else parent.id
        run_at: datetime | None = options.get("run_at")
        delay: float | timedelta | None = options.get("delay")
        if run_at is not None:
            fields["run_at"] = run_at
        return Job(kind=kind, args=args, delay=delay, **fields)

    def _check_kind(self, job: Job) -> None:
        if job.namespace is None:
            job.namespace = self.namespace
        handler = self.handlers.get(job.kind)
        if handler is None:
            if self.allow_unknown_kinds:
                return
            known = ", ".join(sorted(self.handlers)) or "none registered"
            raise UnknownJobKind(
                f"no handler for kind {job.kind!r} in namespace {self.namespace!r} (known: "
                f"{known}); register it with @acta.job, or create Acta(allow_unknown_kinds=True) "
                "if another service's workers run it"
            )

    # ------------------------------------------------------------------ enqueue

    async def enqueue(self, session: AsyncSession, job: Job) -> Job:
        """Add ``job`` to the session's transaction. When its ``unique_key`` is held by a
        non-terminal job, return that job instead of inserting (no error)."""
        self._check_kind(job)
        return await session.run_sync(lambda s: _enqueue(s, job))

    def enqueue_sync(self, session: Session, job: Job) -> Job:
        """``enqueue`` for a synchronous ``Session``."""
        self._check_kind(job)
        return _enqueue(session, job)

    async def enqueue_many(
        self, session: AsyncSession, jobs: Sequence[Job] | JobBatch
    ) -> list[EnqueueResult]:
        """Insert ``jobs`` in one statement; results in input order. A job whose unique key
        is held (or repeated earlier in the batch) gets the holder's id, ``inserted=False``.

        ``jobs`` is a list of ``Job`` (any kinds), or -- fastest, for thousands -- the
        ``JobBatch`` of ``handler.jobs([...])``."""
        rows = self._rows(jobs)
        return await session.run_sync(lambda s: _enqueue_many(s, rows))

    async def cancel(self, session: AsyncSession, job_id: int) -> CancelOutcome:
        """Cancel a job in the session's transaction: a ready or waiting job ends
        ``cancelled`` at once ("cancelled"); an executing one is asked to stop, and its
        worker's next heartbeat cancels the handler ("requested"). "finished" means it had
        already ended, "missing" that no such job exists."""
        return await session.run_sync(lambda s: _cancel(s, job_id))

    def cancel_sync(self, session: Session, job_id: int) -> CancelOutcome:
        return _cancel(session, job_id)

    async def retry(self, session: AsyncSession, job_id: int) -> bool:
        """Send a finished job (succeeded, failed or cancelled) back to ``ready`` now with a
        fresh failure budget; False when the job is not finished (or does not exist)."""
        return await session.run_sync(lambda s: _retry(s, job_id))

    def enqueue_many_sync(
        self, session: Session, jobs: Sequence[Job] | JobBatch
    ) -> list[EnqueueResult]:
        """``enqueue_many`` for a synchronous ``Session``."""
        return _enqueue_many(session, self._rows(jobs))

    def _rows(self, jobs: Sequence[Job] | JobBatch) -> Rows:
        if isinstance(jobs, JobBatch):
            if jobs.namespace != self.namespace and not self.allow_unknown_kinds:
                raise InvalidJob(
                    f"this JobBatch is for namespace {jobs.namespace!r}, this Acta for "
                    f"{self.namespace!r}"
                )
            return jobs.rows()
        from . import queries

        for job in jobs:
            self._check_kind(job)
        return queries.bulk_params(jobs)


CancelOutcome = Literal["cancelled", "requested", "finished", "missing"]


def _cancel(session: Session, job_id: int) -> CancelOutcome:
    from . import queries

    if session.execute(queries.cancel_waiting(job_id)).first() is not None:
        return "cancelled"
    if session.execute(queries.request_cancel(job_id)).first() is not None:
        return "requested"
    return "finished" if session.execute(queries.job_status(job_id)).first() else "missing"


def _retry(session: Session, job_id: int) -> bool:
    from . import queries

    return session.execute(queries.retry_job(job_id)).first() is not None


def _enqueue(session: Session, job: Job) -> Job:
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


Rows = dict[str, list[Any]]
"""Jobs as parallel column arrays, the form the bulk INSERT takes."""


def _take(rows: Rows, indexes: Sequence[int]) -> Rows:
    taken = {name: [column[i] for i in indexes] for name, column in rows.items() if name != "ord"}
    taken["ord"] = list(range(1, len(indexes) + 1))
    return taken


def _insert_bulk(session: Session, rows: Rows) -> list[int | None]:
    """Insert ``rows``; the new id of each, or None where its unique key was held."""
    from . import queries

    inserted = session.execute(queries.insert_jobs_bulk(), rows).all()
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


def _enqueue_many(session: Session, rows: Rows) -> list[EnqueueResult]:
    from . import queries

    count = len(rows["kind"])
    if count == 0:
        return []
    keyed = [i for i, key in enumerate(rows["unique_key"]) if key is not None]
    if len({rows["namespace"][i] for i in keyed}) > 1:
        raise InvalidJob("enqueue_many takes unique-key jobs of one namespace per call")
    results: list[EnqueueResult | None] = [
        None if job_id is None else EnqueueResult(job_id, True)
        for job_id in _insert_bulk(session, rows)
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
            for i, job_id in zip(orphans, _insert_bulk(session, _take(rows, orphans)), strict=True):
                if job_id is not None:
                    results[i] = EnqueueResult(job_id, True)
    return [r for r in results if r is not None]
