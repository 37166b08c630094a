"""A kind's policy: what a definition says about attempts, timeout, backoff, priority and keys.

Declared in code with ``@acta.job(...)``, stored in the ``definition`` table when a worker
starts, and adjustable by operators; the effective policy is the declared one with the
operator's overrides on top.
"""

from __future__ import annotations

import dataclasses
import random
import string
from dataclasses import dataclass
from typing import Any

from .errors import ConfigurationError, InvalidJobArgs
from .settings import (
    DEFAULT_BACKOFF_BASE_SECONDS,
    DEFAULT_BACKOFF_MAX_SECONDS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RETENTION_SECONDS,
    DEFAULT_TIMEOUT_SECONDS,
)


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
    rate: str | None = None
    """e.g. ``"100/min"``: admitted at most that often across all workers."""
    rate_key: str | None = None
    lane: str | None = None
    """Template of the lane key: jobs of one lane run one at a time, in enqueue order."""
    unique_key: str | None = None
    """Template of the unique key: one non-terminal job per key."""
    retention: float | None = DEFAULT_RETENTION_SECONDS
    """Seconds a finished job is kept before recovery prunes it (7 days); None keeps it forever."""

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            problems.append(f"max_attempts={self.max_attempts!r} must be an int >= 1")
        if not isinstance(self.timeout, int | float) or self.timeout <= 0:
            problems.append(f"timeout={self.timeout!r} must be > 0 seconds")
        if not isinstance(self.priority, int) or not -32768 <= self.priority <= 32767:
            problems.append(f"priority={self.priority!r} must be an int in -32768..32767")
        if self.backoff_base < 0 or self.backoff_max < self.backoff_base:
            problems.append(
                f"backoff_base={self.backoff_base!r}, backoff_max={self.backoff_max!r}: "
                "need 0 <= backoff_base <= backoff_max"
            )
        if self.concurrency_limit is not None and self.concurrency_limit < 1:
            problems.append(f"concurrency_limit={self.concurrency_limit!r} must be >= 1")
        if self.retention is not None and self.retention < 0:
            problems.append(f"retention={self.retention!r} must be >= 0 seconds")
        if problems:
            raise ConfigurationError("invalid job policy: " + "; ".join(problems))

    def retry_delay(self, attempts: int, rng: random.Random | None = None) -> float:
        """Seconds before the next try after ``attempts`` charged attempts: exponential, ±25 %."""
        base = min(self.backoff_base * (2 ** max(0, attempts - 1)), self.backoff_max)
        return base * (rng or random).uniform(0.75, 1.25)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def merged(self, overrides: dict[str, Any]) -> Policy:
        known = {f.name for f in dataclasses.fields(self)}
        return dataclasses.replace(self, **{k: v for k, v in overrides.items() if k in known})

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]


def template_fields(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


def render_key(template: str | None, args: dict[str, Any], what: str, kind: str) -> str | None:
    """Render a key template such as ``"customer:{customer_id}"`` from a job's args."""
    if template is None:
        return None
    try:
        return template.format(**args)
    except (KeyError, IndexError) as exc:
        raise InvalidJobArgs(
            f"{kind}: the {what} template {template!r} needs argument {exc}, which this job's "
            "args do not have"
        ) from None
