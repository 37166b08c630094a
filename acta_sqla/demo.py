"""`acta demo`: the whole system at work on the embedded default (or ACTA_DATABASE_URL).

It enqueues jobs inside application transactions (one of them rolled back), runs a real
worker pipeline until every demo job has finished, and prints what happened: successes,
a retry that recovered, a job that used up its failure budget, and a sync handler.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from .app import Acta
from .context import Context
from .errors import Retry
from .queries import demo as q
from .settings import ActaSettings

NAMESPACE = "demo"
acta = Acta(namespace=NAMESPACE)


@acta.job(max_attempts=3)
async def send_welcome(ctx: Context, user_id: int, template: str = "basic") -> dict[str, Any]:
    await asyncio.sleep(random.uniform(0.001, 0.01))  # talking to a mail service
    return {"sent": True, "user_id": user_id, "template": template}


@acta.job(max_attempts=5, backoff_base=0.2)
async def charge_card(ctx: Context, order_id: int) -> dict[str, Any]:
    if ctx.attempt < 3:
        raise ConnectionError(f"payment gateway timed out (attempt {ctx.attempt})")
    return {"order_id": order_id, "charged": True, "attempts": ctx.attempt}


@acta.job(max_attempts=2, backoff_base=0.1)
async def import_feed(ctx: Context, url: str) -> None:
    raise ValueError(f"{url} returned malformed XML")


@acta.job
def render_invoice(ctx: Context, order_id: int) -> dict[str, Any]:
    """A sync handler: it runs in the worker's thread pool."""
    time.sleep(0.005)
    if ctx.attempt == 1 and order_id % 7 == 0:
        raise Retry(after=0.1, reason="template cache warming up")
    return {"order_id": order_id, "pages": 1 + order_id % 3}


async def run_demo(settings: ActaSettings, url: str, users: int = 200) -> dict[str, Any]:
    from .database import create_engine
    from .worker import Worker

    engine = create_engine(url, settings.db_schema)
    say = _printer()
    tty = sys.stdout.isatty()
    try:
        async with AsyncSession(engine, expire_on_commit=False) as session:
            # The demo owns its namespace: start from an empty one.
            await session.execute(q.delete_namespace_history(NAMESPACE))
            await session.execute(q.delete_namespace_jobs(NAMESPACE))
            await session.commit()
            # A sign-up and its welcome mail commit together...
            first = send_welcome.job(user_id=0, template="vip")
            session.add(first)
            await session.commit()
            # ...and a failed request enqueues nothing.
            session.add(send_welcome.job(user_id=-1))
            await session.rollback()
            jobs = [send_welcome.job(user_id=i) for i in range(1, users)]
            jobs += [render_invoice.job(order_id=i) for i in range(1, 51)]
            jobs += [charge_card.job(order_id=1), import_feed.job(url="https://example.com/feed")]
            await acta.enqueue_many(session, jobs)
            await session.commit()
            rolled_back = await session.scalar(q.count_jobs_of_user(-1))
        total = len(jobs) + 1
        say(
            f"enqueued {total} jobs in namespace {NAMESPACE!r} (the rolled-back one: "
            f"{'absent' if not rolled_back else 'PRESENT?!'})"
        )
        worker = Worker(acta, settings.model_copy(update={"namespace": NAMESPACE}), grace=5)
        runner = asyncio.create_task(worker.run())
        started = time.monotonic()
        async with AsyncSession(engine) as session:
            while True:
                done = await session.scalar(q.count_finished(NAMESPACE))
                await session.commit()
                say(f"  {done}/{total} finished", end="\r" if tty else "\n", show=tty)
                if done >= total or runner.done():
                    break
                await asyncio.sleep(0.1)
        elapsed = time.monotonic() - started
        worker.request_stop()
        await runner
        if tty:
            say("")
        async with AsyncSession(engine) as session:
            rows = (await session.execute(q.outcome_by_kind(NAMESPACE))).all()
            failed_error = await session.scalar(q.last_error_of_kind(NAMESPACE, "import_feed"))
            charge = await session.scalar(q.result_of_kind(NAMESPACE, "charge_card"))
            executions = await session.scalar(q.count_executions(NAMESPACE))
        say(f"ran {total} jobs ({executions} attempts) in {elapsed:.2f}s:")
        for kind, status, n, attempts in rows:
            say(f"  {kind:<15} {status.value:<10} {n:>4}   avg attempts {float(attempts):.1f}")
        say(f"charge_card recovered after retries: {charge}")
        say(f"import_feed used up its budget: {(failed_error or {}).get('message')}")
        return {"total": total, "rows": rows, "elapsed": elapsed}
    finally:
        await engine.dispose()


def _printer():  # type: ignore[no-untyped-def]
    import typer

    def say(text: str, end: str = "\n", show: bool = True) -> None:
        if show:
            typer.echo(text + end, nl=False)

    return say
