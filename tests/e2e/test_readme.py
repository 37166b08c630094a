"""The README's first program, run as a newcomer runs it: its ``hello.py`` saved as written,
then the commands of its transcript, on the embedded default (no ``ACTA_DATABASE_URL``, a
data folder of the test's own), each answering what the transcript shows."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from acta_sqla import embedded
from tests.harness import REPO_ROOT, acta_command, worker_env

SECTION = "## Your first job"
COMMAND_TIMEOUT_SECONDS = 120


def _first_program() -> tuple[str, list[tuple[str, list[str]]]]:
    """The section's python file, and its transcript as (command, lines shown after it)."""
    readme = (REPO_ROOT / "README.md").read_text()
    start = readme.index(f"\n{SECTION}\n")
    section = readme[start : readme.index("\n## ", start + 1)]
    [code] = re.findall(r"^```python\n(.*?)^```", section, re.M | re.S)
    [transcript] = re.findall(r"^```console\n(.*?)^```", section, re.M | re.S)
    steps: list[tuple[str, list[str]]] = []
    for line in transcript.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif line != "...":  # "..." marks lines the transcript leaves out
            steps[-1][1].append(line)
    return code, steps


def _shape(line: str) -> str:
    # Ids, times, the executor count: a run's own numbers, not the transcript's.
    return re.sub(r"\d+", "N", line.rstrip())


def _shows(expected: list[str], output: str) -> bool:
    """Every line the transcript shows appears in ``output``, in that order."""
    got = iter(_shape(line) for line in output.splitlines())
    return all(any(g == _shape(want) for g in got) for want in expected)


def test_the_readmes_first_program_runs_as_written(tmp_path: Path, private_tmp: Path) -> None:
    code, steps = _first_program()
    assert [shlex.split(c)[0] for c, _ in steps] == ["python", "acta", "acta"]
    (tmp_path / "hello.py").write_text(code)
    data_dir = private_tmp / "pgdata"  # the embedded server's user must reach it
    env = worker_env(None, ACTA_DATA_DIR=str(data_dir))
    programs = {"python": [sys.executable], "acta": acta_command()}
    ids: dict[str, str] = {}  # the transcript's job id -> this run's
    try:
        for command, expected in steps:
            program, *args = shlex.split(command)
            args = [ids.get(arg, arg) for arg in args]
            done = subprocess.run(
                [*programs[program], *args],
                cwd=tmp_path,  # where the newcomer saved hello.py
                env=env,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_SECONDS,
            )
            output = done.stdout + done.stderr
            assert done.returncode == 0, f"{command} exited {done.returncode}:\n{output}"
            assert _shows(expected, output), f"{command}:\n{output}\nshows none of\n{expected}"
            if program == "python":
                [shown] = re.findall(r"is job (\d+)$", expected[0])
                [real] = re.findall(r"is job (\d+)$", done.stdout.strip())
                ids[shown] = real
        assert ids, "the transcript never ran hello.py"
    finally:
        embedded.stop(data_dir)
