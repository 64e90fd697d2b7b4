"""Helpers of the command line's end-to-end tests: the real ``simrun`` console script as a
child process, a clean environment for it, workflows of the service's test task type, and
readings of what the units did."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support import REPO
from tests.support.wait import WaitTimeout, wait_until

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


def wait_for_the_guard(store: Path, timeout_s: float = 30) -> None:
    """Return once no worker of a killed `simrun run` on ``store`` is left (its guard ends
    them, `simrun.local.guard`)."""
    wait_until(
        lambda: not processes_mentioning(str(store)),
        timeout_s=timeout_s,
        what=f"the guard to end the workers on {store}",
    )


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
        with contextlib.suppress(WaitTimeout):
            wait_until(
                lambda: done("".join(self._lines)) or not self._thread.is_alive(),
                timeout_s=timeout_s,
                what="the output",
            )

    def text(self, timeout_s: float = 30) -> str:
        """All it wrote, once its stdout ended (at most ``timeout_s`` from now)."""
        self._thread.join(timeout_s)
        return "".join(self._lines)


def ended(*procs: subprocess.Popen[Any]) -> Callable[[], None]:
    """The ``check`` of a wait on ``procs``: fails with what one printed (or its exit code)
    once it ended."""

    def check() -> None:
        for proc in procs:
            assert proc.poll() is None, proc.communicate()[0] or f"exit code {proc.returncode}"

    return check


def health(url: str) -> dict[str, Any] | None:
    """What the service at ``url`` answers on /health (None while it does not answer)."""
    try:
        answer = httpx.get(f"{url}/health", timeout=1)
    except httpx.HTTPError:
        return None
    return dict(answer.json()) if answer.status_code == 200 else None


def wait_for_service(url: str, proc: subprocess.Popen[str], timeout_s: float = 30) -> Any:
    """What /health answers once the service at ``url`` answers it; fails at once, with
    what it printed, when ``proc`` (the service) ended."""
    what = f"the service at {url} to answer /health"
    return wait_until(lambda: health(url), timeout_s=timeout_s, what=what, check=ended(proc))


def wait_for_workers(
    url: str,
    procs: list[subprocess.Popen[str]],
    workers: int = 1,
    timeout_s: float = 60,
    check: Callable[[], None] | None = None,
) -> None:
    """Until the service at ``url`` answers /health with ``workers`` live workers; fails at
    once when one of ``procs`` (the service, the workers) ended, with what it printed (or
    as ``check`` says)."""

    def live() -> bool:
        return (health(url) or {}).get("workers") == workers

    what = f"the service and its {workers} worker(s) to start"
    wait_until(live, timeout_s=timeout_s, what=what, check=check or ended(*procs), poll_s=0.1)


def wait_for_a_done_unit(proc: subprocess.Popen[str], store: Path, timeout_s: float = 60) -> None:
    """Return once a unit of a run in ``store`` is done; ``proc`` must run meanwhile."""
    wait_until(
        lambda: list(store.glob("runs/*/work/out/unit-*.json")),
        timeout_s=timeout_s,
        what=f"a done unit in {store}",
        check=ended(proc),
    )
