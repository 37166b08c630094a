"""Handler: one registered job function, its args model, and the jobs it builds.

``handler.job(**args, **options)`` builds one ``Job`` (an ORM object to ``session.add``);
``handler.jobs([...], **options)`` validates thousands in one pass into a :class:`JobBatch`
for ``acta.enqueue_many``. Both take their options through ``policy.job_options`` and their
args through ``payload``: one validation, the same answer on either path.

No SQLAlchemy at import: the worker imports this module to load args.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, overload

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model

from . import payload
from .errors import ConfigurationError, InvalidJob, InvalidJobArgs
from .policy import JOB_OPTIONS, Policy, check_templates, job_column, job_options, render_key
from .settings import MAX_ARGS_BYTES
from .tracing import current_context

if TYPE_CHECKING:
    from .context import Context
    from .models import Job


class Registrar(Protocol):
    """What a handler needs of the ``Acta`` that registered it (no import of app.py: the
    app depends on its handlers, not the other way round)."""

    namespace: str


P = ParamSpec("P")
R = TypeVar("R", covariant=True)

Rows = dict[str, list[Any]]
"""Jobs as one list per column (the fields of ``queries.session.BULK_FIELDS``, and ``args``
as JSON texts): what the bulk INSERT's two parameters are made from."""

_PER_JOB_KEYS = frozenset({"unique_key", "lane", "concurrency_key"})


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
        # "constants": a NaN or an infinity is written as such (then refused by payload's
        # checks) instead of pydantic's default, a silent null.
        __config__=ConfigDict(
            extra=extra, arbitrary_types_allowed=True, ser_json_inf_nan="constants"
        ),
        **fields,
    )
    return model, tuple(names)


class Handler(Generic[P, R]):
    """A registered job handler. Call ``.job(**args)`` to get a ``Job`` to ``session.add``.

    ``P`` is the function's parameters after its ``Context`` and ``R`` its return type
    (for an ``async def``, the coroutine), as ``@acta.job`` infers them: a type checker
    checks the args of ``.job(...)`` and of a direct call."""

    def __init__(
        self, acta: Registrar, fn: Callable[Concatenate[Context, P], R], kind: str, policy: Policy
    ) -> None:
        self.acta = acta
        self.fn = fn
        self.kind = kind
        self.policy = policy
        self.is_async = inspect.iscoroutinefunction(fn)
        self.args_model, self.arg_names = _args_model(fn, kind)
        check_templates(
            policy, kind, self.arg_names, self.args_model.model_config.get("extra") == "allow"
        )
        self._list_adapter: TypeAdapter[list[BaseModel]] = TypeAdapter(list[self.args_model])  # type: ignore[name-defined]
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", kind)
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<Handler {self.kind!r}>"

    def __call__(self, ctx: Context, /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function directly (as in a unit test), bypassing the queue."""
        return self.fn(ctx, *args, **kwargs)

    def _dump(self, model: BaseModel, raw: Any, where: str) -> dict[str, Any]:
        """A validated model's args as JSON values; a value pydantic validated but cannot
        write is explained from the raw input, as on every path."""
        try:
            return model.model_dump(mode="json", exclude_unset=True)
        except Exception as exc:
            payload.explain(self.kind, raw, where, types=False)
            raise InvalidJobArgs(
                f"{self.kind}: {where}args cannot be stored as JSON: {exc}"
            ) from None

    def _validated(self, args: dict[str, Any]) -> dict[str, Any]:
        try:
            model = self.args_model.model_validate(args)
        except ValidationError as exc:
            raise InvalidJobArgs(_describe(exc, self.kind)) from None
        return self._dump(model, args, "")

    def validate_args(self, args: dict[str, Any]) -> dict[str, Any]:
        """Validate ``args`` against the signature; return their JSON form as stored."""
        dumped = self._validated(args)
        payload.args_json(self.kind, dumped)
        return dumped

    def load_args(self, stored: str) -> dict[str, Any]:
        """Turn stored JSON args (the text) back into the handler's keyword arguments.

        Runs once per attempt in the worker, so it calls the model's validator itself and
        copies the instance's fields (named as the parameters) instead of going through
        ``model_validate_json`` and a ``getattr`` per name: 0.66 against 2.28 us for two
        args (docs/performance.md, fourth pass)."""
        model = self.args_model.__pydantic_validator__.validate_json(stored)
        loaded = dict(model.__dict__)
        extra = model.__pydantic_extra__
        if extra:
            loaded.update(extra)
        return loaded

    # The type of ``job``: with no per-job option, exactly the handler's parameters (``P``:
    # a missing, unknown or mistyped argument is a type error). PEP 612 cannot add keyword
    # parameters to a ParamSpec, so a call that gives an option matches one of the
    # overloads below instead (the options typed, the args checked at run time only).
    @overload
    def job(self, *args: P.args, **kwargs: P.kwargs) -> Job: ...

    @overload
    def job(
        self,
        *,
        delay: float | timedelta | None,
        run_at: datetime | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
        lane: str | None = None,
        concurrency_key: str | None = None,
        **args: Any,
    ) -> Job: ...

    @overload
    def job(
        self,
        *,
        run_at: datetime | None,
        delay: float | timedelta | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
        lane: str | None = None,
        concurrency_key: str | None = None,
        **args: Any,
    ) -> Job: ...

    @overload
    def job(
        self,
        *,
        priority: int | None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
        lane: str | None = None,
        concurrency_key: str | None = None,
        **args: Any,
    ) -> Job: ...

    @overload
    def job(
        self,
        *,
        max_attempts: int | None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        unique_key: str | None = None,
        lane: str | None = None,
        concurrency_key: str | None = None,
        **args: Any,
    ) -> Job: ...

    @overload
    def job(
        self,
        *,
        unique_key: str | None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        lane: str | None = None,
        concurrency_key: str | None = None,
        **args: Any,
    ) -> Job: ...

    @overload
    def job(
        self,
        *,
        lane: str | None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
        concurrency_key: str | None = None,
        **args: Any,
    ) -> Job: ...

    @overload
    def job(
        self,
        *,
        concurrency_key: str | None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
        lane: str | None = None,
        **args: Any,
    ) -> Job: ...

    def job(self, *positional: Any, **kwargs: Any) -> Job:
        """A ``Job`` for these args, validated now; per-job options (``delay``, ``run_at``,
        ``priority``, ``max_attempts``, ``unique_key``, ``lane``, ``concurrency_key``)
        may be given beside the args. Args may be given by position too, in the order of
        the handler's parameters (as its type, ``P``, allows)."""
        from .models import Job

        if positional:
            kwargs = self._by_position(positional, kwargs)
        options = job_options(
            self.kind, {k: kwargs.pop(k) for k in list(kwargs) if k in JOB_OPTIONS}
        )
        args = self._validated(kwargs)  # Job() runs payload's checks on them
        fields: dict[str, Any] = {"namespace": self.acta.namespace}
        fields["priority"] = options.get("priority", self.policy.priority)
        if options.get("max_attempts") is not None:
            fields["max_attempts"] = options["max_attempts"]
        fields.update(self._keys(args, options))
        if "run_at" in options:
            fields["run_at"] = options["run_at"]
        return Job(kind=self.kind, args=args, delay=options.get("delay"), **fields)

    def _by_position(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """``kwargs`` with the positional ``args`` named by the handler's parameters."""
        if len(args) > len(self.arg_names):
            raise InvalidJobArgs(
                f"{self.kind}: {len(args)} positional arguments given, the handler takes "
                f"{len(self.arg_names)} ({', '.join(self.arg_names) or 'none'})"
            )
        named = dict(zip(self.arg_names, args, strict=False))
        twice = sorted(set(named) & set(kwargs))
        if twice:
            raise InvalidJobArgs(f"{self.kind}: argument(s) {twice} given twice")
        return {**named, **kwargs}

    def _keys(
        self, args: dict[str, Any], options: Mapping[str, Any], unique: bool = True
    ) -> dict[str, str]:
        """The key columns of a job of ``args``: each key given in ``options``, else the
        kind's template rendered from the args; the rate key (the kind when no template)
        only if the kind has a rate. A column with neither is left out (NULL).
        ``unique=False``: no unique key (a schedule's fire)."""
        policy = self.policy
        keys: dict[str, str] = {}
        for column, option, template in (
            ("unique_key", "unique_key", policy.unique_key if unique else None),
            ("lane_key", "lane", policy.lane),
            ("concurrency_key", "concurrency_key", policy.concurrency_key),
        ):
            value = options.get(option)
            if value is None:
                value = render_key(template, args, option, self.kind)
            if value is not None:  # an unset column is NULL all the same, unvalidated
                keys[column] = value
        if policy.rate is not None:
            rate_key = render_key(policy.rate_key, args, "rate_key", self.kind)
            # Only a kind with no template is metered per kind: a template that renders
            # empty is refused by the key rule, as handler.jobs() refuses it.
            keys["rate_key"] = self.kind if rate_key is None else rate_key
        return keys

    def fire_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        """What a schedule's fire of ``args`` (validated) takes from this kind, as
        ``self.job(**args)`` would give it: the priority and the lane, concurrency and rate
        keys, checked by the same rules (``InvalidJob`` if a template cannot be rendered
        from the args or renders a bad key). Not the ``unique_key``: a fire's uniqueness is
        its tick (docs/schedules.md)."""
        keys = self._keys(args, {}, unique=False)
        for column, value in keys.items():
            job_column(self.kind, column, value)
        return {"priority": self.policy.priority, **keys}

    def jobs(self, args: Iterable[Mapping[str, Any]], **options: Any) -> JobBatch:
        """Many jobs of this kind, validated in one pass, for ``acta.enqueue_many``: the fast
        way to enqueue thousands (no ORM object per job). ``options`` (``delay``,
        ``run_at``, ``priority``, ``max_attempts``) apply to every job; key
        templates of the kind's policy are rendered per job."""
        per_job = _PER_JOB_KEYS & set(options)
        if per_job:
            raise InvalidJob(
                f"{self.kind}.jobs(): {sorted(per_job)} differ per job; give them as key "
                "templates in @acta.job(...) or enqueue Job objects instead"
            )
        parsed = job_options(self.kind, options)
        items = list(args)
        try:
            models = self._list_adapter.validate_python(items)
        except ValidationError as exc:
            raise InvalidJobArgs(_describe(exc, self.kind, batch=True)) from None
        encoded = []
        for i, model in enumerate(models):
            try:
                text = model.model_dump_json(exclude_unset=True)
            except Exception as exc:
                payload.explain(self.kind, items[i], f"job {i}: ", types=False)
                raise InvalidJobArgs(
                    f"{self.kind}: job {i}: args cannot be stored as JSON: {exc}"
                ) from None
            # A clean job costs three substring scans here (see payload.suspect); one that
            # is suspect, or may pass the size limit, takes the single job's checks.
            if len(text) * 4 > MAX_ARGS_BYTES or payload.suspect(text, encoded_by_pydantic=True):
                where = f"job {i}: "
                payload.check_text(
                    self.kind, text, lambda m=model, r=items[i], w=where: self._dump(m, r, w), where
                )
            encoded.append(text)
        policy = self.policy
        dumped: list[dict[str, Any]] | None = None
        if policy.unique_key or policy.lane or policy.concurrency_key or policy.rate:
            dumped = [json.loads(text) for text in encoded]

        def keys(template: str | None, what: str, column: str) -> list[str | None] | None:
            """Each job's key, rendered and checked by the rule ``handler.job()`` applies
            (through ``Job``'s validators): an empty or unstorable key is refused here too."""
            if template is None or dumped is None:
                return None
            rendered = []
            for i, d in enumerate(dumped):
                key = render_key(template, d, what, self.kind)
                if key is not None:
                    job_column(f"{self.kind}: job {i}", column, key)
                rendered.append(key)
            return rendered

        return JobBatch(
            namespace=self.acta.namespace,
            kind=self.kind,
            args_json=encoded,
            priority=parsed.get("priority", policy.priority),
            run_at=parsed.get("run_at"),
            delay=parsed.get("delay"),
            max_attempts=parsed.get("max_attempts"),
            unique_keys=keys(policy.unique_key, "unique_key", "unique_key"),
            lane_keys=keys(policy.lane, "lane", "lane_key"),
            concurrency_keys=keys(policy.concurrency_key, "concurrency_key", "concurrency_key"),
            rate_keys=(
                keys(policy.rate_key, "rate_key", "rate_key") or [self.kind] * len(encoded)
                if policy.rate
                else None
            ),
        )


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
            # The trace context current when the batch is enqueued: one for every job.
            "trace_context": [current_context(self.kind, self.namespace, batch=n)] * n,
        }
