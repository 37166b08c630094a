"""examples/fastapi_app.py as it is run: a real uvicorn process with its in-process worker
(sign-ups, some failing after enqueue; jobs polled until they succeed; rows checked in the
database; SIGTERM and a clean exit with the worker marked stopped), a separate
`acta worker --burst` on the same module, and FastAPI kept out of the core's imports."""

from __future__ import annotations

import json
import re
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.harness import REPO_ROOT, Sql, spawn_worker, worker_env
from tests.waiting import wait_for


def test_importing_acta_sqla_and_its_worker_never_imports_fastapi() -> None:
    code = (
        "import sys, acta_sqla, acta_sqla.worker, acta_sqla.cli\n"
        "from acta_sqla import Acta, Context, Job\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'starlette')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT
    )
    assert out.stdout.strip() == "[]"


@pytest.fixture
def sql(sql: Sql) -> Sql:
    """The shared ``sql`` (tests/conftest.py), with the example's table gone: the example
    creates it at start-up."""
    sql("DROP TABLE IF EXISTS users")
    return sql


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Uvicorn:
    def __init__(self, proc: subprocess.Popen[str], base_url: str, log: Path) -> None:
        self.proc = proc
        self.base_url = base_url
        self.log = log

    def output(self) -> str:
        return self.log.read_text()


@pytest.fixture
def uvicorn(db: str, tmp_path: Path) -> Iterator[Callable[..., Uvicorn]]:
    started: list[Uvicorn] = []

    def start(**env: str) -> Uvicorn:
        port = free_port()
        full_env = worker_env(db, **env)
        log = tmp_path / f"uvicorn-{len(started)}.log"
        command = [sys.executable, "-m", "uvicorn", "examples.fastapi_app:app"]
        with log.open("w") as out:
            proc = subprocess.Popen(
                [*command, "--host", "127.0.0.1", "--port", str(port)],
                cwd=REPO_ROOT,
                env=full_env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
        server = Uvicorn(proc, f"http://127.0.0.1:{port}", log)
        started.append(server)

        def up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"uvicorn exited {proc.returncode}:\n{server.output()}")
            try:
                return httpx2.get(f"{server.base_url}/jobs/0", timeout=2).status_code == 404
            except httpx2.TransportError:
                return False

        wait_for(up, 60, "uvicorn to serve the example", interval=0.1)
        return server

    yield start
    for server in started:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(timeout=10)


def stop(server: Uvicorn) -> None:
    """SIGTERM, and a clean exit: after its graceful shutdown uvicorn raises the signal it
    caught again, so that its parent sees the process end by SIGTERM, as it was asked to."""
    server.proc.send_signal(signal.SIGTERM)
    status = server.proc.wait(timeout=60)
    output = server.output()
    assert status in (0, -signal.SIGTERM), output
    assert "Finished server process" in output, output
    assert "Traceback" not in output, output


def test_the_example_under_uvicorn_runs_its_welcome_jobs_and_stops_cleanly(
    uvicorn: Callable[..., Uvicorn], sql: Sql
) -> None:
    server = uvicorn()
    signed: dict[str, dict[str, int]] = {}
    with httpx2.Client(base_url=server.base_url, timeout=10) as http:
        for i in range(12):
            email = f"user{i}@example.com"
            failing = i % 3 == 2
            answer = http.post("/signup", json={"email": email, "fail_after_enqueue": failing})
            if failing:
                assert answer.status_code == 500, answer.text
                assert "neither the user nor the job" in answer.json()["detail"]
            else:
                assert answer.status_code == 200, answer.text
                signed[email] = answer.json()

        def all_succeeded() -> list[dict[str, Any]] | None:
            jobs = [http.get(f"/jobs/{s['job_id']}").json() for s in signed.values()]
            return jobs if all(j["status"] == "succeeded" for j in jobs) else None

        jobs = wait_for(all_succeeded, 60, "every welcome job to succeed", interval=0.05)
        assert http.get("/jobs/987654").status_code == 404

    assert len(signed) == 8
    by_id = {j["id"]: j for j in jobs}
    for ids in signed.values():
        assert by_id[ids["job_id"]]["result"] == {"sent": True, "user_id": ids["user_id"]}
        assert by_id[ids["job_id"]]["kind"] == "send_welcome"
    # The failed sign-ups left neither their user nor their job.
    users = dict(sql("SELECT email, id FROM users"))
    assert users == {email: ids["user_id"] for email, ids in signed.items()}
    rows = sql("SELECT id, (args->>'user_id')::int, status FROM acta.job ORDER BY id")
    assert rows == sorted((ids["job_id"], ids["user_id"], "succeeded") for ids in signed.values())

    stop(server)
    output = server.output()
    assert sql("SELECT status FROM acta.worker") == [("stopped",)]
    (worker_id,) = sql("SELECT id FROM acta.worker")[0]
    assert f"worker {worker_id} stopped" in output
    assert "Application shutdown complete" in output


def test_a_separate_acta_worker_drains_what_the_app_enqueued(
    uvicorn: Callable[..., Uvicorn], sql: Sql, db: str, tmp_path: Path
) -> None:
    """The production shape: the web process only enqueues; `acta worker` on the same
    module runs the jobs."""
    server = uvicorn(EXAMPLE_IN_PROCESS_WORKER="0")
    with httpx2.Client(base_url=server.base_url, timeout=10) as http:
        ids = http.post("/signup", json={"email": "solo@example.com"}).json()
        assert http.get(f"/jobs/{ids['job_id']}").json()["status"] == "ready"
        assert sql("SELECT count(*) FROM acta.worker") == [(0,)]

        log = tmp_path / "acta-worker.log"
        worker = spawn_worker("examples.fastapi_app:acta", ("--burst",), worker_env(db), log)
        assert worker.wait(timeout=60) == 0, log.read_text()

        job = http.get(f"/jobs/{ids['job_id']}").json()
    assert job["status"] == "succeeded", log.read_text()
    assert job["result"] == {"sent": True, "user_id": ids["user_id"]}
    stop(server)


def _curl(argv: list[str]) -> tuple[str, str, dict[str, str], str | None]:
    """The request ``curl -s URL [-H 'name: value'] [-d BODY]`` sends: its method, path,
    headers and body."""
    assert argv[:2] == ["curl", "-s"], argv
    url, headers, body = "", {}, None
    rest = iter(argv[2:])
    for arg in rest:
        if arg == "-H":
            name, _, value = next(rest).partition(":")
            headers[name.strip()] = value.strip()
        elif arg == "-d":
            body = next(rest)
        else:
            url = arg
    assert url.startswith("localhost:8000/"), url
    return (
        ("POST" if body is not None else "GET"),
        url.removeprefix("localhost:8000"),
        headers,
        body,
    )


def test_the_docs_curl_transcript_reads_the_job_the_sign_up_answered(
    uvicorn: Callable[..., Uvicorn], sql: Sql
) -> None:
    """docs/fastapi.md's transcript, sent to the example under uvicorn: the second request
    asks for the job id the first one answered, and the answers have the documented shape."""
    doc = (REPO_ROOT / "docs" / "fastapi.md").read_text()
    [transcript] = re.findall(r"```console\n(.*?)```", doc, re.S)
    lines = transcript.splitlines()
    assert [line.startswith("$ curl ") for line in lines] == [True, False, True, False]
    (signup, signup_doc), (get_job, job_doc) = (
        (_curl(shlex.split(lines[i].removeprefix("$ "))), json.loads(lines[i + 1])) for i in (0, 2)
    )
    # As written, the transcript is consistent: the job asked for is the one answered.
    assert get_job[:2] == ("GET", f"/jobs/{signup_doc['job_id']}")
    assert job_doc["id"] == signup_doc["job_id"]
    assert job_doc["result"] == {"sent": True, "user_id": signup_doc["user_id"]}

    server = uvicorn()
    with httpx2.Client(base_url=server.base_url, timeout=10) as http:
        method, path, headers, body = signup
        answer = http.request(method, path, headers=headers, content=body)
        assert answer.status_code == 200, answer.text
        ids = answer.json()
        assert ids.keys() == signup_doc.keys()
        # The id the sign-up answered, where the transcript has its own.
        path = get_job[1].replace(str(signup_doc["job_id"]), str(ids["job_id"]))

        def succeeded() -> dict[str, Any] | None:
            job: dict[str, Any] = http.get(path).json()
            return job if job["status"] == "succeeded" else None

        job = wait_for(succeeded, 60, "the signed-up user's welcome job", interval=0.05)
    assert job == job_doc | {
        "id": ids["job_id"],
        "result": {"sent": True, "user_id": ids["user_id"]},
    }
    stop(server)
