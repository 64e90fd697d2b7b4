"""simrun-exec against real commands: outputs, memory limits on a whole process tree,
timeouts, failures, retries with and without checkpoints, stops, and bad job files.

No Redis and no service: each test writes a job file, runs simrun-exec (in this process
through `exec_main`, or as a child process where its exit and its stderr matter) and reads
the report it wrote.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simrun.plugins import TaskPaths
from simrun.worker.command import run_command_job
from simrun.worker.exec.main import exec_main
from simrun.worker.exec.spec import CommandResult, CommandSpec
from tests.support.wait import wait_until

pytestmark = pytest.mark.e2e

PY = shlex.quote(sys.executable)
GIB = 2**30


# --- helpers -------------------------------------------------------------------------------


def make_spec(
    tmp_path: Path, command: str, inputs: dict[str, Path] | None = None, **changes: Any
) -> CommandSpec:
    paths = TaskPaths.for_task(tmp_path / "store", "run1", "task", inputs or {})
    fields: dict[str, Any] = {
        "command": command,
        "settings": {"greeting": "hello", "n": 3},
        "paths": paths,
        "limit_gb": 1.0,
    }
    fields.update(changes)
    return CommandSpec(**fields)


def run_in_process(tmp_path: Path, spec: CommandSpec) -> tuple[int, CommandResult]:
    job = tmp_path / "job.json"
    report = tmp_path / "report.json"
    job.write_text(json.dumps(spec.to_dict()))
    code = exec_main(["--job", str(job), "--report", str(report)])
    return code, CommandResult.from_dict(json.loads(report.read_text()))


def script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(0o755)
    return path


def process_state(pid: int) -> str | None:
    """The state letter of a process ('R', 'S', 'Z', ...), None when it is gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return data[data.rfind(b")") + 2 :].split()[0].decode()


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie (a killed orphan may wait to be reaped)."""
    return process_state(pid) not in (None, "Z")


def living_in_group(pgid: int) -> list[int]:
    """Living (non-zombie) processes of process group ``pgid``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            data = Path(f"/proc/{name}/stat").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != b"Z":
            found.append(int(name))
    return found


def wait_for_lines(path: Path, count: int, timeout_s: float = 20.0) -> list[int]:
    """The pids written to ``path``, once it holds ``count`` lines."""

    def lines() -> list[str]:
        found = path.read_text().split() if path.exists() else []
        return found if len(found) >= count else []

    got = wait_until(lines, timeout_s=timeout_s, what=f"{count} pids in {path}", poll_s=0.02)
    return [int(x) for x in got[:count]]


# A shell script that starts a background sleeper and a python child, writes the pids of
# all three (the shell first) to $1, and waits. The python child allocates $2 MiB in steps.
TREE = f"""#!/bin/sh
echo $$ > "$1"
{PY} -c '
import sys, time
with open(sys.argv[1], "a") as f:
    print(__import__("os").getpid(), file=f)
held = []
for _ in range(int(sys.argv[2]) // 10):
    held.append(b"\\1" * (10 * 2**20))
    time.sleep(0.01)
time.sleep(60)
' "$1" "$2" &
sleep 60 &
echo $! >> "$1"
wait
"""


# --- outcomes ------------------------------------------------------------------------------


def test_a_command_writes_its_output_and_is_reported_done(tmp_path: Path) -> None:
    """The expanded argv reaches the command (settings file, out, sorted inputs), the command
    runs in the task directory with its stdout logged, and a success reports done with
    exit code 0, one unit, its wall time and a measured peak memory above zero."""
    table = tmp_path / "heat-out"
    table.mkdir()
    (table / "summary.csv").write_text("a,b\n1,2\n")
    prog = script(
        tmp_path,
        "prog.py",
        """import json, os, pathlib, sys, time
settings, out, *ins = sys.argv[1:]
held = b"x" * (40 * 2**20)
time.sleep(0.3)
ports = dict(i.split("=", 1) for i in ins)
s = json.loads(pathlib.Path(settings).read_text())
text = pathlib.Path(ports["table"], "summary.csv").read_text()
pathlib.Path(out, "result.txt").write_text(f"{s['greeting']} {s['n']} {sorted(ports)} {text}")
print("cwd", os.getcwd())
""",
    )
    inputs = {"table": table, "b": tmp_path}
    spec = make_spec(tmp_path, f"{PY} {prog} {{settings}} {{out}} {{input}}", inputs)
    code, result = run_in_process(tmp_path, spec)
    task_dir = spec.paths.task_paths().task_dir
    assert code == 0
    assert result.outcome == "done"
    assert result.exit_code == 0
    assert result.error == ""
    assert (task_dir / "out" / "result.txt").read_text() == "hello 3 ['b', 'table'] a,b\n1,2\n"
    assert result.argv is not None
    assert list(result.argv[2:]) == [
        str(task_dir / "settings.json"),
        str(task_dir / "out"),
        f"b={tmp_path}",
        f"table={table}",
    ]
    assert json.loads((task_dir / "settings.json").read_text()) == {"greeting": "hello", "n": 3}
    assert (task_dir / "logs" / "attempt-1.out").read_text() == f"cwd {task_dir}\n"
    assert result.report.units == 1
    assert result.report.killed_for_memory is False
    assert result.report.limit_gb == 1.0
    assert len(result.report.peak_memory_gb) == 1
    assert result.report.peak_memory_gb[0] > 40 * 2**20 / GIB
    assert result.report.seconds_per_unit is not None
    assert result.report.seconds_per_unit > 0.3


def test_a_tree_over_its_memory_limit_is_killed_whole(tmp_path: Path) -> None:
    """When a grandchild makes the tree's anonymous memory pass limit_gb, every process of
    the tree's group is killed and the report says killed_for_memory with the peak above
    the limit."""
    tree = script(tmp_path, "tree.sh", TREE)
    pids_file = tmp_path / "pids"
    spec = make_spec(tmp_path, f"sh {tree} {pids_file} 300", limit_gb=0.1)
    code, result = run_in_process(tmp_path, spec)
    shell, child, sleeper = wait_for_lines(pids_file, 3, timeout_s=1)
    assert code == 1
    assert result.outcome == "killed"
    assert result.report.killed_for_memory is True
    assert result.report.units == 0
    assert result.report.seconds_per_unit is None
    assert result.report.peak_memory_gb[0] > 0.1
    assert result.signal == "SIGKILL"
    assert "more than its limit of 0.1 GiB" in result.error.splitlines()[0]
    assert living_in_group(shell) == []
    assert not alive(child)
    assert not alive(sleeper)


def test_a_command_past_its_timeout_is_killed(tmp_path: Path) -> None:
    """Past timeout_s the command and its group are killed and the outcome is timeout, not
    a memory kill."""
    # The shell only forks: it writes both pids long before the timeout, even on a busy host.
    tree = script(tmp_path, "sleepy.sh", '#!/bin/sh\nsleep 60 &\necho $$ $! > "$1"\nwait\n')
    pids_file = tmp_path / "pids"
    spec = make_spec(tmp_path, f"sh {tree} {pids_file}", timeout_s=1.0)
    code, result = run_in_process(tmp_path, spec)
    shell, sleeper = wait_for_lines(pids_file, 2, timeout_s=1)
    assert code == 1
    assert result.outcome == "timeout"
    assert result.report.killed_for_memory is False
    assert "timeout of 1 s" in result.error.splitlines()[0]
    assert living_in_group(shell) == []
    assert not alive(sleeper)


def test_a_failing_command_reports_its_exit_code_and_stderr_tail(tmp_path: Path) -> None:
    """A non-zero exit is failed with that exit code; the error's first line says so and is
    followed by the last 50 lines of the command's stderr."""
    prog = script(
        tmp_path,
        "fail.py",
        "import sys\nfor i in range(100):\n    print(f'line {i}', file=sys.stderr)\nsys.exit(3)\n",
    )
    code, result = run_in_process(tmp_path, make_spec(tmp_path, f"{PY} {prog}"))
    lines = result.error.splitlines()
    assert code == 1
    assert result.outcome == "failed"
    assert result.exit_code == 3
    assert lines[0] == "the command exited with code 3"
    assert lines[-50:] == [f"line {i}" for i in range(50, 100)]
    assert "line 49" not in lines
    assert result.report.units == 0


def test_a_command_killed_by_someone_else_is_failed_with_its_signal(tmp_path: Path) -> None:
    """A command that dies from a signal simrun-exec did not send is failed, with no exit
    code, the signal's name, and no memory kill."""
    code, result = run_in_process(tmp_path, make_spec(tmp_path, "sh -c 'kill -KILL $$'"))
    assert code == 1
    assert result.outcome == "failed"
    assert result.exit_code is None
    assert result.signal == "SIGKILL"
    assert result.report.killed_for_memory is False
    assert "killed by SIGKILL" in result.error


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (
            "simrun-no-such-program-xyz {out}",
            "command 'simrun-no-such-program-xyz' not found on PATH nor beside simrun (",
        ),
        ("/nonexistent/bin/prog", "command '/nonexistent/bin/prog' does not exist"),
    ],
)
def test_a_missing_program_is_a_clear_failure(tmp_path: Path, command: str, message: str) -> None:
    """A program that is not on PATH nor beside simrun's interpreter (or not at its path)
    fails with one line naming it (and where it was looked for), and no memory is reported
    since nothing ran."""
    code, result = run_in_process(tmp_path, make_spec(tmp_path, command))
    assert code == 1
    assert result.outcome == "failed"
    assert result.error.startswith(message)
    assert "\n" not in result.error
    assert result.exit_code is None
    assert result.report.peak_memory_gb == ()


def test_a_bad_template_fails_before_touching_the_output(tmp_path: Path) -> None:
    """A template that cannot be expanded fails naming it, and a retried task's output is
    not cleared for a command that cannot run."""
    spec = make_spec(tmp_path, "prog {foo} {out}", attempt=2)
    spec.paths.task_paths().out.mkdir(parents=True)
    (spec.paths.task_paths().out / "keep").write_text("x")
    code, result = run_in_process(tmp_path, spec)
    assert code == 1
    assert result.outcome == "failed"
    assert "'{foo}'" in result.error
    assert (spec.paths.task_paths().out / "keep").exists()


@pytest.mark.parametrize(
    ("checkpoints", "attempt", "kept"),
    [(False, 1, True), (False, 2, False), (True, 2, True), (True, 1, True)],
)
def test_a_retry_starts_clean_unless_the_type_checkpoints(
    tmp_path: Path, checkpoints: bool, attempt: int, kept: bool
) -> None:
    """Without checkpoints, an attempt above 1 starts from an empty output directory; with
    checkpoints (or on the first attempt) what is there stays."""
    spec = make_spec(
        tmp_path, "sh -c 'echo new > $0/new' {out}", checkpoints=checkpoints, attempt=attempt
    )
    spec.paths.task_paths().out.mkdir(parents=True)
    (spec.paths.task_paths().out / "sub").mkdir()
    (spec.paths.task_paths().out / "sub" / "old").write_text("old")
    code, result = run_in_process(tmp_path, spec)
    assert code == 0
    assert result.outcome == "done"
    assert (spec.paths.task_paths().out / "new").read_text() == "new\n"
    assert (spec.paths.task_paths().out / "sub" / "old").exists() is kept
    assert (spec.paths.task_paths().task_dir / "logs" / f"attempt-{attempt}.err").exists()


# --- simrun-exec as a process --------------------------------------------------------------


def exec_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "simrun.worker.exec", *args]


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("{not json", "is not JSON"),
        ('{"version": 1}', "field 'command' is missing"),
        (None, "field 'limit_gb' must be a finite number > 0, got 'abc'"),
        (None, "unknown field 'colour'"),
    ],
)
def test_a_bad_job_file_gives_one_line_and_a_report(
    tmp_path: Path, content: str | None, words: str
) -> None:
    """A job file that is not JSON or has a bad field makes simrun-exec exit 2 with exactly
    one line on stderr naming the file and the field, no traceback, and a failed report."""
    job = tmp_path / "job.json"
    if content is None:
        data = make_spec(tmp_path, "true").to_dict()
        data |= {"limit_gb": "abc"} if "limit_gb" in words else {"colour": "red"}
        content = json.dumps(data)
    job.write_text(content)
    report = tmp_path / "report.json"
    proc = subprocess.run(
        exec_cmd("--job", str(job), "--report", str(report)), capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"simrun-exec: job file '{job}'")
    assert words in proc.stderr
    result = CommandResult.from_dict(json.loads(report.read_text()))
    assert result.outcome == "failed"
    assert words in result.error


def test_the_console_script_runs_a_job(tmp_path: Path) -> None:
    """The installed simrun-exec script runs a job, exits 0 and writes the report to the
    default place when neither --report nor the job names one."""
    exe = Path(sys.executable).parent / "simrun-exec"
    assert exe.exists(), "simrun-exec is not installed: pip install -e ."
    spec = make_spec(tmp_path, "sh -c 'echo ok > $0/ok' {out}")
    job = tmp_path / "job.json"
    job.write_text(json.dumps(spec.to_dict()))
    proc = subprocess.run([str(exe), "--job", str(job)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    report = spec.paths.task_paths().task_dir / "logs" / "attempt-1.report.json"
    assert CommandResult.from_dict(json.loads(report.read_text())).outcome == "done"
    assert (spec.paths.task_paths().out / "ok").read_text() == "ok\n"


def test_sigterm_is_forwarded_to_the_command_tree_and_reported(tmp_path: Path) -> None:
    """SIGTERM to simrun-exec stops the command's whole group and still writes a report
    saying the command was killed; simrun-exec exits non-zero."""
    tree = script(tmp_path, "tree.sh", TREE)
    pids_file = tmp_path / "pids"
    spec = make_spec(tmp_path, f"sh {tree} {pids_file} 10")
    job = tmp_path / "job.json"
    job.write_text(json.dumps(spec.to_dict()))
    report = tmp_path / "report.json"
    proc = subprocess.Popen(
        exec_cmd("--job", str(job), "--report", str(report)), stderr=subprocess.PIPE, text=True
    )
    shell, child, sleeper = wait_for_lines(pids_file, 3)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=20)
    result = CommandResult.from_dict(json.loads(report.read_text()))
    assert proc.returncode == 1
    assert result.outcome == "killed"
    assert result.report.killed_for_memory is False
    assert "asked to stop" in result.error
    assert "asked to stop" in stderr
    assert living_in_group(shell) == []
    assert not alive(child)
    assert not alive(sleeper)


# --- the asyncio API -----------------------------------------------------------------------


async def test_run_command_job_returns_the_report(tmp_path: Path) -> None:
    """run_command_job runs simrun-exec as a child and returns the result it reported."""
    spec = make_spec(tmp_path, "sh -c 'echo ok > $0/ok; echo oops >&2; exit 4' {out}")
    result = await run_command_job(spec, tmp_path / "jobs")
    assert result.outcome == "failed"
    assert result.exit_code == 4
    assert result.error.splitlines()[-1] == "oops"
    assert (spec.paths.task_paths().out / "ok").read_text() == "ok\n"
    assert len(list((tmp_path / "jobs").glob("attempt-1-*.job.json"))) == 1


async def test_cancelling_run_command_job_stops_the_command(tmp_path: Path) -> None:
    """Cancelling run_command_job stops the command's whole tree before the cancellation
    goes on, and simrun-exec still leaves a report saying killed."""
    tree = script(tmp_path, "tree.sh", TREE)
    pids_file = tmp_path / "pids"
    spec = make_spec(tmp_path, f"sh {tree} {pids_file} 10")
    task = asyncio.create_task(run_command_job(spec, tmp_path / "jobs"))
    shell, child, sleeper = await asyncio.to_thread(wait_for_lines, pids_file, 3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert living_in_group(shell) == []
    assert not alive(child)
    assert not alive(sleeper)
    (report,) = (tmp_path / "jobs").glob("*.report.json")
    assert CommandResult.from_dict(json.loads(report.read_text())).outcome == "killed"
