"""Served two ways: ``acta dashboard`` (its own server) refuses to open to a network
without a password; and nothing a worker imports loads the dashboard's web stack."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from tests.harness import REPO_ROOT, acta_command
from tests.waiting import wait_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_any_address_but_loopback_needs_a_password(acta_env: dict[str, str]) -> None:
    env = {k: v for k, v in acta_env.items() if k != "ACTA_DASHBOARD_PASSWORD"}
    done = subprocess.run(
        [*acta_command(), "dashboard", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(
        "acta dashboard: refusing to listen on 0.0.0.0: set ACTA_DASHBOARD_PASSWORD"
    )


def test_acta_dashboard_serves_the_pages_and_asks_for_the_password(
    db: str, acta_env: dict[str, str]
) -> None:
    port = _free_port()
    env = {**acta_env, "ACTA_DASHBOARD_PASSWORD": "open sesame", "ACTA_NAMESPACE": "dash"}
    proc = subprocess.Popen(
        [*acta_command(), "dashboard", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"

        def up() -> httpx.Response | None:
            try:
                return httpx.get(base + "/", timeout=2)
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                return None

        first = wait_for(up, timeout=60, what="acta dashboard to answer")
        assert first.status_code == 303 and first.headers["location"].startswith("/login")
        page = httpx.get(base + "/", headers={"authorization": "Bearer open sesame"})
        assert page.status_code == 200 and "namespace <strong>dash</strong>" in page.text
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    output = proc.stdout.read() if proc.stdout else ""
    assert f"dashboard on http://127.0.0.1:{port}/" in output
    assert "password required" in output


def test_port_0_logs_the_port_it_serves_on(db: str, acta_env: dict[str, str]) -> None:
    """``--port 0`` lets the system choose: the log line names the chosen port (it said 0)."""
    proc = subprocess.Popen(
        [*acta_command(), "dashboard", "--port", "0"],
        env=acta_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = wait_for(proc.stdout.readline, timeout=60, what="the dashboard's first line")
        found = re.search(r"dashboard on http://127\.0\.0\.1:(\d+)/", line)
        assert found, line
        port = int(found.group(1))
        assert port != 0
        answer = wait_for(
            lambda: _get(f"http://127.0.0.1:{port}/"), timeout=60, what="the chosen port"
        )
        assert answer.status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def _get(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=2)
    except httpx.TransportError:
        return None


def test_a_port_in_use_is_one_line(acta_env: dict[str, str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*acta_command(), "dashboard", "--port", str(port)],
            capture_output=True,
            text=True,
            env=acta_env,
            timeout=60,
        )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"acta dashboard: cannot listen on 127.0.0.1:{port}: Address already in use"
    ], done.stderr
    assert "dashboard on" not in done.stdout + done.stderr


def test_a_worker_never_imports_the_dashboard() -> None:
    script = (
        "import sys, acta_sqla, acta_sqla.worker, acta_sqla.cli, acta_sqla.testing\n"
        "from acta_sqla.cli import worker\n"
        "web = ('starlette', 'jinja2', 'uvicorn', 'multipart', 'acta_sqla.dashboard')\n"
        "print(sorted(m for m in sys.modules if m.startswith(web)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_acta_dashboard_reads_its_password_from_dotenv_checks_hosts_and_bounds_bodies(
    db: str, acta_env: dict[str, str], tmp_path: Path
) -> None:
    """Issue 35 against the real server: a password in ``.env`` (it was ignored, and the
    dashboard served every page without one), the Host header (DNS rebinding), the
    trailing-slash redirect's Location, a body of 1 GiB announced, an id of 5,000 digits,
    ``--only-namespaces``."""
    (tmp_path / ".env").write_text("ACTA_DASHBOARD_PASSWORD=from the file\nACTA_NAMESPACE=dash\n")
    port = _free_port()
    proc = subprocess.Popen(
        [*acta_command(), "dashboard", "--port", str(port), "--only-namespaces", "dash"],
        env=acta_env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    bearer = {"authorization": "Bearer from the file"}
    try:

        def up() -> httpx.Response | None:
            try:
                return httpx.get(base + "/", timeout=2)
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                return None

        first = wait_for(up, timeout=60, what="acta dashboard to answer")
        assert first.status_code == 303 and first.headers["location"].startswith("/login")
        assert httpx.get(base + "/", headers=bearer).status_code == 200

        rebound = httpx.get(base + "/", headers={**bearer, "host": f"evil.example:{port}"})
        assert rebound.status_code == 400 and "evil.example" in rebound.text
        for host in (f"localhost:{port}", f"127.0.0.1:{port}"):
            assert httpx.get(base + "/", headers={**bearer, "host": host}).status_code == 200

        moved = httpx.get(base + "/jobs/?status=failed", headers=bearer)
        assert moved.status_code == 307 and moved.headers["location"] == "/jobs?status=failed"

        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            raw.sendall(
                f"POST /login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Content-Type: application/x-www-form-urlencoded\r\n"
                f"Content-Length: {1 << 30}\r\n\r\n".encode()
            )
            reply = raw.recv(4096)
        assert reply.startswith(b"HTTP/1.1 413"), reply

        huge = httpx.get(base + "/jobs/" + "9" * 5000, headers=bearer)
        assert huge.status_code == 404
        pinned = httpx.get(base + "/jobs?ns=other", headers=bearer)
        assert pinned.status_code == 404 and "is not shown by this dashboard" in pinned.text
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    output = proc.stdout.read() if proc.stdout else ""
    assert "password required" in output
    assert "Traceback" not in output, output


def test_a_bad_dashboard_setting_is_one_line(acta_env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("ACTA_DASHBOARD_SESSION_LIFETIME=-5\n")
    done = subprocess.run(
        [*acta_command(), "dashboard"],
        capture_output=True,
        text=True,
        env=acta_env,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "acta dashboard: ACTA_DASHBOARD_SESSION_LIFETIME: Input should be greater than 0"
    ], done.stderr
