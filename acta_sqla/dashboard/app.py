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
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from loguru import logger
from markupsafe import Markup
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import inspect
from ..errors import ActaError, DatabaseUnavailable, StoreUnavailable, UniqueKeyHeld
from ..status import ACTIVE_STATUSES, TERMINAL_STATUSES, JobStatus
from . import actions
from .security import AUTH_COOKIE, CSRF_FIELD, SID_COOKIE, Keys, new_sid

log = logger.bind(stage="dashboard")

HERE = Path(__file__).parent

BATCH = 1000
"""A selection or group action acts on at most this many jobs per click (one transaction
of that many single-job operations stays short; the page says to click again for more)."""

PAGE_SIZE = 50
MAX_ID = 2**63 - 1
"""The largest job id there can be (a bigint): a bigger one is refused before a query."""
STATEMENT_TIMEOUT_MS = 5000
"""No page may hold the database longer than this (a filter no index serves fails with a
message instead of scanning on)."""

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
"""Seconds a wrong password waits before its answer (slows guessing)."""

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
) -> Starlette:
    """The dashboard as an ASGI app, to serve alone or mount in your own application::

        app.mount("/acta", acta_dashboard(engine=engine, namespace="default"))

    ``engine`` (an ``AsyncEngine``, yours) or ``database_url``; with neither, the
    settings' URL (``ACTA_DATABASE_URL``, else the embedded PostgreSQL). ``namespace`` and
    ``schema`` default to the settings'. ``read_only`` hides and refuses every action.
    ``password`` asks for it on a login page (or ``Authorization: Bearer``); ``secret``
    signs the CSRF and login tokens (give the same one to every process of a deployment;
    random per process otherwise).
    """
    from ..database import create_engine
    from ..settings import load_settings

    owns = engine is None
    if engine is None or namespace is None:
        settings = load_settings(database_url=database_url, db_schema=schema)
        namespace = namespace or settings.namespace
        if engine is None:
            from ..database import database_url as resolve_url

            engine = create_engine(resolve_url(settings), settings.db_schema)
    config = Config(
        engine=engine,
        namespace=namespace,
        read_only=read_only,
        keys=Keys(secret, password),
        title=title,
        owns_engine=owns,
        env=_environment(),
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Runs when the dashboard is the server's app; a mounted one leaves the engine to
        # the process's end (Starlette does not run a mounted app's lifespan).
        yield
        if config.owns_engine:
            await config.engine.dispose()

    app = Starlette(routes=_routes(config), lifespan=lifespan)
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

    def render(self, template: str, status_code: int = 200, **values: Any) -> HTMLResponse:
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
        return self.finish(HTMLResponse(body, status_code=status_code))

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


Handler = Callable[[Ctx, AsyncSession], Awaitable[Response]]


def _bearer(ctx: Ctx) -> str | None:
    header = ctx.request.headers.get("authorization", "")
    return header[7:] if header.lower().startswith("bearer ") else None


def _authenticated(ctx: Ctx) -> bool:
    return ctx.config.keys.authenticated(
        None if ctx.new_sid else ctx.sid, ctx.request.cookies.get(AUTH_COOKIE), _bearer(ctx)
    )


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
        if not _authenticated(ctx):
            if _bearer(ctx) is not None:
                # A wrong password is a wrong password, from the login form or a script's
                # header: both wait before the answer.
                log.warning("failed bearer password from {}", _client(ctx))
                await asyncio.sleep(FAILED_LOGIN_DELAY)
            if action:
                return ctx.render("error.html", 401, error="Log in first.")
            return ctx.redirect(ctx.url("login", query={"next": ctx.here()}))
        if action:
            form = await request.form()
            ctx.form = form  # type: ignore[attr-defined]
            if ctx.new_sid or not _same_origin(request):
                return _csrf_refused(ctx)
            if not config.keys.csrf_ok(ctx.sid, form.get(CSRF_FIELD)):
                return _csrf_refused(ctx)
            if config.read_only:
                return ctx.render("error.html", 403, error="This dashboard is read-only.")
        try:
            async with AsyncSession(config.engine, expire_on_commit=False) as session:
                await session.execute(
                    select(func.set_config("statement_timeout", str(STATEMENT_TIMEOUT_MS), True))
                )
                response = await handler(ctx, session)
                await session.commit()
                return response
        except _database_errors() as exc:
            log.warning("{} {}: {}", request.method, request.url.path, _describe(exc))
            return ctx.render("error.html", 503, error=f"Database error: {_describe(exc)}")
        except ActaError as exc:
            # acta refused what was asked (e.g. a retry while another job holds the unique
            # key): its message says why and what to do; the transaction was rolled back.
            log.warning("{} {}: {}", request.method, request.url.path, exc)
            return ctx.render("error.html", 409, error=str(exc))

    return endpoint


def _csrf_refused(ctx: Ctx) -> Response:
    log.warning(
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
    from ..cli._common import describe_error

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
    """The job id of the path (digits, the route says); None when no job can have it."""
    job_id = int(ctx.request.path_params["job_id"])
    return job_id if 1 <= job_id <= MAX_ID else None


def _no_job(ctx: Ctx) -> Response:
    return ctx.render(
        "error.html", 404, error=f"No job with id {ctx.request.path_params['job_id']}."
    )


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
        get("/jobs/{job_id:int}", job, "job"),
        post("/jobs/{job_id:int}/{op:str}", job_action, "job_action"),
        get("/failures", failures, "failures"),
        post("/failures/{op:str}", failures_action, "failures_action"),
        get("/workers", workers, "workers"),
        get("/locks", locks, "locks"),
        get("/lanes", lanes, "lanes"),
        get("/lanes/{lane:path}", lane, "lane"),
        get("/keys", keys, "keys"),
        get("/keys/{key:path}", key, "key"),
        get("/schedules", schedules, "schedules"),
        post("/schedules/{name:path}/{op:str}", schedule_action, "schedule_action"),
        get("/definitions", definitions, "definitions"),
        post("/definitions/{kind:path}/{op:str}", definition_action, "definition_action"),
        Route("/login", _login(config), methods=["GET", "POST"], name="login"),
        Route("/logout", _logout(config), methods=["POST"], name="logout"),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]


def _bad_input(endpoint: Callable[[Request], Awaitable[Response]]) -> Any:
    async def wrapped(request: Request) -> Response:
        try:
            return await endpoint(request)
        except BadInput as exc:
            ctx = Ctx(request, request.app.state.acta)
            return ctx.render("error.html", 400, error=str(exc))

    return wrapped


# ---------------------------------------------------------------------------- pages


async def overview(ctx: Ctx, session: AsyncSession) -> Response:
    view = await inspect.overview(session, ctx.namespace)
    names = await inspect.namespaces(session)
    return ctx.render(
        "overview.html",
        view=view,
        namespaces=names,
        statuses=list(JobStatus),
        active_statuses=(JobStatus.READY, JobStatus.EXECUTING),
        terminal_statuses=TERMINAL_STATUSES,
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
    counts = {s: await inspect.estimate_jobs(session, ns, s, f["kind"]) for s in JobStatus}
    keep = {"status": f["status"], "kind": f["kind"], "q": f["text"]}
    return ctx.render(
        "jobs.html",
        jobs=rows,
        filters=f,
        counts=counts,
        total=await inspect.estimate_jobs(session, ns, f["status"], f["kind"]),
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
    return ctx.render(
        "job.html",
        job=detail,
        traceback=traceback,
        finished=detail.status in TERMINAL_STATUSES,
        live=detail.status not in TERMINAL_STATUSES,
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
    from ..policy import OVERRIDABLE

    rows = await inspect.definitions(session, ctx.namespace)
    return ctx.render("definitions.html", kinds=rows, fields=OVERRIDABLE)


# ---------------------------------------------------------------------------- actions


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
        code = await actions.cancel(session, job_id)
    else:
        code = "deleted" if await actions.delete_finished(session, [job_id]) else "not-deleted"
        if code == "deleted":
            back = ctx.url("jobs")
    log.info("{} job {} from {}: {}", op, job_id, _client(ctx), code)
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
    log.info("{} schedule {} in {} from {}: {}", op, name, ctx.namespace, _client(ctx), code)
    return ctx.redirect(back + ("&" if "?" in back else "?") + urlencode({"msg": code}))


async def definition_action(ctx: Ctx, session: AsyncSession) -> Response:
    kind = ctx.request.path_params["kind"]
    op = ctx.request.path_params["op"]
    back = ctx.url("definitions")
    if op not in ("pause", "resume"):
        raise BadInput(f"unknown action {op!r}: pause or resume")
    if not _confirmed(ctx):
        return _confirm(ctx, f"{op.capitalize()} kind {kind!r}?", op.capitalize(), back)
    code = await actions.kind(session, ctx.namespace, kind, op)
    log.info("{} kind {} in {} from {}: {}", op, kind, ctx.namespace, _client(ctx), code)
    return ctx.redirect(back + ("&" if "?" in back else "?") + urlencode({"msg": code}))


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
        about = await inspect.estimate_jobs(session, ctx.namespace, status, kind)
        question = (
            f"{op.capitalize()} the {what} in namespace {ctx.namespace!r} "
            f"(about {about:,}; at most {BATCH:,} per click)?"
        )
        return _confirm(ctx, question, f"{op.capitalize()} them", back)
    statuses = [status] if status else [JobStatus.READY, JobStatus.EXECUTING, JobStatus.WAITING]
    ids: list[int] = []
    for s in statuses:
        page_ = await inspect.list_jobs(
            session, namespace=ctx.namespace, status=s, kind=kind, limit=BATCH - len(ids)
        )
        ids += [j.id for j in page_.jobs]
        if len(ids) >= BATCH:
            break
    done, held = await _apply(session, op, ids)
    log.info(
        "{} {} in {} from {}: {} of {}{}",
        op,
        what,
        ctx.namespace,
        _client(ctx),
        done,
        len(ids),
        f", {len(held)} skipped (unique key held)" if held else "",
    )
    summary = f"{op.capitalize()}: {done:,} of {len(ids):,} {what}.{_skipped(held)}"
    return ctx.render("done.html", summary=summary, back=back)


async def _apply(session: AsyncSession, op: str, ids: list[int]) -> tuple[int, list[UniqueKeyHeld]]:
    """Apply ``op`` to each job; how many it changed, and the retries refused because
    another job holds the unique key (skipped: the refusal changes nothing and leaves the
    transaction usable, so the rest of the batch goes on)."""
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
            done += await actions.cancel(session, job_id) in ("cancelled", "requested")
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
    if window not in WINDOWS:
        raise BadInput(f"window must be one of {', '.join(WINDOWS)}; got {window!r}")
    if not isinstance(error_type, str):
        raise BadInput("error_type is missing")
    if op not in ("retry", "discard"):
        raise BadInput(f"unknown action {op!r}: retry or discard")
    back = ctx.url("failures", query={"window": window})
    label = error_type or "(no error type)"
    if not _confirmed(ctx):
        verb = "Retry" if op == "retry" else "Discard (delete)"
        question = (
            f"{verb} the jobs that failed with {label} in the last {window} "
            f"(at most {BATCH:,} per click)?"
        )
        return _confirm(ctx, question, verb, back)
    ids = await inspect.failed_ids(session, ctx.namespace, error_type, WINDOWS[window], BATCH)
    done, held = await _apply(session, "retry" if op == "retry" else "delete", ids)
    log.info(
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
        target = request.query_params.get("next") or ""
        if not target.startswith(ctx.root + "/") or target.startswith("//"):
            target = ctx.url("overview")  # never redirect off the dashboard
        if config.keys.password is None:
            return ctx.redirect(target)
        if request.method == "GET":
            return ctx.render("login.html", error=None)
        form = await request.form()
        if ctx.new_sid or not config.keys.csrf_ok(ctx.sid, form.get(CSRF_FIELD)):
            return _csrf_refused(ctx)
        given = form.get("password")
        if not isinstance(given, str) or not config.keys.password_ok(given):
            log.warning("failed login from {}", _client(ctx))
            await asyncio.sleep(FAILED_LOGIN_DELAY)
            return ctx.render("login.html", 401, error="Wrong password.")
        log.info("login from {}", _client(ctx))
        response = ctx.redirect(target)
        ctx.set_cookie(response, AUTH_COOKIE, config.keys.auth_token(ctx.sid))
        return response

    return endpoint


def _logout(config: Config) -> Any:
    async def endpoint(request: Request) -> Response:
        ctx = Ctx(request, config)
        form = await request.form()
        if not config.keys.csrf_ok(ctx.sid, form.get(CSRF_FIELD)):
            return _csrf_refused(ctx)
        response = ctx.redirect(ctx.url("login"))
        response.delete_cookie(AUTH_COOKIE, path=ctx.root or "/")
        return response

    return endpoint
