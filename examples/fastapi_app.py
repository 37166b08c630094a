"""FastAPI + acta: a sign-up inserts its user and enqueues the welcome mail in ONE transaction.

Run it (against ACTA_DATABASE_URL, or the embedded PostgreSQL when that is unset)::

    uvicorn examples.fastapi_app:app
    curl -s localhost:8000/signup -H 'content-type: application/json' \\
         -d '{"email": "ada@example.com"}'                    # {"user_id":1,"job_id":254}
    curl -s localhost:8000/jobs/254      # the job_id it answered: ... "status":"succeeded" ...

``python examples/fastapi_app.py`` runs the same app in-process, with its lifespan, and
makes those requests itself through httpx (``pip install httpx``), printing the answers.

Start-up migrates acta's schema, creates the app's own ``users`` table and starts an acta
worker inside the web process, so that uvicorn alone runs the jobs. The production shape is
separate worker processes on the same module::

    EXAMPLE_IN_PROCESS_WORKER=0 uvicorn examples.fastapi_app:app
    acta worker --app examples.fastapi_app:acta
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from loguru import logger
from pydantic import BaseModel, Field
from sqlalchemy import String
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from acta_sqla import Acta, Context, Job, embedded, engine_options, migrate
from acta_sqla.fastapi import Enqueuer, enqueuer, in_process_worker
from acta_sqla.settings import load_settings

acta = Acta(namespace="default")


@acta.job(max_attempts=5, timeout=60)
async def send_welcome(ctx: Context, user_id: int) -> dict[str, Any]:
    ctx.log.info("sending the welcome mail to user {}", user_id)  # a mail service, in life
    return {"sent": True, "user_id": user_id}


class Base(DeclarativeBase):
    """The app's own metadata: acta's tables are not in it (they have their migrations)."""


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(320), unique=True)


# Bound to an engine at start-up: importing this module (as `acta worker --app` does) must
# not need a database, and the embedded one's URL is known only once it runs.
Session = async_sessionmaker(expire_on_commit=False)


async def get_session() -> AsyncIterator[AsyncSession]:
    async with Session() as session:
        yield session


DbSession = Annotated[AsyncSession, Depends(get_session)]
# The request's session and an enqueuer bound to it: commits when the endpoint returns,
# rolls back when it raises, before the response is sent.
Jobs = Annotated[Enqueuer, enqueuer(acta, sessionmaker=Session)]


def in_process_worker_wanted() -> bool:
    return os.environ.get("EXAMPLE_IN_PROCESS_WORKER", "1") != "0"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    logger.enable("acta_sqla")  # the library logs nothing until an application asks
    settings = load_settings(namespace=acta.namespace)
    url = settings.database_url or await asyncio.to_thread(embedded.start, settings.data_dir)
    await asyncio.to_thread(migrate.upgrade, url, "head", settings.db_schema)
    engine = create_async_engine(
        make_url(url).set(drivername="postgresql+asyncpg"),
        execution_options=engine_options(settings.db_schema),
    )
    try:
        async with engine.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)
        Session.configure(bind=engine)
        if in_process_worker_wanted():
            # The URL resolved above, so the worker does not start the embedded server again.
            worker_settings = load_settings(namespace=acta.namespace, database_url=url)
            async with in_process_worker(acta, settings=worker_settings):
                yield
        else:
            yield
    finally:
        await engine.dispose()


app = FastAPI(title="acta-sqla FastAPI example", lifespan=lifespan)


class SignupFailed(Exception):
    """Raised on purpose after the user and its job were added, to show that neither commits."""


@app.exception_handler(SignupFailed)
async def signup_failed(request: Request, exc: SignupFailed) -> JSONResponse:
    return JSONResponse(status_code=500, content={"detail": str(exc)})


class SignupIn(BaseModel):
    email: str = Field(min_length=3, max_length=320, pattern=r"^[^@\s]+@[^@\s]+$")
    fail_after_enqueue: bool = False


class SignupOut(BaseModel):
    user_id: int
    job_id: int


class JobOut(BaseModel):
    id: int
    kind: str
    status: str
    attempts: int
    result: Any = None


@app.post("/signup")
async def signup(body: SignupIn, jobs: Jobs) -> SignupOut:
    user = User(email=body.email)
    jobs.session.add(user)
    try:
        await jobs.session.flush()  # the user's id, for the job's args
    except IntegrityError:
        raise HTTPException(409, f"{body.email} has already signed up") from None
    job = await jobs.enqueue(send_welcome.job(user_id=user.id))
    if body.fail_after_enqueue:
        raise SignupFailed(
            f"sign-up of {body.email} failed after its welcome job {job.id} was enqueued: "
            "neither the user nor the job was committed"
        )
    return SignupOut(user_id=user.id, job_id=job.id)


@app.get("/jobs/{job_id}")
async def get_job(job_id: int, session: DbSession) -> JobOut:
    job = await session.get(Job, job_id)
    if job is None or job.namespace != acta.namespace:
        raise HTTPException(404, f"no job {job_id} in namespace {acta.namespace!r}")
    return JobOut(
        id=job.id, kind=job.kind, status=job.status, attempts=job.attempts, result=job.result
    )


async def main() -> None:
    """Sign two users up (the second one failing after its enqueue) and wait for the first
    one's welcome mail, as a client of the app would."""
    import httpx

    transport = httpx.ASGITransport(app=app)
    async with lifespan(app), httpx.AsyncClient(transport=transport, base_url="http://x") as client:
        email = f"ada-{os.getpid()}@example.com"  # a new user at every run
        signed_up = (await client.post("/signup", json={"email": email})).json()
        print("signed up:", sorted(signed_up))
        for _ in range(200):  # the in-process worker runs the job meanwhile
            job = (await client.get(f"/jobs/{signed_up['job_id']}")).json()
            if job["status"] in ("succeeded", "failed", "cancelled"):
                break
            await asyncio.sleep(0.05)
        print(f"welcome job: {job['status']}, sent: {job['result']['sent']}")
        failed = await client.post(
            "/signup", json={"email": "grace@example.com", "fail_after_enqueue": True}
        )
        print(f"failed sign-up: {failed.status_code}, {failed.json()['detail']}")


if __name__ == "__main__":
    asyncio.run(main())
