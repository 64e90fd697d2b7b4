"""What a ``simrun-exec`` command does beyond its own process stays inside its bounds (the
command neighbours of issue 11, items 7-9): a daemon it leaves behind (a double fork and
``setsid``) counts toward its memory limit and ends with it however the command ends; a
kill by the kernel's OOM killer is a kill for memory with the limit; and its stdout and
stderr logs keep their head and tail up to a cap.

Real processes: simrun-exec as a child process (``python -m simrun.worker.exec``) running
the commands of `tests.support.exec_commands`, and real burst worker containers with a
private Redis for the path from ``simrun worker`` options down to simrun-exec.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simrun.plugins import TaskPaths
from simrun.worker.exec.spec import CommandResult, CommandSpec
from tests.support import REPO
from tests.support.harness import make_spec as make_job
from tests.support.harness import run_burst, run_id
from tests.support.procs import alive, wait_dead
from tests.support.wait import wait_until

pytestmark = pytest.mark.e2e

GIB = 2**30
MIB = 2**20
SCRIPT = REPO / "tests" / "support" / "exec_commands.py"
CMD = f"{sys.executable} {SCRIPT}"
#: How far past the cap a capped log may go: the note on what was dropped.
NOTE_BYTES = 512


def cgroups_here() -> str | None:
    """Why simrun-exec gets no memory cgroup on this machine, None when it does."""
    from simrun.worker.cgroups import detect

    found = detect()
    return None if found.usable else found.reason


def own_memory_cgroup() -> Path | None:
    from simrun.worker.cgroups import detect

    found = detect(probe=False)
    return None if found.own is None else found.own.path


@pytest.fixture
def daemons() -> Iterator[list[Path]]:
    """Pid files of daemons a test starts: any still alive at the end is killed (so a
    failing test leaves nothing behind), after the test's own checks."""
    files: list[Path] = []
    yield files
    for path in files:
        if path.exists():
            pid = int(path.read_text())
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def spec_for(tmp_path: Path, command: str, **changes: Any) -> CommandSpec:
    paths = TaskPaths.for_task(tmp_path / "store", "run1", "task", {})
    fields: dict[str, Any] = {"command": command, "settings": {}, "paths": paths, "limit_gb": 1.0}
    fields.update(changes)
    return CommandSpec(**fields)


def start_exec(tmp_path: Path, spec: CommandSpec) -> tuple[subprocess.Popen[str], Path]:
    job = tmp_path / "job.json"
    report = tmp_path / "report.json"
    job.write_text(json.dumps(spec.to_dict()))
    proc = subprocess.Popen(
        [sys.executable, "-m", "simrun.worker.exec", "--job", str(job), "--report", str(report)],
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, report


def finish_exec(proc: subprocess.Popen[str], report: Path) -> tuple[CommandResult, str]:
    _, stderr = proc.communicate(timeout=60)
    return CommandResult.from_dict(json.loads(report.read_text())), stderr


def wait_for_pid(path: Path, timeout_s: float = 20.0) -> int:
    """The pid a daemon wrote to ``path``."""
    wait_until(path.exists, timeout_s=timeout_s, what=f"a daemon to write {path}", poll_s=0.01)
    return int(path.read_text())


def no_cgroup_left(exec_pid: int) -> list[str]:
    """The cgroups simrun-exec ``exec_pid`` left under this process's memory cgroup."""
    own = own_memory_cgroup()
    if own is None:
        return []
    return [p.name for p in own.iterdir() if p.name.startswith(f"simrun-w{exec_pid}-")]


MODES = [
    pytest.param("auto", id="cgroup"),
    pytest.param("off", id="tree"),
]


def skip_without_cgroups(mode: str) -> None:
    if mode == "auto" and (why := cgroups_here()) is not None:
        pytest.skip(f"no memory cgroup for a command here: {why}")


# --- an escaping daemon ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_an_escaped_daemon_counts_toward_the_limit_and_is_killed_with_the_command(
    tmp_path: Path, mode: str, daemons: list[Path]
) -> None:
    """A daemon of the command that escapes its tree and group (double fork + setsid)
    holding 700 MiB under a 0.25 GiB limit is measured and killed: the command is killed
    for memory with the limit (so the retry is an OOM retry), its peak is past the limit,
    the daemon is gone afterwards, no cgroup is left, and the result says which
    isolation was used (a cgroup by default where the kernel gives one, else the tree)."""
    skip_without_cgroups(mode)
    pid_file = tmp_path / "daemon.pid"
    daemons.append(pid_file)
    spec = spec_for(
        tmp_path, f"{CMD} escape {pid_file} 700 60", limit_gb=0.25, timeout_s=20.0, cgroups=mode
    )
    proc, report = start_exec(tmp_path, spec)
    result, stderr = finish_exec(proc, report)
    daemon = wait_for_pid(pid_file, timeout_s=1)
    assert result.outcome == "killed", (result.error, stderr)
    assert result.report.killed_for_memory is True
    assert result.report.limit_gb == pytest.approx(0.25)
    assert result.report.peak_memory_gb[0] > 0.25, result.report
    assert wait_dead(daemon), f"the daemon {daemon} outlived its command"
    assert no_cgroup_left(proc.pid) == []
    expected = "memory cgroup" if mode == "auto" else "process tree"
    assert expected in result.isolation, result.isolation


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ending", ["done", "timeout", "sigterm"])
def test_a_daemon_left_behind_ends_with_its_command(
    tmp_path: Path, mode: str, ending: str, daemons: list[Path]
) -> None:
    """However the command ends (its main process exits 0, it passes its timeout, or
    simrun-exec is SIGTERMed), the daemon it started with a double fork and setsid ends
    with it, and simrun-exec leaves no cgroup behind."""
    skip_without_cgroups(mode)
    pid_file = tmp_path / "daemon.pid"
    daemons.append(pid_file)
    wait_s = {"done": 0.0, "timeout": 60.0, "sigterm": 60.0}[ending]
    timeout_s = 2.0 if ending == "timeout" else 40.0
    spec = spec_for(
        tmp_path, f"{CMD} escape {pid_file} 20 {wait_s}", timeout_s=timeout_s, cgroups=mode
    )
    proc, report = start_exec(tmp_path, spec)
    daemon = wait_for_pid(pid_file)
    if ending == "sigterm":
        proc.send_signal(signal.SIGTERM)
    result, stderr = finish_exec(proc, report)
    expected = {"done": "done", "timeout": "timeout", "sigterm": "killed"}[ending]
    assert result.outcome == expected, (result.error, stderr)
    assert result.report.killed_for_memory is False
    assert wait_dead(daemon), f"the daemon {daemon} outlived its command ({ending})"
    assert no_cgroup_left(proc.pid) == []


def test_a_kernel_oom_kill_in_a_command_is_a_kill_for_memory_with_the_limit(
    tmp_path: Path, daemons: list[Path]
) -> None:
    """600 MiB of shared anonymous memory (not RssAnon, so the sampler never sees it) in an
    escaped daemon under a 0.25 GiB limit is stopped by the kernel at the command cgroup's
    limit; simrun-exec reads the OOM kill counter and reports the command killed for
    memory with its limit, the kernel named in the error, and nothing left running."""
    skip_without_cgroups("auto")
    pid_file = tmp_path / "daemon.pid"
    daemons.append(pid_file)
    spec = spec_for(
        tmp_path, f"{CMD} escape {pid_file} 600 60 shared", limit_gb=0.25, timeout_s=20.0
    )
    proc, report = start_exec(tmp_path, spec)
    result, stderr = finish_exec(proc, report)
    daemon = wait_for_pid(pid_file, timeout_s=1)
    assert result.outcome == "killed", (result.error, stderr)
    assert result.report.killed_for_memory is True
    assert result.report.limit_gb == pytest.approx(0.25)
    assert "OOM killer" in result.error.splitlines()[0]
    assert result.report.peak_memory_gb[0] > 0.25, result.report
    assert wait_dead(daemon)
    assert no_cgroup_left(proc.pid) == []


# --- logs -----------------------------------------------------------------------------------


def check_capped(path: Path, name: str, cap: int, printed: int) -> None:
    data = path.read_bytes()
    assert len(data) <= cap + NOTE_BYTES, f"{path} holds {len(data)} bytes, cap {cap}"
    assert data.startswith(f"HEAD {name}\n".encode())
    assert data.endswith(f"TAIL {name}\n".encode())
    dropped = printed - cap
    assert f"dropped {dropped} bytes".encode() in data, data[cap // 2 : cap // 2 + 300]


def test_the_logs_of_a_command_are_capped_by_default(tmp_path: Path) -> None:
    """A command printing 66 MiB to stdout and as much to stderr leaves log files of at most
    the default cap (64 MiB) each, plus a note where they were cut saying how many bytes
    were dropped; the head and the tail of each stream are kept."""
    spec = spec_for(tmp_path, f"{CMD} chatty 66")
    proc, report = start_exec(tmp_path, spec)
    result, stderr = finish_exec(proc, report)
    assert result.outcome == "done", (result.error, stderr)
    printed = 66 * MIB + len(b"HEAD out\n") + len(b"TAIL out\n")
    for name, key in (("out", "stdout"), ("err", "stderr")):
        check_capped(Path(result.logs[key]), name, 64 * MIB, printed)


async def test_a_worker_bounds_command_memory_and_logs_as_its_options_say(
    redis_url: str, redis_prefix: str, tmp_path: Path, daemons: list[Path]
) -> None:
    """Through a worker container: a command job printing 50 MiB to each stream under the
    worker's ``command_log_cap`` of 1 MiB leaves logs of 1 MiB each with head, tail and
    the dropped count; a command job whose escaped daemon holds 700 MiB under 0.25 GiB is
    reported killed for memory with its limit, and the daemon is gone."""
    store = tmp_path / "store"
    run = run_id(redis_prefix)
    chatty = make_job(store, "chatty", "test-chatty", kind="command", run=run)
    hog = make_job(
        store, "hog", "test-escape", kind="command", run=run, base_gb=0.25, memory_gb=0.0,
        timeout_s=20.0,
    )  # fmt: skip
    pid_file = Path(hog.paths.out) / "daemon.pid"  # the type's command writes it there
    daemons.append(pid_file)
    _, reports = await run_burst(
        redis_url, redis_prefix, [chatty, hog], memory_gb=2.0, command_log_cap=MIB
    )
    entry = reports[chatty.job_id]
    assert entry.outcomes == {"command": "done"}, entry.errors
    logs = Path(chatty.paths.task_dir) / "logs"
    printed = 50 * MIB + len(b"HEAD out\n") + len(b"TAIL out\n")
    check_capped(logs / "attempt-1.out", "out", MIB, printed)
    check_capped(logs / "attempt-1.err", "err", MIB, printed)
    entry = reports[hog.job_id]
    assert entry.outcomes == {"command": "killed"}, entry.errors
    assert entry.report.killed_for_memory is True
    assert entry.report.limit_gb == pytest.approx(0.25)
    assert wait_dead(wait_for_pid(pid_file, timeout_s=1))
