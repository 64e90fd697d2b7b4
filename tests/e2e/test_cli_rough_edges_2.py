"""More rough edges of issue 14 through the real ``simrun`` command: tables off a terminal,
"did you mean `tasks`", one meaning of ``--memory-gb``, a quiet ``--resume`` and the
service's "listening on" line."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from simrun.local.machine import free_port
from tests.support.cli_harness import (
    WORK,
    Output,
    command_after,
    run_id_in,
    simrun,
    start_simrun,
    stop_process,
    write_work,
)
from tests.support.redis_server import key_prefix

pytestmark = pytest.mark.e2e


def test_a_table_off_a_terminal_keeps_each_path_whole(tmp_path: Path) -> None:
    """The summary table `simrun run` prints into a pipe (no TTY) shows a task's output
    path on one line, however long, rather than folding it mid-word at 120 columns."""
    deep = tmp_path / ("a-rather-long-directory-name-" * 3) / "and-another-one-below-it"
    write_work(tmp_path / "quick.yaml", name="quick", units=2)
    store = deep / "store"
    result = simrun(
        "run", "quick.yaml", "--plugins", WORK, "--processes", "1", "--store", str(store),
        cwd=tmp_path, env=None,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    out = str(store / "runs" / run_id_in(result.stdout) / "work" / "out")
    assert len(out) > 120
    table = [line for line in result.stdout.splitlines() if "│" in line]
    assert any(out in line for line in table), result.stdout


def test_a_misspelled_top_level_field_says_did_you_mean(tmp_path: Path) -> None:
    """`task:` at the top of a workflow is refused with "did you mean 'tasks'?" (and a
    task's `typ:` with 'type'), naming the line; exit 2."""
    wf = tmp_path / "wf.yaml"
    wf.write_text("task:\n  - name: work\n    typ: svc-work\n")
    result = simrun("validate", str(wf), cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "line 1: task: unknown field (did you mean 'tasks'?)" in result.stderr
    wf.write_text("tasks:\n  - name: work\n    typ: svc-work\n")
    result = simrun("validate", str(wf), cwd=tmp_path)
    assert "line 3: task 'work', typ: unknown field (did you mean 'type'?)" in result.stderr


def test_worker_memory_gb_is_the_container_and_memory_gb_its_old_name_on_run(
    tmp_path: Path,
) -> None:
    """`simrun run --worker-memory-gb` is the memory of each worker container (its help
    says so; `--memory-gb` is not offered there any more, as it means memory per process
    on `replay`); the old `--memory-gb` still works with a one-line notice."""
    wf = tmp_path / "wf.yaml"
    wf.write_text("tasks:\n  - name: work\n    type: svc-work\n    settings: {units: 2}\n")
    args = ("run", str(wf), "--plugins", WORK, "--dry-run", "--processes", "2")
    small = simrun(*args, "--worker-memory-gb", "0.1", cwd=tmp_path)
    assert small.returncode == 2, small.stdout + small.stderr
    assert "cannot run on this pool" in small.stdout
    old = simrun(*args, "--memory-gb", "0.1", cwd=tmp_path)
    assert old.returncode == 2, old.stdout + old.stderr
    assert "old name of --worker-memory-gb" in old.stderr
    assert len([x for x in old.stderr.splitlines() if "--memory-gb" in x]) == 1, old.stderr
    both = simrun(*args, "--memory-gb", "1", "--worker-memory-gb", "1", cwd=tmp_path)
    assert both.returncode == 2
    assert "give --worker-memory-gb only" in both.stderr
    for command in (("run",), ("submit",), ("scale",)):
        helped = simrun(*command, "--help", cwd=tmp_path).stdout
        assert "--worker-memory-gb" in helped, command
        assert "--memory-gb " not in helped, command
    assert "--memory-gb" in simrun("replay", "--help", cwd=tmp_path).stdout


def test_a_normal_resume_logs_no_warning_about_jobs_lost_from_redis(tmp_path: Path) -> None:
    """After Ctrl-C, `simrun run --resume` starts a fresh private Redis: the jobs the first
    session left in flight are dispatched again with an INFO line that says so, and the
    service's log has no WARNING about jobs "lost from Redis"."""
    write_work(tmp_path / "slow.yaml", units=12, seconds=0.3)
    proc = start_simrun("run", "slow.yaml", "--plugins", WORK, "--processes", "2", cwd=tmp_path)
    store = tmp_path / "simrun-store"
    deadline = time.monotonic() + 60
    while not list(store.glob("runs/*/work/out/unit-*.json")):
        assert proc.poll() is None
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    resume = command_after(output, "simrun run --resume")
    finished = simrun(*resume[1:], cwd=tmp_path)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    log = (store / "logs" / "service.log").read_text()
    assert "lost from Redis" not in log, log
    assert not [x for x in log.splitlines() if " WARNING " in x], log


def test_the_service_says_where_it_listens(tmp_path: Path, redis_url: str) -> None:
    """`simrun service` prints "simrun service listening on http://HOST:PORT" once its
    HTTP API answers."""
    port = free_port()
    svc = start_simrun(
        "service", "--port", str(port), "--redis-url", redis_url,
        "--prefix", key_prefix("listen"), "--store", str(tmp_path / "store"), cwd=tmp_path,
    )  # fmt: skip
    output = Output(svc)
    line = f"simrun service listening on http://127.0.0.1:{port}"
    try:
        output.wait_for(lambda text: line in text, timeout_s=30)
    finally:
        stop_process(svc)
    assert line in output.text(), output.text()
