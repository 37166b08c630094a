"""A kind's policy, and the ONE validation of every option a kind or a job takes.

A policy says what a definition holds about attempts, timeout, backoff, priority and keys.
It is declared in code with ``@acta.job(...)``, stored in the ``definition`` table when a
worker starts, and adjustable by operators; the effective policy is the declared one with
the operator's overrides on top (:meth:`Policy.merged`).

Every path that takes an option goes through the two tables below, so the same value gets
the same answer wherever it is given:

* ``POLICY_CHECKS``: ``@acta.job(...)`` / ``Policy(...)`` and operators' overrides;
* ``JOB_OPTION_CHECKS``: ``Job(...)``, ``handler.job(..., **options)`` and
  ``handler.jobs([...], **options)``.

A check returns the parsed value (a :class:`Rate` from ``"100/min"``, seconds as a float)
or raises :class:`Refused` saying what the value must be; the caller names the field and
the value and picks the error: ``ConfigurationError`` at declaration, ``InvalidJob`` at
enqueue. The checks of the args themselves (JSON that PostgreSQL stores and the worker
loads) are in ``payload``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from . import durations
from .errors import ConfigurationError, InvalidJob, InvalidJobArgs
from .settings import (
    DEFAULT_BACKOFF_BASE_SECONDS,
    DEFAULT_BACKOFF_MAX_SECONDS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RETENTION_SECONDS,
    DEFAULT_TIMEOUT_SECONDS,
)

PRIORITY_MIN, PRIORITY_MAX = -32768, 32767
"""The job.priority column is a smallint: a value outside it is a raw DBAPIError at commit."""
INT4_MAX = 2**31 - 1
"""max_attempts and concurrency limits are int columns or are cast to int in SQL."""
BIGINT_MAX = 2**63 - 1


class Refused(ValueError):
    """Why a value is refused, without the field's name (the caller adds it and the value)."""


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for an error message: cut to ``limit`` characters, and safe for an
    int too long to print (``repr(10**5000)`` itself raises ValueError)."""
    try:
        text = repr(value)
    except ValueError:
        return f"<int of {value.bit_length():,} bits>" if isinstance(value, int) else "<?>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- checks


def _is_int(value: Any) -> bool:
    # bool is an int to Python, but True as a budget or a priority is a mistake, not a 1.
    return isinstance(value, int) and not isinstance(value, bool)


def _int_in(low: int, high: int, meaning: str) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if not _is_int(value) or not low <= value <= high:
            span = f">= {low}" if high in (INT4_MAX, BIGINT_MAX) else f"in {low}..{high}"
            raise Refused(f"must be an int {span} ({meaning})")
        return int(value)

    return check


def _seconds(*, positive: bool, meaning: str, timedelta_ok: bool = False) -> Callable[[Any], float]:
    """Seconds of a delay-like value: finite, >= 0 (or > 0) and within the one bound of
    ``durations.MAX_SECONDS`` (a due time past it would leave Python's datetime range)."""
    bound = durations.rule(positive=positive, timedelta_ok=timedelta_ok)

    def check(value: Any) -> float:
        seconds = durations.seconds(value, positive=positive, timedelta_ok=timedelta_ok)
        if seconds is None:
            raise Refused(f"{bound} ({meaning})")
        return seconds

    return check


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def optional(value: Any) -> Any:
        return None if value is None else check(value)

    return optional


def template_fields(template: str) -> list[str]:
    """The argument names a key template reads: ``"c:{customer[id]}:{region}"`` ->
    ``["customer", "region"]``."""
    return [
        re.split(r"[.\[]", name, maxsplit=1)[0]
        for _, name, _, _ in string.Formatter().parse(template)
        if name is not None
    ]


def check_template(value: Any) -> str:
    """A key template such as ``"customer:{customer_id}"``: fields name args by keyword;
    ``{customer[id]}`` reads a key of a dict argument."""
    if not isinstance(value, str) or not value:
        raise Refused("must be a non-empty template string such as 'customer:{customer_id}'")
    try:
        parsed = list(string.Formatter().parse(value))
    except ValueError as exc:
        raise Refused(
            f"is not a valid template ({exc}); write a literal brace as '{{{{' or '}}}}'"
        ) from None
    for _, name, spec, _ in parsed:
        if name is None:
            continue
        root = re.split(r"[.\[]", name, maxsplit=1)[0]
        if not root or root.isdigit():
            raise Refused("reads args by position; name the argument, e.g. '{customer_id}'")
        if "." in name:
            # Args arrive as JSON: a dict has keys, not attributes; format() would raise
            # AttributeError at every enqueue.
            raise Refused(
                f"reads an attribute ({{{name}}}); args are JSON, so read a key instead, "
                f"e.g. '{{{root}[id]}}'"
            )
        if spec and "{" in spec:
            raise Refused("has a nested field in a format spec; keys are rendered from args only")
    _check_text(value)
    literal = sum(len(text.encode("utf-8")) for text, _, _, _ in parsed)
    if literal > MAX_KEY_BYTES:
        # Every key it renders would be longer still: refused at every enqueue.
        raise Refused(
            f"has {literal:,} UTF-8 bytes of literal text, so every key it renders is "
            f"longer than the {MAX_KEY_BYTES:,}-byte limit of a key"
        )
    return value


def _check_text(value: str) -> None:
    if "\x00" in value:
        raise Refused("contains a NUL character, which a PostgreSQL text column cannot store")
    if _SURROGATE.search(value):
        raise Refused(
            "contains a lone surrogate (not valid Unicode), which PostgreSQL cannot store"
        )


_SURROGATE = re.compile("[\ud800-\udfff]")


MAX_KEY_BYTES = 2048
"""The ONE bound of every key and name acta stores: at most this many bytes in UTF-8
(docs/reliability.md, "Keys and names"). It covers unique, concurrency and rate keys, lanes,
kinds, and schedule, signal and lock names; a namespace has its own, shorter rule
(``settings.NAMESPACE_RULE``). Each of them is a column of a btree index, beside the
namespace and at most one 8-byte column (``job_lane_idx``, ``concurrency_slot_pkey``,
``rate_meter_pkey``, ``lock_pkey``, ``job_prune_idx``, ``job_schedule_tick_key`` ...), and a
btree entry holds at most 2,704 bytes: measured on PostgreSQL 15 with incompressible keys
and a 63-character namespace, the longest key that fits is 2,620 bytes. A longer key was
stored and then refused by every statement that indexed it (an admission call carrying a
6,000-character rate key failed, with every job batched with it, for ever)."""


def check_key(value: Any) -> str:
    """A key or a name as stored (``unique_key=``, ``lane=``, ``concurrency_key=``, a
    rendered template, a kind, a schedule, signal or lock name): a non-empty string that
    PostgreSQL can store, of at most ``MAX_KEY_BYTES`` bytes in UTF-8."""
    if not isinstance(value, str) or not value:
        raise Refused("must be a non-empty string")
    _check_text(value)
    # len() first: a str of n characters has at least n and at most 4n bytes in UTF-8,
    # so only a long one is encoded to be measured.
    if len(value) * 4 > MAX_KEY_BYTES and len(value.encode("utf-8")) > MAX_KEY_BYTES:
        raise Refused(
            f"is {len(value.encode('utf-8')):,} bytes long in UTF-8; a key or name is at most "
            f"{MAX_KEY_BYTES:,} bytes (it is indexed: docs/reliability.md)"
        )
    return value


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``count`` admissions per ``period`` seconds: parsed from ``"10/s"``,
    ``"100/min"``, ``"5/h"``, ``"1000/d"`` or, with a multiple of the unit, ``"3/10s"``,
    ``"50/15min"``."""

    count: int
    period: float
    """Seconds."""
    text: str = field(default="", compare=False)
    """The canonical spelling, as stored in a definition."""

    UNITS = {
        "s": 1.0,
        "sec": 1.0,
        "second": 1.0,
        "min": 60.0,
        "minute": 60.0,
        "h": 3600.0,
        "hour": 3600.0,
        "d": 86400.0,
        "day": 86400.0,
    }
    PATTERN = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]+)\s*$")
    SYNTAX = (
        "'N/unit' or 'N/<k>unit' with N an int >= 1 and unit s, min, h or d "
        "(e.g. '100/min', '3/10s')"
    )

    MAX_PERIOD = 36500 * 86400.0
    """100 years: a meter's next time stays inside PostgreSQL's timestamps."""

    def __post_init__(self) -> None:
        if not _is_int(self.count) or self.count < 1 or not 0 < self.period < math.inf:
            raise Refused(f"needs N >= 1 and a period > 0; write {self.SYNTAX}")
        # The database's admission reads N as an int and steps its meter by period / N:
        # out of range, every admission call of the worker would fail (and bounce every
        # keyed job with it, for ever).
        if self.count > INT4_MAX:
            raise Refused(f"N must be at most {INT4_MAX:,}; write {self.SYNTAX}")
        if self.period > self.MAX_PERIOD:
            days = f"{self.MAX_PERIOD / 86400:g}d"
            raise Refused(f"the period must be at most {days} (100 years); write {self.SYNTAX}")
        if not self.text:  # Rate(3, 10.0) built in code: spell it as stored
            object.__setattr__(self, "text", f"{self.count}/{self.period:g}s")

    @classmethod
    def parse(cls, value: Any) -> Rate:
        if isinstance(value, Rate):
            return value
        match = cls.PATTERN.match(value) if isinstance(value, str) else None
        if match is None or match.group(3) not in cls.UNITS:
            raise Refused(f"is not a rate; write {cls.SYNTAX}")
        count, multiple, unit = int(match.group(1)), match.group(2), match.group(3)
        period = (float(multiple) if multiple else 1.0) * cls.UNITS[unit]
        return cls(count, period, f"{count}/{multiple or ''}{unit}")

    @property
    def per_second(self) -> float:
        return self.count / self.period

    def __str__(self) -> str:
        return self.text


BREAKER_PER = ("kind", "concurrency_key", "rate_key")
"""What one breaker covers: the whole kind, or each concurrency key or rate key apart."""


@dataclass(frozen=True, slots=True)
class Breaker:
    """A circuit breaker shared by every worker of the namespace (docs/breakers.md):
    it opens when, over at least ``min_calls`` outcomes of the last ``window`` seconds,
    the share of failures reaches ``failure_rate``; stays open ``open_for`` seconds (the
    kind's jobs wait, uncharged); then lets ``probes`` jobs through: a success closes it,
    a failure opens it again. ``per``: one breaker for the kind, or one per concurrency
    key or rate key. The string form is ``"failure_rate=0.5,min_calls=20,window=60,
    open_for=30,probes=1"`` (any field left out takes its default)."""

    failure_rate: float = 0.5
    min_calls: int = 20
    window: float = 60.0
    """Seconds of outcomes counted (a sliding-window counter)."""
    open_for: float = 30.0
    """Seconds it stays open before its probes are let through."""
    probes: int = 1
    per: str = "kind"

    FIELDS = ("failure_rate", "min_calls", "window", "open_for", "probes", "per")
    SYNTAX = (
        "'failure_rate=0.5,min_calls=20,window=60,open_for=30,probes=1' "
        "(fields failure_rate, min_calls, window, open_for, probes, per; any may be left out)"
    )
    MAX_PROBES = 10_000

    def __post_init__(self) -> None:
        problems = []
        for name in self.FIELDS:
            value = getattr(self, name)
            try:
                parsed = _BREAKER_CHECKS[name](value)
            except Refused as why:
                problems.append(f"{name}={shown(value)} {why}")
                continue
            if parsed is not value:
                object.__setattr__(self, name, parsed)
        if problems:
            # Built in code, Breaker(...) says it at once; parse() turns it into a Refused
            # that the policy's check names the field of.
            raise ConfigurationError("invalid breaker: " + "; ".join(problems))

    @classmethod
    def parse(cls, value: Any) -> Breaker:
        if isinstance(value, Breaker):
            return value
        if isinstance(value, Mapping):
            unknown = [k for k in value if k not in cls.FIELDS]
            if unknown:
                raise Refused(f"names unknown field(s) {unknown}; write {cls.SYNTAX}")
            return cls._made(dict(value))
        if not isinstance(value, str) or len(value) > 1000:
            raise Refused(f"is not a breaker; give Breaker(...) or {cls.SYNTAX}")
        fields: dict[str, Any] = {}
        for part in value.split(","):
            name, sep, text = part.partition("=")
            name = name.strip()
            if not sep or name not in cls.FIELDS:
                raise Refused(f"is not a breaker ({part.strip()!r}); write {cls.SYNTAX}")
            if name in fields:
                raise Refused(f"gives {name} twice; write {cls.SYNTAX}")
            fields[name] = _breaker_text(name, text.strip())
        return cls._made(fields)

    @classmethod
    def _made(cls, fields: dict[str, Any]) -> Breaker:
        try:
            return cls(**fields)
        except ConfigurationError as exc:
            raise Refused(str(exc).removeprefix("invalid breaker: ")) from None

    LONG_KEY_BYTES = 256
    """A key longer than this (in UTF-8) is stored as its SHA-256: the breaker's primary
    key holds the kind too, and a kind and a key each up to ``MAX_KEY_BYTES`` would not fit
    one btree entry together."""

    def key_of(self, kind: str, concurrency_key: str | None, rate_key: str | None) -> str:
        """The breaker's key for a job (``''``: the kind's one breaker)."""
        if self.per == "concurrency_key":
            key = concurrency_key or ""
        elif self.per == "rate_key":
            key = rate_key or ""
        else:
            return ""
        if len(key) * 4 > self.LONG_KEY_BYTES and len(key.encode()) > self.LONG_KEY_BYTES:
            return "sha256:" + hashlib.sha256(key.encode()).hexdigest()
        return key

    def __str__(self) -> str:
        text = (
            f"failure_rate={self.failure_rate:g},min_calls={self.min_calls},"
            f"window={self.window:g},open_for={self.open_for:g},probes={self.probes}"
        )
        return text if self.per == "kind" else f"{text},per={self.per}"


def _failure_rate(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Refused("must be a number in (0, 1] (the share of failures that opens it)")
    number = float(value)
    if not 0 < number <= 1:  # NaN fails too
        raise Refused("must be a number in (0, 1] (the share of failures that opens it)")
    return number


def _per(value: Any) -> str:
    if value not in BREAKER_PER:
        raise Refused(f"must be one of {', '.join(BREAKER_PER)}")
    return str(value)


def _breaker_text(name: str, text: str) -> Any:
    """A field of the string form, read as its type (the check then applies)."""
    if name == "per":
        return text
    whole = name in ("min_calls", "probes")
    try:
        return int(text) if whole else float(text)
    except ValueError:
        what = "an int" if whole else "a number"
        raise Refused(f"has {name}={text!r}, which is not {what}; write {Breaker.SYNTAX}") from None


_BREAKER_CHECKS: dict[str, Callable[[Any], Any]] = {
    "failure_rate": _failure_rate,
    "min_calls": _int_in(1, INT4_MAX, "outcomes in the window before it may open"),
    "window": _seconds(positive=True, meaning="seconds of outcomes counted"),
    "open_for": _seconds(positive=True, meaning="seconds open before the probes"),
    "probes": _int_in(1, Breaker.MAX_PROBES, "jobs let through at once when half-open"),
    "per": _per,
}


_attempts = _int_in(1, INT4_MAX, "the failure budget; the first attempt counts")


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Refused("must be True or False")
    return value


_priority = _int_in(PRIORITY_MIN, PRIORITY_MAX, "lower runs first")

POLICY_CHECKS: dict[str, Callable[[Any], Any]] = {
    "max_attempts": _attempts,
    "timeout": _seconds(positive=True, meaning="seconds one attempt may run"),
    "priority": _priority,
    "backoff_base": _seconds(positive=False, meaning="seconds before the first retry"),
    "backoff_max": _seconds(positive=False, meaning="the longest wait between retries"),
    "concurrency_key": _optional(check_template),
    "concurrency_limit": _optional(
        _int_in(1, INT4_MAX, "executions of one concurrency key at once")
    ),
    "rate": _optional(Rate.parse),
    "rate_key": _optional(check_template),
    "lane": _optional(check_template),
    "unique_key": _optional(check_template),
    "retention": _optional(
        # The prune subtracts it from now(): a timestamp out of range failed every recovery
        # pass of the namespace (the one bound of durations.py keeps it in range).
        _seconds(positive=False, meaning="seconds a finished job is kept; None keeps it")
    ),
    "paused": _bool,
    "breaker": _optional(Breaker.parse),
}
"""Every policy field and its check: the one place a policy value is validated."""

OVERRIDABLE = (
    "max_attempts",
    "timeout",
    "backoff_base",
    "backoff_max",
    "concurrency_limit",
    "rate",
    "retention",
    "paused",
    "breaker",
)
"""The fields an operator may override (``acta definitions set``, ``acta.set_policy``):
those the workers apply. ``priority`` and the key templates are applied by the
application's code when it enqueues, so an override of them would change nothing."""

_AT_ENQUEUE = ("priority", "concurrency_key", "rate_key", "lane", "unique_key")


def override_value(name: str, value: Any) -> Any:
    """One override, checked by its field's rule (``Refused`` says why); text from the
    command line (``"30"``, ``"10/s"``, ``"true"``, ``"none"``) is read as the field's type
    first. Answers the value as stored (JSON)."""
    if name in _AT_ENQUEUE:
        raise Refused(
            "is applied by the application's code when it enqueues, not by the workers; "
            "change it in @acta.job(...) and deploy"
        )
    if name not in OVERRIDABLE:
        raise Refused(f"is not a field an operator can set; one of: {', '.join(OVERRIDABLE)}")
    if isinstance(value, str):
        value = _from_text(name, value)
    parsed = POLICY_CHECKS[name](value)
    return str(parsed) if isinstance(parsed, Rate | Breaker) else parsed


def _from_text(name: str, text: str) -> Any:
    word = text.strip().lower()
    if word in ("none", "null") and name in ("concurrency_limit", "rate", "retention", "breaker"):
        return None
    if name == "paused":
        if word in ("true", "yes", "on", "1"):
            return True
        if word in ("false", "no", "off", "0"):
            return False
        raise Refused("must be true or false")
    if name in ("max_attempts", "concurrency_limit"):
        try:
            return int(word)
        except ValueError:
            raise Refused("must be an int") from None
    if name in ("rate", "breaker"):
        return text
    try:
        return float(word)
    except ValueError:
        raise Refused("must be a number of seconds") from None


TEMPLATE_FIELDS = ("unique_key", "lane", "concurrency_key", "rate_key")
"""Policy fields that are key templates rendered from each job's args."""


@dataclass(frozen=True, slots=True)
class Policy:
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    """Seconds one attempt may run before it is cancelled and counted as a failure."""
    priority: int = 0
    backoff_base: float = DEFAULT_BACKOFF_BASE_SECONDS
    """Seconds before the first retry; each later retry waits twice as long (±25 %)."""
    backoff_max: float = DEFAULT_BACKOFF_MAX_SECONDS
    concurrency_key: str | None = None
    """Template rendered from the args, e.g. ``"customer:{customer_id}"``."""
    concurrency_limit: int | None = None
    """Executions of one concurrency key at once across all workers. A concurrency key with
    no limit (declared here, or given per job) means 1: one at a time per key."""
    rate: Rate | None = None
    """e.g. ``"100/min"`` (text is parsed into a :class:`Rate`): admitted at most that often
    across all workers, per ``rate_key`` (default: the kind)."""
    rate_key: str | None = None
    lane: str | None = None
    """Template of the lane key: jobs of one lane run one at a time, in enqueue order."""
    unique_key: str | None = None
    """Template of the unique key: one non-terminal job per key."""
    retention: float | None = DEFAULT_RETENTION_SECONDS
    """Seconds a finished job is kept before recovery prunes it (7 days); None keeps it forever."""
    paused: bool = False
    """Jobs of a paused kind stay queued, unclaimed, until it is resumed (running ones
    finish): an operator's switch (``acta pause KIND``), declared False."""
    breaker: Breaker | None = None
    """A circuit breaker shared by every worker (docs/breakers.md): ``Breaker(...)`` or its
    string form ``"failure_rate=0.5,min_calls=20,window=60,open_for=30,probes=1"``."""

    def __post_init__(self) -> None:
        problems = []
        for name, check in POLICY_CHECKS.items():
            value = getattr(self, name)
            try:
                parsed = check(value)
            except Refused as why:
                problems.append(f"{name}={shown(value)} {why}")
                continue
            if parsed is not value:
                object.__setattr__(self, name, parsed)
        if not problems and self.backoff_max < self.backoff_base:
            problems.append(
                f"backoff_base={self.backoff_base!r}, backoff_max={self.backoff_max!r}: "
                "need backoff_base <= backoff_max"
            )
        if problems:
            raise ConfigurationError("invalid job policy: " + "; ".join(problems))
        if self.concurrency_key is not None and self.concurrency_limit is None:
            object.__setattr__(self, "concurrency_limit", 1)

    @property
    def concurrency_slots(self) -> int:
        """Executions of one concurrency key at once: the limit, or 1 where none is set (a
        job may bring its own key to a kind that declares none)."""
        return self.concurrency_limit or 1

    def retry_delay(self, attempts: int, rng: random.Random | None = None) -> float:
        """Seconds before the next try after ``attempts`` charged attempts: exponential, ±25 %."""
        # The exponent is capped: 2 ** 1100 is past a float (a budget of thousands of attempts).
        base = min(self.backoff_base * 2.0 ** min(max(0, attempts - 1), 1000), self.backoff_max)
        return base * (rng or random).uniform(0.75, 1.25)

    def to_json(self) -> dict[str, Any]:
        return {
            name: str(value) if isinstance(value, Rate | Breaker) else value
            for name in self.field_names()
            for value in (getattr(self, name),)
        }

    def merged(self, overrides: Mapping[str, Any]) -> Policy:
        """This policy with an operator's overrides on top, each checked as ``@acta.job``
        checks it. Unknown names are ignored: a newer release's field stored by its CLI
        must not stop an older worker."""
        known = {name: value for name, value in overrides.items() if name in POLICY_CHECKS}
        problems = []
        for name, value in known.items():
            try:
                POLICY_CHECKS[name](value)
            except Refused as why:
                problems.append(f"{name}={shown(value)} {why}")
        if problems:
            raise ConfigurationError("invalid policy override: " + "; ".join(problems))
        return dataclasses.replace(self, **known)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]


def check_templates(policy: Policy, kind: str, params: tuple[str, ...], any_name: bool) -> None:
    """Each key template may only read the handler's own parameters: a typo fails at
    import, not at the first enqueue. ``any_name``: the handler takes ``**kwargs``."""
    if any_name:
        return
    for option in TEMPLATE_FIELDS:
        template = getattr(policy, option)
        if template is None:
            continue
        unknown = [f for f in template_fields(template) if f not in params]
        if unknown:
            raise ConfigurationError(
                f"handler {kind!r}: {option}={template!r} names {unknown}, which "
                f"is not among its parameters ({', '.join(params) or 'none'})"
            )


def render_key(template: str | None, args: dict[str, Any], what: str, kind: str) -> str | None:
    """Render a key template such as ``"customer:{customer_id}"`` from a job's args."""
    if template is None:
        return None
    try:
        return template.format(**args)
    except KeyError as exc:
        raise InvalidJobArgs(
            f"{kind}: the {what} template {template!r} needs argument {exc}, which this job's "
            "args do not have"
        ) from None
    except (IndexError, TypeError, ValueError) as exc:
        # e.g. '{customer[id]}' on a customer that is a number, or '{n:d}' on a string.
        raise InvalidJobArgs(
            f"{kind}: the {what} template {template!r} cannot be rendered from this job's "
            f"args: {exc}"
        ) from None


# --------------------------------------------------------------------------- job options


def _run_at(value: Any) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise Refused(
            "must be a timezone-aware datetime; use datetime.now(timezone.utc) + ... or pass "
            "delay= in seconds"
        )
    if not durations.due_in_range(value):
        raise Refused(f"must be within {durations.SPAN_TEXT} of now")
    return value


JOB_OPTION_CHECKS: dict[str, Callable[[Any], Any]] = {
    "run_at": _run_at,
    "delay": _seconds(positive=False, meaning="counted on the database clock", timedelta_ok=True),
    "priority": _priority,
    "max_attempts": _optional(_attempts),
    "unique_key": _optional(check_key),
    "lane": _optional(check_key),
    "concurrency_key": _optional(check_key),
}
"""Every per-job option and its check; ``Job(...)`` columns use the same checks
(``lane_key`` as ``lane``). ``parent_id`` is acta's own: set when a parent's handler
returns ``WaitForChildren``, never by hand."""

JOB_OPTIONS = frozenset(JOB_OPTION_CHECKS)
"""Keyword names that ``handler.job()`` takes as per-job options rather than args; a handler
parameter may therefore not use one of these names."""


def job_option(kind: str, name: str, value: Any, *, check: str | None = None) -> Any:
    """One job option, parsed; ``InvalidJob`` naming the kind, the field and the value.
    ``check``: the option whose rule applies when the field is a column of another name."""
    try:
        return JOB_OPTION_CHECKS[check or name](value)
    except Refused as why:
        raise InvalidJob(f"{kind}: {name}={shown(value)} {why}") from None


_COLUMN_RULES = {"lane_key": "lane", "rate_key": "unique_key", "schedule_name": "unique_key"}
"""Job columns checked by the rule of a job option of another name (a rate key is a key
like a unique key)."""


def job_column(kind: str, column: str, value: Any) -> Any:
    """A value of job column ``column`` checked by its option's rule (``InvalidJob`` naming
    the kind, the column and the value): ``Job``'s validators, ``handler.jobs()``'s rendered
    keys and a schedule's fire keys all check through here."""
    return job_option(kind, column, value, check=_COLUMN_RULES.get(column))


def job_options(kind: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The per-job options of ``handler.job()`` / ``handler.jobs()``, each parsed."""
    unknown = set(options) - JOB_OPTIONS
    if unknown:
        raise InvalidJob(
            f"{kind}: unknown job option(s) {sorted(unknown)}; known: "
            f"{', '.join(sorted(JOB_OPTIONS))}"
        )
    if options.get("delay") is not None and options.get("run_at") is not None:
        raise InvalidJob(f"{kind}: give either run_at or delay, not both")
    return {
        name: job_option(kind, name, value)
        for name, value in options.items()
        # run_at=None / delay=None read as "not given", as Job(delay=None) does.
        if value is not None or name not in ("run_at", "delay")
    }
