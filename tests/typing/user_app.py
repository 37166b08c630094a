"""A user's application as a type checker sees it: checked by tests/typing/test_mypy.py,
which runs mypy --strict on a copy outside the repository (so ``acta_sqla`` is found as an
installed package, through its py.typed marker) and compares mypy's output with the
comments: an R comment names the type a line's ``reveal_type`` must show, an E comment
the code of the error the line must be. Never imported by pytest (no test_ prefix)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import reveal_type

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from acta_sqla import Acta, Context, Handler, Job

acta = Acta("mail")


@acta.job(max_attempts=5)
async def send_welcome(ctx: Context, user_id: int, template: str = "welcome") -> str:
    reveal_type(ctx)  # R: acta_sqla.context.Context
    reveal_type(ctx.attempt)  # R: int
    ctx.log.info("sending {}", user_id)
    return template


@acta.job
def resize(ctx: Context, path: str) -> None:
    return None


def enqueue(session: Session) -> None:
    job = send_welcome.job(user_id=42)
    session.add(job)
    session.add(send_welcome.job(42, "hello"))
    session.add(send_welcome.job(user_id=42, delay=30))
    session.add(send_welcome.job(user_id=42, delay=timedelta(minutes=5), unique_key="u:42"))
    session.add(resize.job(path="a.png", run_at=datetime(2030, 1, 1), priority=3))
    session.add(Job(kind="resize", args={"path": "b.png"}))
    reveal_type(acta)  # R: acta_sqla.app.Acta
    reveal_type(send_welcome)  # R: acta_sqla.handler.Handler[[user_id: int, template: str =], typing.Coroutine[Any, Any, str]]
    reveal_type(resize)  # R: acta_sqla.handler.Handler[[path: str], None]
    reveal_type(job)  # R: acta_sqla.models.Job
    reveal_type(job.id)  # R: int
    reveal_type(job.kind)  # R: str
    reveal_type(acta.enqueue_sync(session, job))  # R: acta_sqla.models.Job
    any_handler: Handler[..., object] = resize
    del any_handler


async def enqueue_async(session: AsyncSession) -> None:
    job = await acta.enqueue(session, resize.job(path="c.png"))
    reveal_type(job)  # R: acta_sqla.models.Job


def mistakes(session: Session) -> None:
    send_welcome.job(user_id="42")  # E: call-overload
    send_welcome.job(userid=42)  # E: call-overload
    resize.job()  # E: call-overload
    resize.job(path="a.png", delay="soon")  # E: call-overload
    resize.job(path=3, delay=5)  # (args beside an option: checked at run time only)
    resize(Context, "x")  # E: arg-type
