"""Settings: read from ``ACTA_*`` environment variables and ``.env`` by pydantic-settings.

The tunables are the seed's three (heartbeat interval, executor count, safety poll
interval) and the shutdown's forced-stop wait; every other timing is a constant below or
derives from the heartbeat. All durations are in seconds.
"""

from __future__ import annotations

import math
import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from .defaults import DEFAULT_FORCED_STOP_SECONDS as DEFAULT_FORCED_STOP_SECONDS
from .defaults import DEFAULT_GRACE_SECONDS as DEFAULT_GRACE_SECONDS
from .errors import ConfigurationError

SCHEMA_HEAD = "0017"
"""The newest revision in alembic/versions (a test checks it against Alembic's own view)."""
SCHEMA_VERSION_TABLE = "alembic_version"


def schema_behind(schema: str, current: str | None) -> ConfigurationError:
    """The one error for acta's ``schema`` at revision ``current`` (None: never migrated)
    while this code needs :data:`SCHEMA_HEAD`: the worker's start and the commands say it
    alike."""
    return ConfigurationError(
        f"acta's schema {schema!r} is at revision {current or 'none'}, this acta needs "
        f"{SCHEMA_HEAD}: run `acta db upgrade` (or `alembic upgrade head`)"
    )


# ---------------------------------------------------------------- constants (seed)
POLL_FLOOR_SECONDS = 0.05
"""The shortest idle sleep of the claimer."""
IDLE_JITTER_SECONDS = 0.1
"""Up to this much is added to an idle sleep so that idle workers do not claim in lockstep."""
CONCURRENCY_BOUNCE_SECONDS = 2.0
"""How soon a job refused its concurrency slot is due again."""
BATCH_MAX_COMPLETIONS = 128
"""Completions in one ``complete_executions`` call."""
BATCH_MAX_BYTES = 4 * 1024 * 1024
"""Result bytes in one call; a larger single result is written alone."""
BATCH_WINDOW_SECONDS = 0.05
"""Extra wait to fill a batch, only when the batch's first read found a backlog."""
WRITE_REPEAT_FIRST_SECONDS = 1.0
WRITE_REPEAT_MAX_SECONDS = 30.0
WRITE_REPEAT_JITTER = 0.25
WRITE_REPEAT_WARNINGS = 3
"""Failed completion writes log a warning this many times, then an error per try."""
WORKER_DEAD_BEATS = 7
"""A worker silent for this many of its own heartbeats is dead."""
LOOP_TICK_SECONDS = 1.0
"""The longest interval of the event loop's ticker, which the lifeline thread watches (a
quarter beat when beats are shorter)."""
STALL_WARNING_SECONDS = 5.0
"""An event loop silent this long past its tick is stalled (half a beat when beats are
shorter): warned about, counted, and its leases renewed from the lifeline thread."""
DEFAULT_TIMEOUT_SECONDS = 300.0
"""Default execution timeout of one attempt."""
DEFAULT_MAX_ATTEMPTS = 20
"""Default failure budget of a job (as Oban)."""
DEFAULT_BACKOFF_BASE_SECONDS = 1.0
DEFAULT_BACKOFF_MAX_SECONDS = 3600.0
# DEFAULT_GRACE_SECONDS (imported above) lives in ``defaults``: `acta worker --help` shows
# it without loading this module's pydantic-settings.
MIN_EXECUTORS, MAX_EXECUTORS = 1, 1024
"""The executor count's bounds: ``ACTA_EXECUTORS``, ``acta worker --executors`` and
``in_process_worker(executors=)`` all go through :func:`check_executors` or these."""
DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600.0
"""How long finished jobs are kept before recovery prunes them (per kind: ``retention``)."""
PRUNE_CHUNK = 1000
"""Rows one prune statement deletes; a recovery pass runs at least PRUNE_CHUNKS of them
(fewer once one comes back short: nothing more is due)."""
PRUNE_CHUNKS = 20
PRUNE_PASS_SECONDS = 5.0
"""Past PRUNE_CHUNKS full chunks, a recovery pass goes on pruning while chunks come back
full, for up to this long (a worker's pass: up to one heartbeat interval, if longer): a
namespace finishing more jobs than a fixed quota per pass would otherwise keep every job
beyond it, and its table would grow without bound (docs/scaling.md)."""
RECOVERY_CHUNK = 1000
"""Expired leases one recovery statement returns to ready (repeated until none is left)."""
MAX_ARGS_BYTES = 1024 * 1024
"""Largest JSON encoding of a job's args (UTF-8 bytes of the compact encoding)."""
MAX_ARGS_DEPTH = 200
"""Deepest nesting of a job's args, the args object itself being level 1. The worker loads
args with pydantic's JSON parser (jiter), which refuses a 201st level ("recursion limit
exceeded", measured with pydantic-core 2.50): deeper args would be stored, then fail the job
at every attempt."""
MAX_ARGS_INT_DIGITS = 4300
"""Most decimal digits of an integer in a job's args: jiter refuses a longer number ("number
out of range", measured), and Python refuses to print one by default
(``sys.get_int_max_str_digits``)."""
MAX_RESULT_BYTES = 64 * 1024 * 1024
"""Largest JSON encoding of a job's result; a larger result fails the attempt."""
MAX_TRACEBACK_CHARS = 16 * 1024
"""Tracebacks stored on an execution are cut to this many characters (the end is kept)."""
NAMESPACE_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,57}$")
NAMESPACE_RULE = "must be 1-58 characters of letters, digits, '_', '.' or '-'"
"""What :data:`NAMESPACE_PATTERN` asks, as every refusal of a namespace says it. 58: a job's
insert notifies the channel ``acta.<namespace>``, and PostgreSQL refuses a channel name of
64 bytes or more ("channel name too long", at the enqueue's commit)."""
SCHEMA_PATTERN = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_URL_SCHEME = re.compile(r"^(postgresql|postgres)(\+[A-Za-z0-9_]+)?://")
_PORT = re.compile(r"[0-9]{1,5}")
_IPV6_HOST = re.compile(r"^\[[^\]]+\](?::(?P<port>.*))?$")
_QUERY_PASSWORD = re.compile(r"(?i)(\b(?:ssl)?password=)[^&\s#]*")


def masked_url(url: str) -> str:
    """``url`` fit to print: its password replaced by ``***`` (``app:***@db``), also a
    ``password=`` or ``sslpassword=`` parameter; the rest as given, parsable or not."""
    text = _QUERY_PASSWORD.sub(r"\g<1>***", url)
    scheme, sep, rest = text.partition("://")
    if not sep:  # no scheme (``app:pw@db/app``): credentials all the same
        scheme, rest = "", text
    # The credentials end at the last '@' before the query: a password may hold a '/'
    # that a careless URL did not quote (or a '?': then at the last '@' of all).
    head, mark, tail = rest.partition("?")
    if "@" not in head:
        head, mark, tail = rest, "", ""
    userinfo, at, hosts = head.rpartition("@")
    if not at:
        return text
    user, colon, _password = userinfo.partition(":")
    shown = f"{user}:***@" if colon and _password else f"{user}@"
    return f"{scheme}{sep}{shown}{hosts}{mark}{tail}"


def _port_problem(port: str) -> str | None:
    port = urllib.parse.unquote(port)
    if not _PORT.fullmatch(port) or not 1 <= int(port) <= 65535:
        return f"port {port!r} is not a number from 1 to 65535"
    return None


def url_problem(url: str) -> str | None:
    """What makes ``url`` (a ``postgresql://`` URL) unusable as acta reads it, or None:
    the hosts and ports (libpq's ``host1:port1,host2:port2`` included) and the query. Never
    the password: the answer may be printed."""
    try:
        parsed = urllib.parse.urlsplit(url)
    except ValueError as exc:  # its message may hold the password: not shown
        if "IPv6" in str(exc):
            return "has an unclosed '[' or ']' around an IPv6 host (expected e.g. [::1]:5432)"
        return "is not a valid URL (its user, password or host holds characters a URL cannot)"
    hostlist = parsed.netloc.rpartition("@")[2]
    for spec in hostlist.split(",") if hostlist else []:
        if spec.startswith("["):
            found = _IPV6_HOST.match(spec)
            if found is None:
                return f"host {spec!r} is not a bracketed IPv6 address such as [::1]:5432"
            port = found["port"] or ""
        else:
            if "]" in spec:
                return f"host {spec!r} has a ']' without its '['"
            _host, _, port = spec.partition(":")
        if port and (problem := _port_problem(port)):
            return problem
    if parsed.query:
        try:
            query = urllib.parse.parse_qs(parsed.query, strict_parsing=True)
        except ValueError:
            return "has a malformed query string: expected name=value pairs joined by '&'"
        for port in ",".join(query.get("port", [])).split(","):
            if port and (problem := _port_problem(port)):
                return problem
        for timeout in query.get("connect_timeout", []):
            try:
                int(timeout.strip())
            except ValueError:
                return f"connect_timeout {timeout!r} is not a whole number of seconds"
    return None


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPU quota of this process's cgroup in cores (``200000 100000`` -> 2.0), or None
    when unlimited or unknown. cgroup v2 (``cpu.max``) first, then v1 (``cpu.cfs_*``)."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def available_cpus(root: Path = Path("/sys/fs/cgroup")) -> int:
    """The cores this process may use: its CPU affinity (``os.process_cpu_count`` where
    Python has it), capped by a container's CPU quota. ``os.cpu_count()`` alone counts the
    host's cores: a pod limited to 2 CPUs on a 32-core node would get 64 executors and 64
    threads instead of 8."""
    counter = getattr(os, "process_cpu_count", None)
    if counter is not None:
        cores = counter() or 1
    elif hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0)) or 1
    else:
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit(root)
    if limit is not None:
        cores = min(cores, max(1, math.ceil(limit)))
    return cores


def default_executors() -> int:
    """4 per core, clamped to 8..64 (a 2-core container gets 8, 16 cores and up get 64);
    cores as :func:`available_cpus` counts them (affinity and container quota)."""
    return max(8, min(64, 4 * available_cpus()))


def check_executors(value: object, where: str) -> int:
    """THE rule for an executor count (an int from :data:`MIN_EXECUTORS` to
    :data:`MAX_EXECUTORS`; the setting's field has the same bounds): ``where`` names the
    option as the user wrote it (``--executors 0``)."""
    if not isinstance(value, int) or not MIN_EXECUTORS <= value <= MAX_EXECUTORS:
        raise ConfigurationError(f"{where}: must be between {MIN_EXECUTORS} and {MAX_EXECUTORS}")
    return value


def check_grace(value: float, where: str) -> float:
    """THE rule for a shutdown grace: seconds >= 0. NaN compares false with everything (it
    would pass ``< 0`` and then end the grace at once); inf is a grace (running handlers may
    run to their end, each bounded by its own timeout; a second signal still cancels them),
    as a large finite number would be."""
    if math.isnan(value) or value < 0:
        raise ConfigurationError(f"{where}: must be >= 0 seconds")
    return value


FORCED_STOP_RULE = "must be a finite number of seconds > 0"
"""What :func:`check_forced_stop` and the ``forced_stop_wait`` field ask, as each refusal says
it."""


def forced_stop_ok(value: float) -> bool:
    """A forced-stop wait is a finite number of seconds > 0. Not 0: a cancelled handler needs
    at least a few loop turns to end, and one the worker did not wait for would be named as
    ignoring its cancel and left to its lease. Not inf: the wait is what bounds the stop that
    one SIGTERM asks for past a handler that swallows its cancel. Not NaN: every comparison
    with it is false."""
    return math.isfinite(value) and value > 0


def check_forced_stop(value: float, where: str) -> float:
    """THE rule for a forced-stop wait given as an option (``ACTA_FORCED_STOP_WAIT`` says
    the same through the field's validator): ``where`` names it as the user wrote it
    (``--forced-stop-wait nan``)."""
    if not forced_stop_ok(value):
        raise ConfigurationError(f"{where}: {FORCED_STOP_RULE}")
    return value


def default_data_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("acta-sqla", appauthor=False)) / "pgdata"


ENV_PREFIX = "ACTA_"
DOTENV = ".env"
SCHEMA_VARIABLE = "ACTA_SCHEMA"
"""The one variable that sets ``db_schema`` (the field's own name would read ACTA_DB_SCHEMA)."""
_SCHEMA_KEYS = ("db_schema", "schema")
"""Keys that set ``db_schema`` where the code or a nested settings model names it (an
application's ``APP_ACTA__SCHEMA``): never an environment variable of their own."""


class _OnlyActaVariables(PydanticBaseSettingsSource):
    """The ``.env`` file's values of acta's own variables. pydantic-settings hands on a
    ``.env`` file's other lines too, as extra values for ``extra="ignore"`` to drop; an
    unprefixed ``SCHEMA=`` or ``DB_SCHEMA=`` line among them would reach
    ``ActaSettings._schema_by_name`` (and did move acta's tables in older releases)."""

    def __init__(self, source: PydanticBaseSettingsSource) -> None:
        super().__init__(source.settings_cls)
        self._source = source

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._source.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        known = {SCHEMA_VARIABLE, *(n for n in self.settings_cls.model_fields if n != "db_schema")}
        return {key: value for key, value in self._source().items() if key in known}


class ActaSettings(BaseSettings):
    """acta-sqla's settings: each field from its ``ACTA_*`` environment variable or the
    ``.env`` file of the current folder (the environment wins) unless given; ``ACTA_SCHEMA``
    sets ``db_schema``. Names match without regard to case; nothing unprefixed is read.

    Also usable as a nested model of an application's own settings (docs/operating.md)::

        class AppSettings(BaseSettings):
            model_config = SettingsConfigDict(env_prefix="APP_", env_nested_delimiter="__")
            acta: ActaSettings = Field(default_factory=ActaSettings)

    where ``APP_ACTA__NAMESPACE`` (or ``APP_ACTA__SCHEMA``) sets the nested value."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=DOTENV,
        env_file_encoding="utf-8",
        case_sensitive=False,
        extra="ignore",
        frozen=True,
    )

    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the PostgreSQL database; unset = the embedded server.",
    )
    namespace: str = Field(default="default", description="The namespace a worker serves.")
    app: str | None = Field(default=None, description="`module:attribute` of the Acta instance.")
    db_schema: str = Field(
        default="acta",
        # The environment variable is ACTA_SCHEMA, the alias (pydantic-settings reads an
        # alias as the variable's whole name); the code passes ``db_schema=`` (see
        # _schema_by_name). No unprefixed alias and no populate_by_name: reading SCHEMA or
        # DB_SCHEMA moved acta's tables when an unrelated variable had that name, and
        # populate_by_name would read ACTA_DB_SCHEMA too.
        validation_alias=SCHEMA_VARIABLE,
        description="PostgreSQL schema holding acta's tables.",
    )
    heartbeat_interval: Annotated[float, Field(gt=0, le=3600)] = Field(
        default=45.0, description="Seconds between heartbeats; every lease timing derives from it."
    )
    executors: Annotated[int, Field(ge=MIN_EXECUTORS, le=MAX_EXECUTORS)] = Field(
        default_factory=default_executors,
        description="Executor loops per worker (default 4 per core, clamped to 8..64).",
    )
    safety_poll_interval: Annotated[float, Field(gt=0, le=60)] = Field(
        default=1.0,
        description="Seconds: the longest idle sleep, the back-off after a failed claim, and "
        "the delay of a job handed back for want of a handler.",
    )
    forced_stop_wait: float = Field(
        default=DEFAULT_FORCED_STOP_SECONDS,
        description="Seconds a stopping worker waits, after the grace, for the handlers it "
        "cancelled to end; one still running then is left to its lease and the worker exits.",
    )
    data_dir: Path = Field(
        default_factory=default_data_dir, description="Data folder of the embedded PostgreSQL."
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """pydantic-settings' own sources, in its order (given, environment, ``.env``,
        secrets), the ``.env`` file's limited to acta's variables."""
        dotenv = _OnlyActaVariables(dotenv_settings)
        return init_settings, env_settings, dotenv, file_secret_settings

    @model_validator(mode="before")
    @classmethod
    def _schema_by_name(cls, data: Any) -> Any:
        """``db_schema=`` (the code's spelling) or ``schema`` (a nested model's
        ``APP_ACTA__SCHEMA``) set the field too, and beat ``ACTA_SCHEMA``: only the
        environment and ``.env`` give that key, and what is given wins over them."""
        if not isinstance(data, Mapping) or not any(k in data for k in _SCHEMA_KEYS):
            return data
        given = dict(data)
        for key in reversed(_SCHEMA_KEYS):  # db_schema beats schema
            if key in given:
                given[SCHEMA_VARIABLE] = given.pop(key)
        return given

    @field_validator("namespace")
    @classmethod
    def _check_namespace(cls, value: str) -> str:
        if not NAMESPACE_PATTERN.match(value):
            raise ValueError(f"{NAMESPACE_RULE} (it names a LISTEN channel)")
        return value

    @field_validator("db_schema")
    @classmethod
    def _check_schema(cls, value: str) -> str:
        if not SCHEMA_PATTERN.match(value):
            raise ValueError("must be a lower-case PostgreSQL identifier such as 'acta'")
        return value

    @field_validator("forced_stop_wait")
    @classmethod
    def _check_forced_stop(cls, value: float) -> float:
        if not forced_stop_ok(value):
            raise ValueError(FORCED_STOP_RULE)
        return value

    @field_validator("database_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        match = _URL_SCHEME.match(value)
        if match is None:
            if "://" not in value:
                raise ValueError(
                    "is not a database URL; expected e.g. postgresql://user@host:5432/dbname"
                )
            raise ValueError(
                f"names backend {value.split('://', 1)[0].split('+')[0]!r}; acta-sqla needs "
                "PostgreSQL "
                "(postgresql://, postgresql+asyncpg:// or postgresql+psycopg://)"
            )
        problem = url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @property
    def timings(self) -> Timings:
        return Timings.from_heartbeat(self.heartbeat_interval)


@dataclass(frozen=True, slots=True)
class Timings:
    """The lease clock: every value derives from the one heartbeat interval."""

    heartbeat: float
    lease: float
    attempt_deadline: float
    worker_dead_after: float
    recovery_interval: float

    @classmethod
    def from_heartbeat(cls, heartbeat: float) -> Timings:
        lease = 4 * heartbeat
        return cls(
            heartbeat=heartbeat,
            lease=lease,
            # Halfway between one beat and the lease: a healthy attempt never comes near it,
            # and a cancelled one still has (lease - deadline) to stop before another worker
            # may take the row.
            attempt_deadline=(heartbeat + lease) / 2,
            worker_dead_after=WORKER_DEAD_BEATS * heartbeat,
            recovery_interval=lease,
        )

    @property
    def prune_budget(self) -> float:
        """How long a recovery pass may go on pruning past its first PRUNE_CHUNKS chunks:
        one heartbeat, at least PRUNE_PASS_SECONDS (a pass comes every 4 beats, so the
        prune keeps up with thousands of finished jobs a second without holding a
        connection for long)."""
        return max(PRUNE_PASS_SECONDS, self.heartbeat)


def load_settings(options: Mapping[str, str] | None = None, **overrides: object) -> ActaSettings:
    """Build settings from the environment plus ``overrides``; a bad value raises one clear
    line. ``options`` names the command-line option an override came from (``{"db_schema":
    "--schema"}``): the line names it instead of the environment variable."""
    clean = {k: v for k, v in overrides.items() if v is not None}
    try:
        return ActaSettings(**clean)  # type: ignore[arg-type]
    except ValidationError as exc:
        given = {k: v for k, v in (options or {}).items() if k in clean}
        raise ConfigurationError(describe_validation_error(exc, given)) from None


def describe_validation_error(
    exc: ValidationError, options: Mapping[str, str] | None = None
) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "value"
        # db_schema is validated under its alias, ACTA_SCHEMA: the option is --schema.
        field = "db_schema" if loc.upper() == SCHEMA_VARIABLE else loc
        env = SCHEMA_VARIABLE if field == "db_schema" else f"{ENV_PREFIX}{loc.upper()}"
        message = err["msg"].removeprefix("Value error, ")
        given = err.get("input")
        if env == "ACTA_DATABASE_URL" and isinstance(given, str):
            given = masked_url(given)  # never print a password
        parts.append(f"{(options or {}).get(field, env)}={given!r}: {message}")
    return "invalid setting " + "; ".join(parts)
