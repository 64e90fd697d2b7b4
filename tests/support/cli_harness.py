"""Helpers of the command line's end-to-end tests: the real ``simrun`` console script as a
child process, a clean environment for it, workflows of the service's test task type, and
readings of what the units did."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
#: The service's test task type (tests.support.service_tasks), loaded with --plugins.
WORK = "tests.support.service_tasks:WORK"


def simrun_exe() -> str:
    """The installed ``simrun`` console script of this Python."""
    beside = Path(sys.executable).parent / "simrun"
    if beside.exists():
        return str(beside)
    found = shutil.which("simrun")
    if found is None:
        raise AssertionError("the simrun console script is not installed (pip install -e .)")
    return found


def clean_env(**more: str) -> dict[str, str]:
    """The environment of a user without simrun settings: no REDIS_URL or SIMRUN_*, the
    repository on PYTHONPATH (for the test task types), a wide plain output."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("SIMRUN_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["COLUMNS"] = "200"
    env.pop("FORCE_COLOR", None)
    env.update(more)
    return env


def simrun(
    *args: str, cwd: Path, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``simrun ARGS`` in ``cwd`` to its end; output as text."""
    return subprocess.run(
        [simrun_exe(), *args],
        cwd=cwd,
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_simrun(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``simrun ARGS`` in ``cwd``; stdout and stderr in one pipe."""
    return subprocess.Popen(
        [simrun_exe(), *args],
        cwd=cwd,
        env=env or clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def stop_process(proc: subprocess.Popen[str], timeout_s: float = 30) -> None:
    """SIGTERM ``proc`` and wait; SIGKILL it when it has not ended within ``timeout_s``."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def write_work(path: Path, name: str = "work", **settings: Any) -> Path:
    """A workflow of one ``svc-work`` task with ``settings``."""
    doc = {"name": name, "tasks": [{"name": "work", "type": "svc-work", "settings": settings}]}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def calls(out: Path) -> dict[int, int]:
    """How often each unit of an ``svc-work`` task was computed, by index."""
    return {
        int(p.stem.split("-")[1]): len(p.read_text().splitlines())
        for p in sorted(out.glob("calls-*.log"))
    }


def done_units(out: Path) -> set[int]:
    """The units of an ``svc-work`` task that wrote their result."""
    return {int(p.stem.split("-")[1]) for p in out.glob("unit-*.json")}


def run_id_in(text: str) -> str:
    """The id of the run a command's output names first."""
    match = re.search(r"\brun (\d{8}-\d{6}-[0-9a-f]{6})\b", text)
    if match is None:
        raise AssertionError(f"no run id in the output:\n{text}")
    return match.group(1)


def command_after(text: str, prefix: str) -> list[str]:
    """The arguments of the first output line that starts (after blanks) with ``prefix``."""
    for line in text.splitlines():
        if line.strip().startswith(prefix):
            return line.split()
    raise AssertionError(f"no line starting with {prefix!r} in the output:\n{text}")


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found
