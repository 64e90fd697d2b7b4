"""Helpers of the command line's end-to-end tests: the real ``simrun`` console script as a
child process, a clean environment for it, workflows of the service's test task type, and
readings of what the units did."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.support import REPO

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


def run_module(
    module: str, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m MODULE ARGS`` (this Python) to its end; output as text."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
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


class Output:
    """The stdout of a running process, read by a thread as it comes (to its end)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None, "start the process with stdout=PIPE"
        self._stream = proc.stdout
        self._lines: list[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._stream:
            self._lines.append(line)

    def wait_for(self, done: Callable[[str], bool], timeout_s: float = 60) -> None:
        """Return once ``done(what it wrote so far)`` is true, the output ended, or
        ``timeout_s`` passed (the test's assertions then say what was missing)."""
        deadline = time.monotonic() + timeout_s
        while not done("".join(self._lines)) and self._thread.is_alive():
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)

    def text(self, timeout_s: float = 30) -> str:
        """All it wrote, once its stdout ended (at most ``timeout_s`` from now)."""
        self._thread.join(timeout_s)
        return "".join(self._lines)


def wait_for_workers(
    url: str, procs: list[subprocess.Popen[str]], workers: int = 1, timeout_s: float = 60
) -> None:
    """Until the service at ``url`` answers /health with ``workers`` live workers; fails at
    once when one of ``procs`` (the service, the workers) ended, with what it printed."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        for proc in procs:
            assert proc.poll() is None, proc.communicate()[0]
        try:
            if httpx.get(f"{url}/health", timeout=1).json().get("workers") == workers:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the service or the worker did not start"
        time.sleep(0.1)
