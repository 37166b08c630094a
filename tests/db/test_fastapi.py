"""acta_sqla.fastapi against a real PostgreSQL: the dependency's commit and rollback paths
(through FastAPI's own request cycle, httpx's ASGI transport), the in-process worker's
start-up, and examples/fastapi_app.py under FastAPI's TestClient with its in-process worker.
"""

# No `from __future__ import annotations`: the test apps' endpoints are defined inside
# functions, and FastAPI resolves string annotations in the module's globals only.

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Annotated, Any

import httpx2
import psycopg
import pytest
from fastapi import Depends, FastAPI, HTTPException
from fastapi.testclient import TestClient
from pydantic import BaseModel
from sqlalchemy import String, UniqueConstraint
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from acta_sqla import Acta, ConfigurationError, Context
from acta_sqla.fastapi import Enqueuer, enqueuer, in_process_worker, worker_lifespan
from acta_sqla.settings import load_settings
from tests.waiting import until, wait_for

NAMESPACE = "fastapi_db"
acta = Acta(namespace=NAMESPACE)


@acta.job
async def notify(ctx: Context, note_id: int) -> int:
    return note_id


class Base(DeclarativeBase):
    pass


class Note(Base):
    """A row of the app's own. Its token is unique only at COMMIT (a deferred constraint):
    two notes with one token insert and flush fine, and the commit fails: the one way to make
    a commit, and only the commit, fail on demand."""

    __tablename__ = "fastapi_test_note"
    __table_args__ = (
        UniqueConstraint(
            "token", name="fastapi_test_note_token", deferrable=True, initially="DEFERRED"
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    token: Mapped[str] = mapped_column(String(64))


Sql = Callable[..., list[tuple[Any, ...]]]


@pytest.fixture
def sql(db: str) -> Iterator[Sql]:
    """Another connection than the app's: what it sees is what was committed."""
    conn = psycopg.connect(db, autocommit=True)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS fastapi_test_note (id serial PRIMARY KEY, token text, "
        "CONSTRAINT fastapi_test_note_token UNIQUE (token) DEFERRABLE INITIALLY DEFERRED)"
    )
    conn.execute("TRUNCATE fastapi_test_note RESTART IDENTITY")

    def run(query: str, *params: object) -> list[tuple[Any, ...]]:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []

    yield run
    conn.close()


def committed(sql: Sql) -> tuple[list[str], list[Any]]:
    notes = [r[0] for r in sql("SELECT token FROM fastapi_test_note ORDER BY id")]
    jobs = [
        r[0] for r in sql("SELECT args FROM acta.job WHERE namespace = %s ORDER BY id", NAMESPACE)
    ]
    return notes, jobs


def notes_app(jobs_dependency: Any, *, extra: Any = None) -> FastAPI:
    """An app whose endpoint adds notes and enqueues a job per note, then fails as told."""
    Jobs = Annotated[Enqueuer, jobs_dependency]
    app = FastAPI()

    @app.post("/notes")
    async def add(body: dict[str, Any], jobs: Jobs) -> dict[str, Any]:
        ids = []
        for token in body["tokens"]:
            note = Note(token=token)
            jobs.session.add(note)
            await jobs.session.flush()
            job = await jobs.enqueue(notify.job(note_id=note.id))
            ids.append(job.id)
        if body.get("fail") == "runtime":
            raise RuntimeError("the endpoint failed after enqueueing")
        if body.get("fail") == "http":
            raise HTTPException(409, "refused after enqueueing")
        return {"job_ids": ids}

    if extra is not None:
        extra(app, Jobs)
    return app


def client(app: FastAPI) -> httpx2.AsyncClient:
    # raise_app_exceptions=False: the client gets what a real one would, the 500 response.
    transport = httpx2.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx2.AsyncClient(transport=transport, base_url="http://app")


@pytest.fixture
def sessionmaker(async_engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(async_engine, expire_on_commit=False)


async def test_a_returning_endpoint_commits_its_rows_and_jobs_before_answering(
    sql: Sql, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    app = notes_app(enqueuer(acta, sessionmaker=sessionmaker))
    async with client(app) as http:
        answer = await http.post("/notes", json={"tokens": ["a", "b"]})
        # Read at once, on another connection: the commit happened before the answer.
        notes, jobs = committed(sql)
    assert answer.status_code == 200
    job_ids = answer.json()["job_ids"]
    assert notes == ["a", "b"]
    assert jobs == [{"note_id": 1}, {"note_id": 2}]
    assert [r[0] for r in sql("SELECT id FROM acta.job ORDER BY id")] == job_ids


@pytest.mark.parametrize(("fail", "status"), [("runtime", 500), ("http", 409)])
async def test_an_endpoint_that_raises_leaves_neither_rows_nor_jobs(
    sql: Sql, sessionmaker: async_sessionmaker[AsyncSession], fail: str, status: int
) -> None:
    app = notes_app(enqueuer(acta, sessionmaker=sessionmaker))
    async with client(app) as http:
        answer = await http.post("/notes", json={"tokens": ["a"], "fail": fail})
        ok = await http.post("/notes", json={"tokens": ["c"]})
    assert answer.status_code == status
    assert ok.status_code == 200  # the rolled-back session did not poison the next request
    assert committed(sql) == (["c"], [{"note_id": 2}])


async def test_a_commit_that_fails_is_answered_500_never_200(
    sql: Sql, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    """Both notes and both jobs flush; the deferred constraint fails the COMMIT only. Had
    the commit run after the response (FastAPI's default scope for a yield dependency),
    the client would hold a 200 and two job ids that never existed."""
    app = notes_app(enqueuer(acta, sessionmaker=sessionmaker))
    async with client(app) as http:
        answer = await http.post("/notes", json={"tokens": ["same", "same"]})
    assert answer.status_code == 500
    assert committed(sql) == ([], [])


async def test_acta_wraps_the_apps_own_session_dependency(
    sql: Sql, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    """The second style: the app already has a dependency that yields its session; acta
    wraps it. Other uses of that dependency in the request get the same session (and so the
    same transaction), and the app's dependency still closes it."""
    closed: list[AsyncSession] = []

    async def get_session() -> AsyncIterator[AsyncSession]:
        async with sessionmaker() as session:
            try:
                yield session
            finally:
                closed.append(session)

    DbSession = Annotated[AsyncSession, Depends(get_session)]

    def routes(app: FastAPI, Jobs: Any) -> None:
        @app.post("/both")
        async def both(jobs: Jobs, session: DbSession) -> dict[str, bool]:
            session.add(Note(token="via-app-session"))
            await jobs.enqueue(notify.job(note_id=0))
            return {"same": jobs.session is session}

    app = notes_app(enqueuer(acta, session=get_session), extra=routes)
    async with client(app) as http:
        same = await http.post("/both")
        failed = await http.post("/notes", json={"tokens": ["x"], "fail": "runtime"})
        ok = await http.post("/notes", json={"tokens": ["y"]})
    assert same.status_code == 200 and same.json() == {"same": True}
    assert failed.status_code == 500 and ok.status_code == 200
    notes, jobs = committed(sql)
    assert notes == ["via-app-session", "y"]
    assert jobs == [{"note_id": 0}, {"note_id": 3}]
    assert len(closed) == 3  # the app's own dependency closed each request's session


async def test_a_failed_commit_through_the_apps_session_is_a_500_too(
    sql: Sql, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    async def get_session() -> AsyncIterator[AsyncSession]:
        async with sessionmaker() as session:
            yield session

    app = notes_app(enqueuer(acta, session=get_session))
    async with client(app) as http:
        answer = await http.post("/notes", json={"tokens": ["same", "same"]})
    assert answer.status_code == 500
    assert committed(sql) == ([], [])


def test_enqueuer_takes_exactly_one_session_source(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    async def get_session() -> AsyncIterator[AsyncSession]:
        yield None  # type: ignore[misc]

    with pytest.raises(ConfigurationError, match=r"exactly one of sessionmaker= .* or session="):
        enqueuer(acta)
    with pytest.raises(ConfigurationError, match="exactly one of"):
        enqueuer(acta, sessionmaker=sessionmaker, session=get_session)
    with pytest.raises(ConfigurationError, match=r"must be an acta_sqla\.Acta, got str"):
        enqueuer("acta", sessionmaker=sessionmaker)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the in-process worker


async def test_the_in_process_worker_runs_jobs_and_stops_marked_stopped(
    sql: Sql, db: str, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    app = notes_app(enqueuer(acta, sessionmaker=sessionmaker))
    settings = load_settings(database_url=db, namespace=NAMESPACE, executors=2)
    async with in_process_worker(acta, settings=settings) as worker, client(app) as http:
        answer = await http.post("/notes", json={"tokens": ["w"]})
        (job_id,) = answer.json()["job_ids"]
        await until(
            lambda: sql("SELECT status FROM acta.job WHERE id = %s", job_id) == [("succeeded",)],
            what="the job to succeed",
        )
        assert sql("SELECT status FROM acta.worker WHERE id = %s", worker.worker_id) == [
            ("running",)
        ]
    assert sql("SELECT result FROM acta.job WHERE id = %s", job_id) == [(1,)]
    assert sql("SELECT status FROM acta.worker WHERE id = %s", worker.worker_id) == [("stopped",)]


async def test_a_worker_that_cannot_start_fails_the_apps_start_up(
    scratch_database: Callable[[], str],
) -> None:
    """A database without acta's schema: entering raises the worker's own error (what to
    run) instead of serving requests whose jobs no process will ever run."""
    settings = load_settings(database_url=scratch_database(), namespace=NAMESPACE, executors=1)
    with pytest.raises(ConfigurationError, match="acta db upgrade"):
        async with in_process_worker(acta, settings=settings):
            pytest.fail("the block must not run")


@pytest.mark.parametrize("executors", [0, -1, 1025, 5000])
@pytest.mark.parametrize("given_settings", [True, False], ids=["settings", "environment"])
async def test_executors_out_of_range_are_refused_with_or_without_settings(
    sql: Sql, db: str, executors: int, given_settings: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``executors=`` is checked as ``acta worker --executors`` is (1..1024), whether the
    settings are the caller's or read from the environment."""
    monkeypatch.setenv("ACTA_DATABASE_URL", db)
    settings = load_settings(database_url=db, namespace=NAMESPACE) if given_settings else None
    with pytest.raises(ConfigurationError) as caught:
        async with in_process_worker(acta, settings=settings, executors=executors):
            pytest.fail("the block must not run")
    assert str(caught.value) == (
        f"in_process_worker(executors={executors}): must be between 1 and 1024"
    )
    assert sql("SELECT count(*) FROM acta.worker") == [(0,)]


async def test_executors_given_with_settings_override_them(db: str) -> None:
    settings = load_settings(database_url=db, namespace=NAMESPACE, executors=2)
    async with in_process_worker(acta, settings=settings, executors=3) as worker:
        assert worker.executors_count == 3
        assert worker.settings.executors == 3


@pytest.mark.parametrize("grace", [float("nan"), -float("nan"), -1.0])
async def test_a_nan_or_negative_grace_is_refused(sql: Sql, db: str, grace: float) -> None:
    """A NaN grace compares false with everything: it would be a grace of 0 (running
    handlers interrupted at once) while claiming otherwise."""
    settings = load_settings(database_url=db, namespace=NAMESPACE, executors=1)
    with pytest.raises(ConfigurationError) as caught:
        async with in_process_worker(acta, settings=settings, grace=grace):
            pytest.fail("the block must not run")
    assert str(caught.value) == f"in_process_worker(grace={grace:g}): must be >= 0 seconds"
    assert sql("SELECT count(*) FROM acta.worker") == [(0,)]


async def test_an_unlimited_grace_is_a_grace(sql: Sql, db: str) -> None:
    """grace=inf: running handlers may run to their end at shutdown (each still bounded by
    its own timeout)."""
    settings = load_settings(database_url=db, namespace=NAMESPACE, executors=1)
    async with in_process_worker(acta, settings=settings, grace=float("inf")) as worker:
        assert worker.grace == float("inf")
    assert sql("SELECT status FROM acta.worker") == [("stopped",)]


# ---------------------------------------------------------------- examples/fastapi_app.py


@pytest.fixture
def example_env(db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sql]:
    monkeypatch.setenv("ACTA_DATABASE_URL", db)
    monkeypatch.delenv("ACTA_NAMESPACE", raising=False)
    conn = psycopg.connect(db, autocommit=True)
    conn.execute("DROP TABLE IF EXISTS users")  # the example creates it at start-up

    def run(query: str, *params: object) -> list[tuple[Any, ...]]:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []

    yield run
    conn.close()


def test_the_fastapi_example_under_testclient(example_env: Sql) -> None:
    from examples.fastapi_app import app

    sql = example_env
    with TestClient(app, raise_server_exceptions=False) as http:
        first = http.post("/signup", json={"email": "ada@example.com"})
        assert first.status_code == 200, first.text
        body = first.json()
        assert set(body) == {"user_id", "job_id"}
        assert all(isinstance(v, int) for v in body.values())

        failed = http.post("/signup", json={"email": "bob@example.com", "fail_after_enqueue": True})
        assert failed.status_code == 500
        assert "neither the user nor the job was committed" in failed.json()["detail"]

        duplicate = http.post("/signup", json={"email": "ada@example.com"})
        assert duplicate.status_code == 409, duplicate.text
        assert http.post("/signup", json={"email": "not an email"}).status_code == 422

        def done() -> dict[str, Any] | None:
            job = http.get(f"/jobs/{body['job_id']}").json()
            return job if job["status"] == "succeeded" else None

        job = wait_for(done, 30, "the welcome job to succeed in the in-process worker")
        assert job == {
            "id": body["job_id"],
            "kind": "send_welcome",
            "status": "succeeded",
            "attempts": 1,
            "result": {"sent": True, "user_id": body["user_id"]},
        }
        missing = http.get("/jobs/999999")
        assert missing.status_code == 404 and "no job 999999" in missing.json()["detail"]

    assert sql("SELECT id, email FROM users") == [(body["user_id"], "ada@example.com")]
    assert sql("SELECT id, args FROM acta.job") == [(body["job_id"], {"user_id": body["user_id"]})]
    assert sql("SELECT status FROM acta.worker") == [("stopped",)]


def test_worker_lifespan_runs_the_worker_for_the_apps_lifetime(sql: Sql, db: str) -> None:
    settings = load_settings(database_url=db, namespace=NAMESPACE, executors=1)
    app = FastAPI(lifespan=worker_lifespan(acta, settings=settings))
    with TestClient(app):
        assert sql("SELECT status FROM acta.worker WHERE namespace = %s", NAMESPACE) == [
            ("running",)
        ]
    assert sql("SELECT status FROM acta.worker WHERE namespace = %s", NAMESPACE) == [("stopped",)]


async def test_a_response_that_cannot_be_built_rolls_back(
    sql: Sql, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    """The response model is checked inside the endpoint's scope: a return value that fails
    it is a 500 and commits nothing."""

    class Answer(BaseModel):
        job_id: int

    def routes(app: FastAPI, Jobs: Any) -> None:
        @app.post("/bad-answer", response_model=Answer)
        async def bad_answer(jobs: Jobs) -> Any:
            jobs.session.add(Note(token="t"))
            await jobs.enqueue(notify.job(note_id=0))
            return {"job_id": "not a number"}

    app = notes_app(enqueuer(acta, sessionmaker=sessionmaker), extra=routes)
    async with client(app) as http:
        answer = await http.post("/bad-answer")
    assert answer.status_code == 500
    assert committed(sql) == ([], [])
