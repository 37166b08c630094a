"""The dashboard as an ASGI application: Starlette routes rendering Jinja2 templates
(autoescaped), reading through ``acta_sqla.inspect`` and acting through
``dashboard.actions``.

Every page runs in one short transaction with a statement timeout, so that a slow query
can never hold a connection of a busy database for long; every action is a POST that
carries the CSRF token, asks for confirmation, and is logged (stage "dashboard").
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from jinja2 import Environment, FileSystemLoader, select_autoescape
from loguru import logger
from markupsafe import Markup
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Match, Mount, Route, Router
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import inspect
from ..errors import ActaError, DatabaseUnavailable, StoreUnavailable, UniqueKeyHeld
from ..session import MAX_CANCEL_BY
from ..status import ACTIVE_STATUSES, TERMINAL_STATUSES, JobStatus
from . import actions
from .security import (
    AUTH_COOKIE,
    CSRF_FIELD,
    SID_COOKIE,
    Keys,
    Throttle,
    host_allowed,
    host_of,
    new_sid,
)
from .settings import MAX_LIFETIME, DashboardSettings

log = logger.bind(stage="dashboard")

HERE = Path(__file__).parent

BATCH = 1000
"""A selection or group action acts on at most this many jobs per click (one transaction
of that many single-job operations stays short; the page says to click again for more)."""
SCAN = 10 * BATCH
"""A bulk retry goes on to older jobs past those it must skip (another job holds their
unique key) until it retried ``BATCH``, but examines at most this many per click; the
result page then offers to continue below the last one examined."""
MAX_BODY_BYTES = 64 * 1024
"""Largest request body of any route (a form of the dashboard is well under 1 KiB): a
bigger one is answered 413 before it is read."""
MAX_FORM_FIELDS = 20
"""Most fields in one form (the dashboard's forms have at most 8): more is a 413."""

PAGE_SIZE = 50
MAX_ID = 2**63 - 1
"""The largest job id there can be (a bigint): a bigger one is refused before a query."""
STATEMENT_TIMEOUT_MS = 5000
"""No page may hold the database longer than this (a filter no index serves fails with a
message instead of scanning on)."""

CHART_WINDOWS = {"1h": (3600.0, 60.0), "24h": (86_400.0, 3600.0)}
"""The charts' windows: (seconds, bucket): per minute over the last hour, per hour over
the last day."""
RATE_SECONDS = 300.0
"""The Kinds page's live numbers are over the last 5 minutes."""

WINDOWS = {"1h": 3600.0, "24h": 86_400.0, "7d": 7 * 86_400.0}
"""The failures page's time windows: a group is counted over the finished index's range,
so a shorter window is cheaper on a big history."""

NAV: list[tuple[str, str]] = [
    ("overview", "Overview"),
    ("jobs", "Jobs"),
    ("failures", "Failures"),
    ("workers", "Workers"),
    ("lanes", "Lanes"),
    ("keys", "Keys"),
    ("schedules", "Schedules"),
    ("definitions", "Kinds"),
    ("locks", "Locks"),
]
"""The menu: (route name, label). The extension point for the pages of features still to
come: a read-model function in ``acta_sqla.inspect``, a route in ``_routes``, a template,
and one entry here."""

FAILED_LOGIN_DELAY = 0.5
"""Seconds a wrong password waits before its answer (slows one client's guessing; the
``Throttle`` limits guesses sent in parallel)."""

MESSAGES = {
    "retried": "Job is ready again.",
    "not-retried": "Not retried: only finished jobs can be retried.",
    "cancelled": "Job cancelled.",
    "requested": "Cancel requested: its worker stops it within one heartbeat.",
    "finished": "Not cancelled: the job had already finished.",
    "missing": "No such job.",
    "deleted": "Job deleted.",
    "not-deleted": "Not deleted: only finished jobs can be deleted.",
    "paused": "Paused.",
    "resumed": "Resumed.",
    "fired": "Extra fire enqueued: it runs now, beside the schedule's cadence.",
    "schedule-missing": "No such schedule in this namespace.",
    "kind-missing": "No such kind stored in this namespace.",
    "policy-set": "Policy changed: every worker of the namespace applies it within one heartbeat.",
    "policy-unchanged": "Nothing changed: every value was already the kind's.",
    "policy-reset": "Overrides dropped: the declared policy applies within one heartbeat.",
    "breaker-closed": "Breaker closed: the kind's jobs start again.",
    "breaker-not-open": "Not closed: the kind's breaker was not open.",
}
"""Messages shown after an action, by code (the redirect names the code, never text)."""


@dataclass
class Config:
    engine: AsyncEngine
    namespace: str
    read_only: bool
    keys: Keys
    title: str
    owns_engine: bool
    throttle: Throttle
    namespaces: frozenset[str] | None = None
    """The only namespaces this dashboard shows (None: any, through ``?ns=``)."""
    allowed_hosts: frozenset[str] = frozenset()
    """Host names the dashboard answers to (empty: any)."""
    env: Environment = field(repr=False, default_factory=Environment)


class ReadOnly(Exception):
    pass


# ---------------------------------------------------------------------------- factory


def acta_dashboard(
    database_url: str | None = None,
    *,
    engine: AsyncEngine | None = None,
    namespace: str | None = None,
    schema: str | None = None,
    read_only: bool = False,
    password: str | None = None,
    secret: bytes | str | None = None,
    title: str = "acta",
    namespaces: Iterable[str] | None = None,
    allowed_hosts: Iterable[str] | None = None,
    session_lifetime: float | None = None,
    settings: DashboardSettings | None = None,
) -> Starlette:
    """The dashboard as an ASGI app, to serve alone or mount in your own application::

        app.mount("/acta", acta_dashboard(engine=engine, namespace="default"))

    ``engine`` (an ``AsyncEngine``, yours) or ``database_url``; with neither, the
    settings' URL (``ACTA_DATABASE_URL``, else the embedded PostgreSQL). ``namespace`` and
    ``schema`` default to the settings'. ``read_only`` hides and refuses every action.
    ``password`` asks for it on a login page (or ``Authorization: Bearer``); ``secret``
    signs the CSRF and login tokens (give the same one to every process of a deployment;
    random per process otherwise); a login lasts ``session_lifetime`` seconds (8 h).
    ``namespaces`` pins the dashboard to those namespaces (``?ns=`` cannot leave them);
    ``allowed_hosts`` lists the ``Host`` names it answers to (others get 400).

    What is not passed comes from :class:`DashboardSettings` (``ACTA_DASHBOARD_*`` in the
    environment or ``.env``), or ``settings`` when given.
    """
    from ..database import create_engine
    from ..errors import ConfigurationError
    from ..settings import load_settings

    if settings is None:
        settings = DashboardSettings()
    if password is None and settings.password is not None:
        password = settings.password.get_secret_value()
    if secret is None and settings.secret is not None:
        secret = settings.secret.get_secret_value()
    lifetime = session_lifetime if session_lifetime is not None else settings.session_lifetime
    if not 0 < lifetime <= MAX_LIFETIME:
        raise ConfigurationError(
            f"session_lifetime must be from 0 to {MAX_LIFETIME:g} seconds, got {lifetime!r}"
        )
    pinned = tuple(namespaces) if namespaces is not None else settings.namespaces
    hosts = tuple(allowed_hosts) if allowed_hosts is not None else settings.allowed_hosts

    owns = engine is None
    if engine is None or namespace is None:
        acta_settings = load_settings(database_url=database_url, db_schema=schema)
        if namespace is None:
            fallback = acta_settings.namespace
            namespace = fallback if not pinned or fallback in pinned else pinned[0]
        if engine is None:
            from ..database import database_url as resolve_url

            engine = create_engine(resolve_url(acta_settings), acta_settings.db_schema)
    if pinned and namespace not in pinned:
        raise ConfigurationError(
            f"namespace {namespace!r} is not one of namespaces {list(pinned)!r}: "
            "the dashboard would open on a namespace it refuses to show"
        )
    config = Config(
        engine=engine,
        namespace=namespace,
        read_only=read_only,
        keys=Keys(secret, password, lifetime=lifetime),
        title=title,
        owns_engine=owns,
        throttle=Throttle(
            settings.login_failures_per_client,
            settings.login_failures_overall,
            settings.login_window,
        ),
        namespaces=frozenset(pinned) if pinned else None,
        allowed_hosts=frozenset(h.lower().strip("[]").rstrip(".") for h in hosts),
        env=_environment(),
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Runs when the dashboard is the server's app; a mounted one leaves the engine to
        # the process's end (Starlette does not run a mounted app's lifespan).
        yield
        if config.owns_engine:
            await config.engine.dispose()

    app = Starlette(
        routes=_routes(config), lifespan=lifespan, middleware=[Middleware(Guard, config=config)]
    )
    # Starlette's own trailing-slash redirect names the request's Host header in its
    # absolute Location (``Host: evil.example`` -> ``http://evil.example/jobs``).
    app.router.redirect_slashes = False
    app.router.default = _slash_redirect(app.router)
    app.state.acta = config
    return app


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        # Everything from the database (args, results, errors, kinds) is escaped: a job
        # whose args hold "<script>" shows it as text.
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["when_text"] = _when_text
    env.filters["pretty"] = _pretty
    env.filters["num"] = lambda n: f"{n:,}"
    return env


def _when(value: datetime | None) -> Markup:
    """Absolute (UTC, in the tooltip and the datetime attribute) and relative."""
    if value is None:
        return Markup("&ndash;")
    absolute = value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return Markup('<time datetime="{}" title="{}">{}</time>').format(
        value.isoformat(), absolute, _relative(value)
    )


def _when_text(value: Any) -> Markup | str:
    """A time stored as ISO text in a JSON field (a cancel's ``at``), as :func:`_when`."""
    try:
        return _when(datetime.fromisoformat(str(value)))
    except ValueError:
        return str(value)


def _relative(value: datetime) -> str:
    seconds = (datetime.now(UTC) - value).total_seconds()
    future = seconds < 0
    seconds = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            text = f"{int(seconds // size)} {unit}"
            break
    else:
        text = f"{int(seconds)} s"
    return f"in {text}" if future else f"{text} ago"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


# ---------------------------------------------------------------------------- plumbing


class Ctx:
    """One request's view: its config, session id, namespace, and URL building that
    works under a mount point."""

    def __init__(self, request: Request, config: Config) -> None:
        self.request = request
        self.config = config
        cookie_sid = request.cookies.get(SID_COOKIE)
        self.new_sid = cookie_sid is None
        self.sid = cookie_sid or new_sid()
        ns = request.query_params.get("ns")
        self.refused_namespace: str | None = None
        if ns and config.namespaces is not None and ns not in config.namespaces:
            # Pinned: shown nothing of it (the page says so, see ``page``).
            self.refused_namespace, ns = ns, None
        self.namespace = ns or config.namespace
        self.root = request.scope.get("root_path", "")

    def url(self, name: str, /, query: dict[str, Any] | None = None, **path: Any) -> str:
        params = {k: v for k, v in (query or {}).items() if v not in (None, "")}
        if self.namespace != self.config.namespace:
            params.setdefault("ns", self.namespace)
        return self.path(name, **path) + ("?" + urlencode(params) if params else "")

    def path(self, name: str, /, **path: Any) -> str:
        """The path of route ``name``, under the mount point. A name in a path (a lane, a
        key, a schedule, a kind) may hold any character: percent-encoded, "/" included,
        it stays one segment of the link, which the router decodes back (the routes that
        take such a name match it with ":path")."""
        if name != "static":
            path = {k: _segment(v) if isinstance(v, str) else v for k, v in path.items()}
        return self.root + str(self.request.app.url_path_for(name, **path))

    def here(self) -> str:
        """This request's path, built again from its route (Starlette's decoded
        ``request.url.path`` would turn a lane named "50%25" into one named "50%")."""
        route = self.request.scope.get("route")
        name = getattr(route, "name", None)
        if not name:
            return _segment(self.request.scope["path"], safe="/")
        return self.path(name, **self.request.path_params)

    def render(
        self,
        template: str,
        status_code: int = 200,
        headers: dict[str, str] | None = None,
        **values: Any,
    ) -> Response:
        values.setdefault("message", MESSAGES.get(self.request.query_params.get("msg", "")))
        body = self.config.env.get_template(template).render(
            ctx=self,
            nav=NAV,
            title=self.config.title,
            read_only=self.config.read_only,
            csrf=self.config.keys.csrf_token(self.sid),
            csrf_field=CSRF_FIELD,
            login_required=self.config.keys.password is not None,
            **values,
        )
        return self.finish(HTMLResponse(body, status_code=status_code, headers=headers))

    def finish(self, response: Response) -> Response:
        # The cookies live under the mount point only, so they never reach the host
        # application's other pages.
        if self.new_sid:
            self.set_cookie(response, SID_COOKIE, self.sid)
        response.headers.update(SECURITY_HEADERS)
        return response

    def set_cookie(self, response: Response, name: str, value: str) -> None:
        response.set_cookie(
            name,
            value,
            path=self.root or "/",
            httponly=True,
            samesite="strict",
            secure=self.request.url.scheme == "https",
        )

    def redirect(self, url: str) -> Response:
        return self.finish(RedirectResponse(url, status_code=303))


def _segment(value: str, safe: str = "") -> str:
    """``value`` percent-encoded for a URL path; ":" and "@" stay readable."""
    return quote(value, safe=safe + ":@")


SECURITY_HEADERS = {
    # No inline script or style can run: an escaping mistake still could not execute.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _plain(status: int, text: str, **headers: str) -> Response:
    return PlainTextResponse(text + "\n", status, headers={**SECURITY_HEADERS, **headers})


class Guard:
    """What every request meets before any route (and before the login): its ``Host``
    header is one this dashboard answers to (DNS rebinding: a page of ``evil.example``,
    which resolves to 127.0.0.1, makes the browser send ``Host: evil.example``), and its
    body is bounded: a ``Content-Length`` over ``MAX_BODY_BYTES`` is answered 413 without
    reading a byte; a body without one (chunked) is read only up to that bound; a body that
    is not a URL-encoded form (the dashboard's only kind) is 415, one of more than
    ``MAX_FORM_FIELDS`` fields 413. The body read is then handed to the app."""

    def __init__(self, app: ASGIApp, config: Config) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        allowed = self.config.allowed_hosts
        if allowed and not host_allowed(host, allowed):
            _log("WARNING", "refused a request for host {}: not in the allowed hosts", host)
            refused = _plain(
                400,
                f"Host {host_of(host)!r} is not a name this dashboard answers to "
                "(ACTA_DASHBOARD_ALLOWED_HOSTS, or allowed_hosts=, lists them).",
            )
            await refused(scope, receive, send)
            return
        length = headers.get("content-length")
        if length is not None and not length.isdigit():
            await _plain(400, "Content-Length is not a number.")(scope, receive, send)
            return
        if length is not None and int(length) > MAX_BODY_BYTES:
            await self._too_large(scope, receive, send)
            return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > MAX_BODY_BYTES:
                await self._too_large(scope, receive, send)
                return
        if body:
            kind = headers.get("content-type", "").partition(";")[0].strip().lower()
            if kind != "application/x-www-form-urlencoded":
                answer = _plain(415, "The dashboard takes URL-encoded forms only.")
                await answer(scope, receive, send)
                return
            if body.count(b"&") + 1 > MAX_FORM_FIELDS:
                answer = _plain(413, f"A form has at most {MAX_FORM_FIELDS} fields.")
                await answer(scope, receive, send)
                return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer = _plain(
            413,
            f"Request body too large: the dashboard takes at most {MAX_BODY_BYTES:,} bytes.",
            connection="close",
        )
        await answer(scope, receive, send)


def _slash_redirect(router: Router) -> ASGIApp:
    """``/jobs/`` -> ``/jobs`` as Starlette's own redirect, with a Location that names no
    host (the path as the client sent it, under the mount point); else 404."""
    fallback = router.not_found

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        root = scope.get("root_path", "")
        path = scope["path"]
        route_path = path[len(root) :] if root and path.startswith(root) else path
        if scope["type"] == "http" and route_path.endswith("/") and route_path != "/":
            stripped = {**scope, "path": path.rstrip("/")}
            if any(r.matches(stripped)[0] is not Match.NONE for r in router.routes):
                raw = scope.get("raw_path") or path.encode()
                target = raw.decode("latin-1").rstrip("/")
                # Never a protocol-relative "//host" (nor "/\\host", which browsers read
                # alike).
                target = "/" + target.lstrip("/\\")
                query = scope.get("query_string", b"").decode("latin-1")
                location = target + ("?" + query if query else "")
                response = Response(
                    status_code=307, headers={"location": location, **SECURITY_HEADERS}
                )
                await response(scope, receive, send)
                return
        await fallback(scope, receive, send)

    return app


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _clean(value: object) -> str:
    """``value`` as a log field: a control character (a newline in a kind or schedule
    name could forge a log line) written as its ``\\xNN`` / ``\\uNNNN`` escape."""
    text = str(value)
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def _log(level: str, message: str, *fields: object) -> None:
    """Log under stage "dashboard", every field escaped by :func:`_clean`."""
    log.opt(depth=1).log(level, message, *(_clean(f) for f in fields))


TOO_LONG_ID = -1
"""What ``IdConvertor`` reads a path id of more than ``ID_DIGITS`` digits as."""
ID_DIGITS = 40


class IdConvertor(Convertor[int]):
    """A job id in a path: digits. One of very many digits (``/jobs/`` and 5,000 of them:
    ``int()`` refuses it with a ValueError, a 500 before the login) reads as
    ``TOO_LONG_ID``, which no job has: a 404."""

    regex = "[0-9]+"

    def convert(self, value: str) -> int:
        digits = value.lstrip("0") or "0"
        return int(digits) if len(digits) <= ID_DIGITS else TOO_LONG_ID

    def to_string(self, value: int) -> str:
        return str(int(value))


_DOTS = re.compile(r"~*\.\.?")


class NameConvertor(Convertor[str]):
    """A name in a path (a lane, a key, a schedule, a kind), any characters, "/"
    included (percent-encoded). A name that is exactly "." or ".." cannot be a path
    segment: browsers and HTTP clients remove it (``/lanes/..`` is ``/``, and so are
    ``%2e%2e``). Such a segment is written with a leading "~" ("~.", "~.."), and a name
    made of tildes before those dots gets one tilde more ("~." is written "~~."), so that
    every name has exactly one path. A newline is a character like any other (the
    ``path`` convertor's ``.*`` stopped at one: such a schedule's buttons were a 404)."""

    regex = "(?s:.*)"

    def convert(self, value: str) -> str:
        return value[1:] if _DOTS.fullmatch(value) and value.startswith("~") else value

    def to_string(self, value: str) -> str:
        return "~" + value if _DOTS.fullmatch(value) else value


register_url_convertor("acta_id", IdConvertor())
register_url_convertor("acta_name", NameConvertor())


Handler = Callable[[Ctx, AsyncSession], Awaitable[Response]]


def _bearer(ctx: Ctx) -> str | None:
    header = ctx.request.headers.get("authorization", "")
    return header[7:] if header.lower().startswith("bearer ") else None


def _session_ok(ctx: Ctx) -> bool:
    keys = ctx.config.keys
    return keys.session_ok(None if ctx.new_sid else ctx.sid, ctx.request.cookies.get(AUTH_COOKIE))


async def _login_refused(ctx: Ctx, *, action: bool) -> Response | None:
    """None when the request may go on (no password, a valid login cookie, or the right
    ``Authorization: Bearer``); else the answer: the login page, 401 for an action, or
    429 while failed passwords are over a limit."""
    keys = ctx.config.keys
    if keys.password is None:
        return None
    bearer = _bearer(ctx)
    if bearer is not None:
        throttled = _throttled(ctx)
        if throttled is not None:
            return throttled
        if keys.bearer_ok(bearer):
            return None
        # A wrong password is a wrong password, from the login form or a script's
        # header: both are counted and wait before the answer.
        ctx.config.throttle.failed(_client(ctx))
        _log("WARNING", "failed bearer password from {}", _client(ctx))
        await asyncio.sleep(FAILED_LOGIN_DELAY)
    if _session_ok(ctx):
        return None
    if action:
        return ctx.render("error.html", 401, error="Log in first.")
    return ctx.redirect(ctx.url("login", query={"next": ctx.here()}))


def _throttled(ctx: Ctx) -> Response | None:
    """The 429 answer while failed passwords are over a limit (the same answer for either
    limit; the log names which), else None."""
    throttle = ctx.config.throttle
    limit = throttle.refused(_client(ctx))
    if limit is None:
        return None
    _log("WARNING", "refused a password from {}: {} (the limit)", _client(ctx), limit)
    wait = throttle.retry_after()
    return ctx.render(
        "login.html" if ctx.request.url.path.endswith("/login") else "error.html",
        429,
        headers={"Retry-After": str(wait)},
        error=f"Too many failed logins: try again in {wait} s.",
    )


def _nul_in(ctx: Ctx, form: FormData | None) -> str | None:
    """The first parameter (query, path or form) holding a NUL character, which no name,
    filter or text of PostgreSQL can hold; None if none does."""
    places: list[tuple[str, object]] = [*ctx.request.query_params.multi_items()]
    places += ctx.request.path_params.items()
    if form is not None:
        places += form.multi_items()
    for name, value in places:
        if (isinstance(value, str) and "\x00" in value) or "\x00" in name:
            return name
    return None


async def _form(request: Request) -> FormData:
    """The request's form (its size and field count were bounded by ``Guard``)."""
    return await request.form(max_files=0, max_fields=MAX_FORM_FIELDS)


def _same_origin(request: Request) -> bool:
    """A browser names the page that sent a POST in ``Origin``; it must be this host."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    host = request.headers.get("host", "")
    return origin.split("://", 1)[-1] == host


def page(config: Config, handler: Handler, *, action: bool = False) -> Any:
    """Wrap a handler: login, CSRF (for actions), one session with a statement timeout,
    database errors shown as a page."""

    async def endpoint(request: Request) -> Response:
        ctx = Ctx(request, config)
        refused = await _login_refused(ctx, action=action)
        if refused is not None:
            return refused
        form = None
        if action:
            form = await _form(request)
            ctx.form = form  # type: ignore[attr-defined]
            if ctx.new_sid or not _same_origin(request):
                return _csrf_refused(ctx)
            if not config.keys.csrf_ok(ctx.sid, form.get(CSRF_FIELD)):
                return _csrf_refused(ctx)
            if config.read_only:
                return ctx.render("error.html", 403, error="This dashboard is read-only.")
        nul = _nul_in(ctx, form)
        if nul is not None:
            raise BadInput(
                f"{nul} holds a NUL character (\\x00), which no name, filter or text in "
                "acta can hold: remove it"
            )
        if ctx.refused_namespace is not None:
            return ctx.render(
                "error.html",
                404,
                error=f"Namespace {ctx.refused_namespace!r} is not shown by this dashboard.",
            )
        try:
            async with AsyncSession(config.engine, expire_on_commit=False) as session:
                await session.execute(
                    select(func.set_config("statement_timeout", str(STATEMENT_TIMEOUT_MS), True))
                )
                response = await handler(ctx, session)
                await session.commit()
                return response
        except _database_errors() as exc:
            _log("WARNING", "{} {}: {}", request.method, request.url.path, _describe(exc))
            return ctx.render("error.html", 503, error=f"Database error: {_describe(exc)}")
        except ActaError as exc:
            # acta refused what was asked (e.g. a retry while another job holds the unique
            # key): its message says why and what to do; the transaction was rolled back.
            _log("WARNING", "{} {}: {}", request.method, request.url.path, exc)
            return ctx.render("error.html", 409, error=str(exc))

    return endpoint


def _csrf_refused(ctx: Ctx) -> Response:
    _log(
        "WARNING",
        "refused {} {} from {}: CSRF check failed",
        ctx.request.method,
        ctx.request.url.path,
        _client(ctx),
    )
    return ctx.render(
        "error.html",
        403,
        error="CSRF check failed: this request did not come from this dashboard's own "
        "page. Reload the page and try again.",
    )


def _database_errors() -> tuple[type[BaseException], ...]:
    from sqlalchemy import exc as sa_exc

    return (sa_exc.DBAPIError, OSError, DatabaseUnavailable, StoreUnavailable)


def _describe(exc: BaseException) -> str:
    from ..errors import describe_error

    return describe_error(exc)


def _client(ctx: Ctx) -> str:
    client = ctx.request.client
    return client.host if client else "?"


def _int(value: Any, what: str) -> int | None:
    """A job id typed in a box or carried in a link: 1 to ``MAX_ID``, else ``BadInput``."""
    if value in (None, ""):
        return None
    text = str(value).strip()
    try:
        number: int | None = int(text)
    except ValueError:
        if not text.lstrip("+-").isdecimal():
            raise BadInput(f"{what} must be a whole number, got {value!r}") from None
        number = None  # more digits than int() takes: far beyond any id
    if number is None or not 1 <= number <= MAX_ID:
        raise BadInput(f"{what} must be a job id from 1 to {MAX_ID}, got {value!r}")
    return number


def _path_id(ctx: Ctx) -> int | None:
    """The job id of the path (digits, the route's ``IdConvertor`` says); None when no
    job can have it."""
    job_id = int(ctx.request.path_params["job_id"])
    return job_id if 1 <= job_id <= MAX_ID else None


def _no_job(ctx: Ctx) -> Response:
    job_id = ctx.request.path_params["job_id"]
    if job_id == TOO_LONG_ID:
        error = f"No job with an id of more than {ID_DIGITS} digits (the largest is {MAX_ID})."
    else:
        error = f"No job with id {job_id}."
    return ctx.render("error.html", 404, error=error)


def _status(value: Any) -> JobStatus | None:
    if value in (None, ""):
        return None
    try:
        return JobStatus(value)
    except ValueError:
        allowed = ", ".join(s.value for s in JobStatus)
        raise BadInput(f"status must be one of {allowed}; got {value!r}") from None


class BadInput(Exception):
    pass


def _routes(config: Config) -> list[Any]:
    def get(path: str, handler: Handler, name: str) -> Route:
        return Route(path, _bad_input(page(config, handler)), methods=["GET"], name=name)

    def post(path: str, handler: Handler, name: str) -> Route:
        return Route(
            path, _bad_input(page(config, handler, action=True)), methods=["POST"], name=name
        )

    return [
        get("/", overview, "overview"),
        get("/jobs", jobs, "jobs"),
        post("/jobs/bulk", jobs_bulk, "jobs_bulk"),
        get("/jobs/{job_id:acta_id}", job, "job"),
        post("/jobs/{job_id:acta_id}/{op:str}", job_action, "job_action"),
        get("/scheduled", scheduled, "scheduled"),
        get("/retrying", retrying, "retrying"),
        get("/failures", failures, "failures"),
        post("/failures/{op:str}", failures_action, "failures_action"),
        get("/workers", workers, "workers"),
        get("/locks", locks, "locks"),
        get("/lanes", lanes, "lanes"),
        get("/lanes/{lane:acta_name}", lane, "lane"),
        get("/keys", keys, "keys"),
        get("/keys/{key:acta_name}", key, "key"),
        get("/schedules", schedules, "schedules"),
        post("/schedules/{name:acta_name}/{op:str}", schedule_action, "schedule_action"),
        get("/definitions", definitions, "definitions"),
        get("/definitions/{kind:acta_name}", definition, "definition"),
        post("/definitions/{kind:acta_name}/{op:str}", definition_action, "definition_action"),
        Route("/favicon.ico", _favicon, methods=["GET"], name="favicon"),
        Route("/login", _login(config), methods=["GET", "POST"], name="login"),
        Route("/logout", _logout(config), methods=["POST"], name="logout"),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]


FAVICON = HERE / "static" / "favicon.svg"


async def _favicon(request: Request) -> Response:
    """The icon at the path a browser asks for when a page names none (each page names
    ``static/favicon.svg``; this answers ``/favicon.ico``, which was a 404 on every page)."""
    return Response(
        FAVICON.read_bytes(),
        media_type="image/svg+xml",
        headers={**SECURITY_HEADERS, "Cache-Control": "public, max-age=86400"},
    )


def _bad_input(endpoint: Callable[[Request], Awaitable[Response]]) -> Any:
    async def wrapped(request: Request) -> Response:
        try:
            return await endpoint(request)
        except BadInput as exc:
            ctx = Ctx(request, request.app.state.acta)
            return ctx.render("error.html", 400, error=str(exc))

    return wrapped


# ---------------------------------------------------------------------------- pages


def _chart_window(ctx: Ctx) -> str:
    window = ctx.request.query_params.get("chart") or "1h"
    if window not in CHART_WINDOWS:
        raise BadInput(f"chart must be one of {', '.join(CHART_WINDOWS)}; got {window[:40]!r}")
    return window


async def _charts(
    ctx: Ctx, session: AsyncSession, window: str, kind: str | None = None
) -> list[tuple[str, Markup]]:
    from .charts import charts

    seconds, step = CHART_WINDOWS[window]
    series = await inspect.history(session, ctx.namespace, seconds=seconds, step=step, kind=kind)
    return charts(series)


async def overview(ctx: Ctx, session: AsyncSession) -> Response:
    window = _chart_window(ctx)
    view = await inspect.overview(session, ctx.namespace)
    pinned = ctx.config.namespaces
    names = sorted(pinned) if pinned is not None else await inspect.namespaces(session)
    return ctx.render(
        "overview.html",
        view=view,
        namespaces=names,
        statuses=list(JobStatus),
        active_statuses=(JobStatus.READY, JobStatus.EXECUTING),
        terminal_statuses=TERMINAL_STATUSES,
        charts=await _charts(ctx, session, window),
        chart_window=window,
        chart_windows=list(CHART_WINDOWS),
        chart_url=lambda w: ctx.url("overview", query={"chart": w}),
        live=True,
    )


def _filters(ctx: Ctx) -> dict[str, Any]:
    q = ctx.request.query_params
    return {
        "status": _status(q.get("status")),
        "kind": q.get("kind") or None,
        "text": q.get("q") or None,
        "before": _int(q.get("before"), "before"),
    }


async def jobs(ctx: Ctx, session: AsyncSession) -> Response:
    query = ctx.request.query_params
    wanted = _int(query.get("id"), "id")
    if wanted is not None:
        return ctx.redirect(ctx.url("job", job_id=wanted))
    f = _filters(ctx)
    ns = ctx.namespace
    if f["text"]:
        found = await inspect.search_jobs(
            session,
            namespace=ns,
            text=f["text"],
            status=f["status"],
            kind=f["kind"],
            before_id=f["before"],
            limit=PAGE_SIZE,
        )
        rows, next_before, searched_to = found.jobs, found.next_before_id, found.floor_id
    else:
        listed = await inspect.list_jobs(
            session,
            namespace=ns,
            status=f["status"],
            kind=f["kind"],
            before_id=f["before"],
            limit=PAGE_SIZE,
        )
        rows, next_before, searched_to = listed.jobs, listed.next_before_id, None
    counts = {s: await inspect.count_jobs(session, ns, s, f["kind"]) for s in JobStatus}
    keep = {"status": f["status"], "kind": f["kind"], "q": f["text"]}
    budgets = await inspect.attempt_budgets(session, ns)
    return ctx.render(
        "jobs.html",
        jobs=rows,
        budget_of=lambda j: inspect.budget_of(j, budgets),
        filters=f,
        counts=counts,
        total=await inspect.count_jobs(session, ns, f["status"], f["kind"]),
        exact_up_to=inspect.EXACT_UP_TO,
        next_url=ctx.url("jobs", query={**keep, "before": next_before}) if next_before else None,
        first_url=ctx.url("jobs", query=keep) if f["before"] else None,
        status_url=lambda s: ctx.url("jobs", query={**keep, "status": s, "before": None}),
        searched_to=searched_to,
        statuses=list(JobStatus),
        can_cancel=f["status"] in (None, *ACTIVE_STATUSES) and not f["text"],
        can_finish_ops=f["status"] in TERMINAL_STATUSES and not f["text"],
        live=False,
    )


async def job(ctx: Ctx, session: AsyncSession) -> Response:
    job_id = _path_id(ctx)
    if job_id is None:
        return _no_job(ctx)
    detail = await inspect.job_detail(session, job_id)
    if detail is None:
        return _no_job(ctx)
    traceback = None
    if detail.status == JobStatus.FAILED or detail.last_error:
        traceback = await inspect.last_traceback(session, job_id)
    budgets = await inspect.attempt_budgets(session, detail.namespace)
    return ctx.render(
        "job.html",
        job=detail,
        budget=inspect.budget_of(detail, budgets),
        traceback=traceback,
        finished=detail.status in TERMINAL_STATUSES,
        live=detail.status not in TERMINAL_STATUSES,
    )


async def scheduled(ctx: Ctx, session: AsyncSession) -> Response:
    return await _due_later(ctx, session, retrying=False)


async def retrying(ctx: Ctx, session: AsyncSession) -> Response:
    return await _due_later(ctx, session, retrying=True)


def _after(ctx: Ctx) -> tuple[datetime, int] | None:
    """The keyset of a Scheduled or Retrying page: ``after_at`` (ISO time) and
    ``after_id``, both or neither."""
    query = ctx.request.query_params
    at, after_id = query.get("after_at"), _int(query.get("after_id"), "after_id")
    if not at and after_id is None:
        return None
    if not at or after_id is None:
        raise BadInput("after_at and after_id go together: give both or neither")
    try:
        when = datetime.fromisoformat(at)
    except ValueError:
        raise BadInput(f"after_at must be an ISO 8601 time, got {at[:40]!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when, after_id


async def _due_later(ctx: Ctx, session: AsyncSession, *, retrying: bool) -> Response:
    after = _after(ctx)
    name = "retrying" if retrying else "scheduled"
    due = await inspect.due_later(
        session, ctx.namespace, retrying=retrying, after=after, limit=PAGE_SIZE
    )
    budgets = await inspect.attempt_budgets(session, ctx.namespace)
    next_url = None
    if due.next_after is not None:
        at, last_id = due.next_after
        next_url = ctx.url(name, query={"after_at": at.isoformat(), "after_id": last_id})
    return ctx.render(
        "due.html",
        retrying=retrying,
        due=due,
        budget_of=lambda j: inspect.budget_of(j, budgets),
        next_url=next_url,
        first_url=ctx.url(name) if after else None,
        live=True,
    )


async def failures(ctx: Ctx, session: AsyncSession) -> Response:
    window = ctx.request.query_params.get("window") or "24h"
    if window not in WINDOWS:
        raise BadInput(f"window must be one of {', '.join(WINDOWS)}; got {window!r}")
    groups = await inspect.failure_groups(session, ctx.namespace, WINDOWS[window])
    return ctx.render(
        "failures.html", groups=groups, window=window, windows=list(WINDOWS), batch=BATCH
    )


async def workers(ctx: Ctx, session: AsyncSession) -> Response:
    rows = await inspect.workers(session, ctx.namespace, limit=100)
    flying = await inspect.in_flight(session, ctx.namespace)
    return ctx.render("workers.html", workers=rows, in_flight=flying, live=True)


async def locks(ctx: Ctx, session: AsyncSession) -> Response:
    rows = await inspect.locks(session, ctx.namespace)
    return ctx.render("locks.html", locks=rows, live=True)


async def lanes(ctx: Ctx, session: AsyncSession) -> Response:
    rows = await inspect.lanes(session, ctx.namespace)
    return ctx.render("lanes.html", lanes=rows, live=True)


async def _paused(session: AsyncSession, namespace: str) -> set[str]:
    return {
        d.kind for d in await inspect.definitions(session, namespace) if d.effective.get("paused")
    }


async def lane(ctx: Ctx, session: AsyncSession) -> Response:
    key = ctx.request.path_params["lane"]
    rows = await inspect.lane(session, ctx.namespace, key)
    if not rows:
        return ctx.render(
            "error.html", 404, error=f"Lane {key!r} has no unfinished job in {ctx.namespace!r}."
        )
    head = rows[0]
    waits_on = inspect.head_waits_on(head, head.kind in await _paused(session, ctx.namespace))
    return ctx.render("lane.html", lane=key, jobs=rows, head=head, waits_on=waits_on, live=True)


async def keys(ctx: Ctx, session: AsyncSession) -> Response:
    rows = await inspect.concurrency_keys(session, ctx.namespace)
    return ctx.render("keys.html", keys=rows, live=True)


async def key(ctx: Ctx, session: AsyncSession) -> Response:
    name = ctx.request.path_params["key"]
    detail = await inspect.concurrency_key(session, ctx.namespace, name)
    if not detail.slots and not detail.jobs:
        return ctx.render(
            "error.html", 404, error=f"Key {name!r} has no slot held and no unfinished job."
        )
    return ctx.render("key.html", key=detail, live=True)


async def schedules(ctx: Ctx, session: AsyncSession) -> Response:
    rows = await inspect.schedules(session, ctx.namespace)
    return ctx.render("schedules.html", schedules=rows, live=True)


async def definitions(ctx: Ctx, session: AsyncSession) -> Response:
    from .. import breakers as _breakers
    from ..policy import OVERRIDABLE

    rows = await inspect.definitions(session, ctx.namespace)
    rates = await inspect.kind_rates(session, ctx.namespace, RATE_SECONDS)
    states = await session.run_sync(lambda s: _breakers.breakers(s, ctx.namespace))
    return ctx.render(
        "definitions.html",
        kinds=rows,
        fields=OVERRIDABLE,
        rates=rates,
        rate_minutes=int(RATE_SECONDS // 60),
        breakers=states,
        live=True,
    )


EDITABLE = ("concurrency_limit", "rate", "timeout", "paused")
"""The fields a kind's page edits (the rest: ``acta definitions set``)."""
CLEARABLE = ("concurrency_limit", "rate")
"""Fields an empty box sets to "none" (no limit)."""


def _effective_text(row: inspect.DefinitionRow, name: str) -> str:
    """A kind's effective value of ``name`` as its box shows it (a field its stored policy
    lacks: the policy's default)."""
    from ..policy import Policy

    if name in row.effective:
        return _as_text(row.effective[name])
    return _as_text(getattr(Policy(), name))


def _as_text(value: Any) -> str:
    """A policy value as its box shows it (and as ``acta definitions set`` takes it)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


async def definition(
    ctx: Ctx,
    session: AsyncSession,
    *,
    error: str | None = None,
    submitted: dict[str, str] | None = None,
) -> Response:
    from ..policy import OVERRIDABLE

    kind = ctx.request.path_params["kind"]
    found = [d for d in await inspect.definitions(session, ctx.namespace) if d.kind == kind]
    if not found:
        return ctx.render(
            "error.html", 404, error=f"No kind {kind!r} stored in namespace {ctx.namespace!r}."
        )
    row = found[0]
    window = _chart_window(ctx)
    rates = await inspect.kind_rates(session, ctx.namespace, RATE_SECONDS)
    values = {name: _effective_text(row, name) for name in EDITABLE}
    values.update(submitted or {})
    return ctx.render(
        "kind.html",
        400 if error else 200,
        kind=row,
        fields=OVERRIDABLE,
        editable=EDITABLE,
        values=values,
        error=error,
        rate=rates.get(kind),
        rate_minutes=int(RATE_SECONDS // 60),
        charts=await _charts(ctx, session, window, kind),
        chart_window=window,
        chart_windows=list(CHART_WINDOWS),
        chart_url=lambda w: ctx.url("definition", kind=kind, query={"chart": w}),
        # Not refreshed: a refresh would wipe what the operator is typing into the form.
        live=False,
    )


# ---------------------------------------------------------------------------- actions


def _who(ctx: Ctx) -> str:
    """Who acts, as a cancel records it: the user the host application authenticated
    (Starlette's ``request.user``, when a mounted dashboard sits behind its
    AuthenticationMiddleware), else "dashboard"."""
    user = ctx.request.scope.get("user")  # "alice (dashboard)"
    name = getattr(user, "display_name", "") if getattr(user, "is_authenticated", False) else ""
    if isinstance(name, str) and name.strip() and "\x00" not in name:
        return name.strip()[: MAX_CANCEL_BY - len(" (dashboard)")] + " (dashboard)"
    return "dashboard"


def _reason(ctx: Ctx) -> str | None:
    """A cancel form's reason, checked as ``acta.cancel`` checks it (a 400 naming the
    field, before the database)."""
    from ..session import MAX_CANCEL_REASON, cancel_note

    value = ctx.form.get("reason")  # type: ignore[attr-defined]
    try:
        return cancel_note("reason", value, MAX_CANCEL_REASON)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def _confirmed(ctx: Ctx) -> bool:
    return ctx.form.get("confirmed") == "1"  # type: ignore[attr-defined]


def _confirm(ctx: Ctx, question: str, button: str, back: str) -> Response:
    """The confirmation step of every action, without JavaScript: the same form again,
    with confirmed=1. (With JavaScript, the page asks in a dialog and skips this.)"""
    fields = {
        k: v
        for k, v in ctx.form.items()  # type: ignore[attr-defined]
        if k not in (CSRF_FIELD, "confirmed") and isinstance(v, str)
    }
    return ctx.render(
        "confirm.html",
        question=question,
        button=button,
        action=ctx.here(),
        query=ctx.request.url.query,
        fields=fields,
        back=back,
    )


async def job_action(ctx: Ctx, session: AsyncSession) -> Response:
    job_id = _path_id(ctx)
    if job_id is None:
        return _no_job(ctx)
    op = ctx.request.path_params["op"]
    back = ctx.url("job", job_id=job_id)
    if op not in ("retry", "cancel", "delete"):
        raise BadInput(f"unknown action {op!r}: retry, cancel or delete")
    if not _confirmed(ctx):
        return _confirm(ctx, f"{op.capitalize()} job #{job_id}?", op.capitalize(), back)
    if op == "retry":
        code = "retried" if await actions.retry(session, job_id) else "not-retried"
    elif op == "cancel":
        code = await actions.cancel(session, job_id, by=_who(ctx), reason=_reason(ctx))
    else:
        code = "deleted" if await actions.delete_finished(session, [job_id]) else "not-deleted"
        if code == "deleted":
            back = ctx.url("jobs")
    _log("INFO", "{} job {} from {}: {}", op, job_id, _client(ctx), code)
    return ctx.redirect(back + ("&" if "?" in back else "?") + urlencode({"msg": code}))


async def schedule_action(ctx: Ctx, session: AsyncSession) -> Response:
    name = ctx.request.path_params["name"]
    op = ctx.request.path_params["op"]
    back = ctx.url("schedules")
    if op not in ("pause", "resume", "run"):
        raise BadInput(f"unknown action {op!r}: pause, resume or run")
    if not _confirmed(ctx):
        return _confirm(ctx, f"{op.capitalize()} schedule {name!r}?", op.capitalize(), back)
    code = await actions.schedule(session, ctx.namespace, name, op)
    _log("INFO", "{} schedule {} in {} from {}: {}", op, name, ctx.namespace, _client(ctx), code)
    return ctx.redirect(back + ("&" if "?" in back else "?") + urlencode({"msg": code}))


async def definition_action(ctx: Ctx, session: AsyncSession) -> Response:
    kind = ctx.request.path_params["kind"]
    op = ctx.request.path_params["op"]
    if op == "set":
        return await _set_policy(ctx, session, kind)
    if op == "reset":
        return await _reset_policy(ctx, session, kind)
    back = ctx.url("definitions")
    if op not in ("pause", "resume", "close-breaker"):
        raise BadInput(f"unknown action {op!r}: pause, resume, close-breaker, set or reset")
    if not _confirmed(ctx):
        label = "Close the breaker of" if op == "close-breaker" else op.capitalize()
        return _confirm(ctx, f"{label} kind {kind!r}?", label.split()[0], back)
    by = f"{_client(ctx)} (dashboard)"
    code = await actions.kind(session, ctx.namespace, kind, op, by)
    _log("INFO", "{} kind {} in {} from {}: {}", op, kind, ctx.namespace, _client(ctx), code)
    return ctx.redirect(back + ("&" if "?" in back else "?") + urlencode({"msg": code}))


async def _set_policy(ctx: Ctx, session: AsyncSession, kind: str) -> Response:
    """A kind's limits edited on its page: the fields whose box changed, checked and
    written by the very call ``acta definitions set`` makes; a refusal shows the page
    again with the message (naming the field) and the values as typed."""
    from ..errors import ConfigurationError

    form = ctx.form  # type: ignore[attr-defined]
    back = ctx.url("definition", kind=kind)
    found = [d for d in await inspect.definitions(session, ctx.namespace) if d.kind == kind]
    if not found:
        return ctx.redirect(ctx.url("definitions", query={"msg": "kind-missing"}))
    submitted: dict[str, str] = {}
    changes: dict[str, str] = {}
    for name in EDITABLE:
        value = form.get(name)
        if value is None:
            continue  # not sent: left as it is
        if not isinstance(value, str):
            raise BadInput(f"{name} must be text")
        submitted[name] = value
        text = value.strip()
        if text == _effective_text(found[0], name):
            continue
        changes[name] = "none" if text == "" and name in CLEARABLE else text
    if not changes:
        return ctx.redirect(back + ("&" if "?" in back else "?") + "msg=policy-unchanged")
    said = ", ".join(f"{k}={v}" for k, v in changes.items())
    if not _confirmed(ctx):
        return _confirm(ctx, f"Set {said} of kind {kind!r}?", "Set", back)
    try:
        stored = await actions.set_policy(session, ctx.namespace, kind, changes)
    except ConfigurationError as exc:
        _log(
            "WARNING",
            "set kind {} in {} from {}: refused: {}",
            kind,
            ctx.namespace,
            _client(ctx),
            exc,
        )
        return await definition(ctx, session, error=str(exc), submitted=submitted)
    _log(
        "INFO",
        "set kind {} in {} from {}: {} (overrides now {})",
        kind,
        ctx.namespace,
        _client(ctx),
        said,
        json.dumps(stored, sort_keys=True),
    )
    return ctx.redirect(back + ("&" if "?" in back else "?") + "msg=policy-set")


async def _reset_policy(ctx: Ctx, session: AsyncSession, kind: str) -> Response:
    back = ctx.url("definition", kind=kind)
    if not _confirmed(ctx):
        return _confirm(ctx, f"Drop every override of kind {kind!r}?", "Reset", back)
    from ..errors import ConfigurationError

    try:
        await actions.reset_policy(session, ctx.namespace, kind)
    except ConfigurationError:
        return ctx.redirect(ctx.url("definitions", query={"msg": "kind-missing"}))
    _log("INFO", "reset kind {} in {} from {}", kind, ctx.namespace, _client(ctx))
    return ctx.redirect(back + ("&" if "?" in back else "?") + "msg=policy-reset")


async def jobs_bulk(ctx: Ctx, session: AsyncSession) -> Response:
    form = ctx.form  # type: ignore[attr-defined]
    op = form.get("op")
    status = _status(form.get("status"))
    kind = form.get("kind") or None
    keep = {"status": status, "kind": kind}
    back = ctx.url("jobs", query=keep)
    if op == "cancel":
        if status not in (None, *ACTIVE_STATUSES):
            raise BadInput(f"cancel applies to ready, executing or waiting jobs, not {status}")
    elif op in ("retry", "delete"):
        if status not in TERMINAL_STATUSES:
            raise BadInput(f"{op} applies to finished jobs: filter by a finished status first")
    else:
        raise BadInput(f"unknown action {op!r}: retry, cancel or delete")
    what = f"{status.value if status else 'active'} jobs" + (f" of kind {kind!r}" if kind else "")
    if not _confirmed(ctx):
        count = await inspect.count_jobs(session, ctx.namespace, status, kind)
        how_many = f"{count.value:,}" if count.exact else f"about {count.value:,}, estimated"
        question = (
            f"{op.capitalize()} the {what} in namespace {ctx.namespace!r} "
            f"({how_many}; at most {BATCH:,} per click)?"
        )
        return _confirm(ctx, question, f"{op.capitalize()} them", back)
    more: dict[str, Any] | None = None
    if op == "retry":
        assert status is not None

        async def older(before: int | None) -> list[int]:
            listed = await inspect.list_jobs(
                session,
                namespace=ctx.namespace,
                status=status,
                kind=kind,
                before_id=before,
                limit=BATCH,
            )
            return [j.id for j in listed.jobs]

        start = _int(form.get("before"), "before")
        done, held, examined, stopped_at = await _retry_scan(session, older, start)
        if stopped_at is not None:
            fields = {"op": op, "status": status.value, "kind": kind or "", "before": stopped_at}
            more = {"action": ctx.url("jobs_bulk"), "fields": fields}
    else:
        statuses = [status] if status else [JobStatus.READY, JobStatus.EXECUTING, JobStatus.WAITING]
        ids: list[int] = []
        for s in statuses:
            page_ = await inspect.list_jobs(
                session, namespace=ctx.namespace, status=s, kind=kind, limit=BATCH - len(ids)
            )
            ids += [j.id for j in page_.jobs]
            if len(ids) >= BATCH:
                break
        done, held = await _apply(session, op, ids, _who(ctx), _reason(ctx))
        examined = len(ids)
    _log(
        "INFO",
        "{} {} in {} from {}: {} of {}{}",
        op,
        what,
        ctx.namespace,
        _client(ctx),
        done,
        examined,
        f", {len(held)} skipped (unique key held)" if held else "",
    )
    summary = f"{op.capitalize()}: {done:,} of {examined:,} {what}.{_skipped(held)}"
    if more is not None:
        summary += f" Stopped after {examined:,} jobs (at most {BATCH:,} retried and {SCAN:,} "
        summary += "examined per click): continue with the older ones below."
    return ctx.render("done.html", summary=summary, back=back, more=more)


async def _retry_scan(
    session: AsyncSession,
    older: Callable[[int | None], Awaitable[list[int]]],
    before: int | None = None,
) -> tuple[int, list[UniqueKeyHeld], int, int | None]:
    """Retry jobs newest first, page after page of ``older(before)``, going on past those
    skipped because another job holds their unique key (the 1,000 newest all held used to
    stop every click there), until ``BATCH`` are retried or ``SCAN`` examined. Returns
    (retried, skipped, examined, the id to continue below; None when no job is left)."""
    done = 0
    held: list[UniqueKeyHeld] = []
    examined = 0
    while True:
        ids = await older(before)
        if not ids:
            return done, held, examined, None
        for job_id in ids:
            examined += 1
            try:
                done += await actions.retry(session, job_id)
            except UniqueKeyHeld as exc:
                held.append(exc)
            if done >= BATCH or examined >= SCAN:
                return done, held, examined, job_id
        before = ids[-1]


async def _apply(
    session: AsyncSession,
    op: str,
    ids: list[int],
    by: str = "dashboard",
    reason: str | None = None,
) -> tuple[int, list[UniqueKeyHeld]]:
    """Apply ``op`` to each job; how many it changed, and the retries refused because
    another job holds the unique key (skipped: the refusal changes nothing and leaves the
    transaction usable, so the rest of the batch goes on). A cancel records ``by`` and
    ``reason``."""
    if op == "delete":
        return len(await actions.delete_finished(session, ids)), []
    done = 0
    held: list[UniqueKeyHeld] = []
    for job_id in ids:
        if op == "retry":
            try:
                done += await actions.retry(session, job_id)
            except UniqueKeyHeld as exc:
                held.append(exc)
        else:
            outcome = await actions.cancel(session, job_id, by=by, reason=reason)
            done += outcome in ("cancelled", "requested")
    return done, held


SKIPPED_SHOWN = 10
"""A bulk retry's message names at most this many of the jobs it skipped."""


def _skipped(held: list[UniqueKeyHeld]) -> str:
    """The sentence a bulk retry's message ends with when it skipped jobs ("" if none)."""
    if not held:
        return ""
    pairs = ", ".join(f"#{e.job_id} held by #{e.holder_id}" for e in held[:SKIPPED_SHOWN])
    if len(held) > SKIPPED_SHOWN:
        pairs += f" and {len(held) - SKIPPED_SHOWN:,} more"
    whose = "its" if len(held) == 1 else "their"
    return (
        f" Skipped {len(held):,}: another job holds {whose} unique key ({pairs}); "
        "cancel the holder or let it finish, then retry."
    )


async def failures_action(ctx: Ctx, session: AsyncSession) -> Response:
    form = ctx.form  # type: ignore[attr-defined]
    op = ctx.request.path_params["op"]
    window = form.get("window") or "24h"
    error_type = form.get("error_type")
    kind = form.get("kind") or None
    if window not in WINDOWS:
        raise BadInput(f"window must be one of {', '.join(WINDOWS)}; got {window!r}")
    if not isinstance(error_type, str):
        raise BadInput("error_type is missing")
    if op not in ("retry", "discard"):
        raise BadInput(f"unknown action {op!r}: retry or discard")
    back = ctx.url("failures", query={"window": window})
    label = (error_type or "(no error type)") + (f" of kind {kind!r}" if kind else "")
    if not _confirmed(ctx):
        verb = "Retry" if op == "retry" else "Discard (delete)"
        question = (
            f"{verb} the jobs that failed with {label} in the last {window} "
            f"(at most {BATCH:,} per click)?"
        )
        return _confirm(ctx, question, verb, back)
    if op == "retry":
        # Past the held ones (see _retry_scan): the group's newest SCAN ids, fetched once.
        group = await inspect.failed_ids(
            session, ctx.namespace, error_type, WINDOWS[window], SCAN, kind
        )

        async def older(before: int | None) -> list[int]:
            return group if before is None else []

        done, held, _, _ = await _retry_scan(session, older)
    else:
        ids = await inspect.failed_ids(
            session, ctx.namespace, error_type, WINDOWS[window], BATCH, kind
        )
        done, held = await _apply(session, "delete", ids)
    _log(
        "INFO",
        "{} failure group {!r} ({}) from {}: {} jobs{}",
        op,
        label,
        window,
        _client(ctx),
        done,
        f", {len(held)} skipped (unique key held)" if held else "",
    )
    summary = f"{op.capitalize()}: {done:,} jobs that failed with {label}.{_skipped(held)}"
    return ctx.render("done.html", summary=summary, back=back)


# ---------------------------------------------------------------------------- login


def _login(config: Config) -> Any:
    async def endpoint(request: Request) -> Response:
        ctx = Ctx(request, config)
        target = _inside(request.query_params.get("next") or "", ctx.root)
        if target is None:
            target = ctx.url("overview")  # never redirect off the dashboard
        if config.keys.password is None:
            return ctx.redirect(target)
        if request.method == "GET":
            return ctx.render("login.html", error=None)
        form = await _form(request)
        if ctx.new_sid or not config.keys.csrf_ok(ctx.sid, form.get(CSRF_FIELD)):
            return _csrf_refused(ctx)
        # Checked and counted with no await in between: guesses sent in parallel are
        # counted one after another (the wait below is per request only).
        throttled = _throttled(ctx)
        if throttled is not None:
            return throttled
        given = form.get("password")
        if not isinstance(given, str) or not config.keys.password_ok(given):
            config.throttle.failed(_client(ctx))
            _log("WARNING", "failed login from {}", _client(ctx))
            await asyncio.sleep(FAILED_LOGIN_DELAY)
            return ctx.render("login.html", 401, error="Wrong password.")
        _log("INFO", "login from {}", _client(ctx))
        # A fresh session id for the login: one planted before it is worth nothing after.
        ctx.sid, ctx.new_sid = new_sid(), True
        response = ctx.redirect(target)
        ctx.set_cookie(response, AUTH_COOKIE, config.keys.auth_token(ctx.sid))
        return response

    return endpoint


def _logout(config: Config) -> Any:
    async def endpoint(request: Request) -> Response:
        ctx = Ctx(request, config)
        form = await _form(request)
        if ctx.new_sid or not config.keys.csrf_ok(ctx.sid, form.get(CSRF_FIELD)):
            return _csrf_refused(ctx)
        if config.keys.revoke(ctx.sid, request.cookies.get(AUTH_COOKIE)):
            _log("INFO", "logout from {}", _client(ctx))
        ctx.sid, ctx.new_sid = new_sid(), True
        response = ctx.redirect(ctx.url("login"))
        response.delete_cookie(AUTH_COOKIE, path=ctx.root or "/")
        return response

    return endpoint


_DOT_SEGMENTS = {".": 1, "%2e": 1, "..": 2, ".%2e": 2, "%2e.": 2, "%2e%2e": 2}
"""Path segments a browser resolves (RFC 3986, and the URL standard's "%2e"): 1 stays
where it is, 2 goes up one level."""


def _inside(target: str, root: str) -> str | None:
    """``target`` (a login's ``next``) as a path of this dashboard: dot segments resolved
    as a browser would, and only if it stays under ``root`` (the mount point); None for
    anything else (another host, a scheme, a backslash or control character, a path of
    the host application such as ``/acta/../public``)."""
    if not target or _CONTROL.search(target) or "\\" in target:
        return None
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith("/"):
        return None
    resolved: list[str] = []
    segments = parts.path.split("/")[1:]
    for i, segment in enumerate(segments):
        climb = _DOT_SEGMENTS.get(segment.lower(), 0)
        if climb == 2 and resolved:
            resolved.pop()
        if climb:
            if i == len(segments) - 1:
                resolved.append("")  # "/a/.." is "/a/" ... then "/"
            continue
        resolved.append(segment)
    path = "/" + "/".join(resolved)
    if not path.startswith(root + "/") or path.startswith("//") or "%00" in path:
        return None
    return path + ("?" + parts.query if parts.query else "")
