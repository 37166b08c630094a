"""acta's logs reach the standard library's ``logging`` with one call, with the job's id,
kind, attempt and trace id on each record; the CLI's line format prints them."""

from __future__ import annotations

import io
import logging

from loguru import logger
from opentelemetry import trace
from sqlalchemy.ext.asyncio import AsyncSession

import acta_sqla.logging
from acta_sqla import Acta, Context
from acta_sqla.logging import worker_format
from acta_sqla.testing import drain
from tests.telemetry import spans  # the SDK: the worker reads the stored trace context

app = Acta(namespace="logged")


@app.job(max_attempts=1)
async def greet(ctx: Context, name: str) -> None:
    ctx.log.info("hello {}", name)


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def test_a_stdlib_handler_receives_a_jobs_log_line_with_its_id(
    db: str, async_session: AsyncSession
) -> None:
    assert spans is not None
    collect = Collect()
    collect.setFormatter(logging.Formatter("%(levelname)s job=%(job_id)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(collect)
    previous = root.level
    root.setLevel(logging.INFO)
    sink = acta_sqla.logging.to_stdlib()
    try:
        with trace.get_tracer("tests").start_as_current_span("request") as request:
            job = greet.job(name="ada")
        async_session.add(job)
        await async_session.commit()
        await drain(app, database_url=db)
    finally:
        logger.remove(sink)
        root.removeHandler(collect)
        root.setLevel(previous)
        logger.disable("acta_sqla")
    [line] = [r for r in collect.records if r.getMessage() == "hello ada"]
    assert line.name == __name__  # the stdlib logger of the module that logged it
    assert line.levelno == logging.INFO
    assert (line.job_id, line.kind, line.attempt) == (job.id, "greet", 1)  # type: ignore[attr-defined]
    assert line.trace_id == format(request.get_span_context().trace_id, "032x")  # type: ignore[attr-defined]
    assert collect.format(line) == f"INFO job={job.id} hello ada"
    # acta's own lines come through too, under their modules' names, without a job.
    own = [r for r in collect.records if r.name.startswith("acta_sqla.")]
    assert own and all(hasattr(r, "job_id") for r in own)


def test_the_worker_format_prints_a_jobs_id_kind_attempt_and_trace() -> None:
    out = io.StringIO()
    sink = logger.add(out, format=worker_format, colorize=False)
    try:
        logger.bind(job_id=7, kind="greet", attempt=2, trace_id="ab" * 16).info("hello")
        logger.bind(job_id=8).warning("no kind")
        logger.info("plain {}", "{braces}")
    finally:
        logger.remove(sink)
    lines = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]
    assert lines == [
        f"INFO    hello [job 7 greet attempt 2 trace {'ab' * 16}]",
        "WARNING no kind [job 8]",
        "INFO    plain {braces}",
    ]
