"""``simrun run`` (embedded mode) as a user runs it: the real console script as a child
process, in a fresh directory, starting its own redis-server, service and workers."""

from __future__ import annotations

import contextlib
import csv
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from simrun.local.machine import free_port
from tests.support import REPO
from tests.support.cli_harness import (
    WORK,
    clean_env,
    command_after,
    processes_mentioning,
    run_id_in,
    simrun,
    start_simrun,
    wait_for_a_done_unit,
    write_work,
)
from tests.support.units import calls, done_units
from tests.support.wait import WaitTimeout, wait_until

pytestmark = pytest.mark.e2e
#: The tests of the module fixture `heat` (two runs of the demo), in one pytest-xdist worker
#: (--dist loadgroup) so that it runs once.
HEAT_GROUP = pytest.mark.xdist_group("cli-run-heat")


@dataclass(frozen=True)
class HeatRuns:
    """A fresh directory with a copy of examples/, and what its first commands printed."""

    home: Path
    dry: subprocess.CompletedProcess[str]
    store_after_dry: bool
    first: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def heat(tmp_path_factory: pytest.TempPathFactory) -> HeatRuns:
    """`simrun run examples/heat.yaml --dry-run`, then `simrun run examples/heat.yaml`, in a
    fresh directory as the README says."""
    home = tmp_path_factory.mktemp("newcomer")
    shutil.copytree(REPO / "examples", home / "examples")
    dry = simrun("run", "examples/heat.yaml", "--dry-run", cwd=home)
    store_after_dry = (home / "simrun-store").exists()
    first = simrun("run", "examples/heat.yaml", cwd=home)
    return HeatRuns(home, dry, store_after_dry, first)


@HEAT_GROUP
def test_dry_run_creates_nothing_and_prints_the_forecast(heat: HeatRuns) -> None:
    """--dry-run checks the workflow, counts the units, resolves the resources and prints
    the forecast on this machine's pool, and writes nothing: no store, no database."""
    assert heat.dry.returncode == 0, heat.dry.stdout + heat.dry.stderr
    assert not heat.store_after_dry
    out = heat.dry.stdout
    sweep = next(line for line in out.splitlines() if line.startswith("sweep"))
    assert sweep.split()[:4] == ["sweep", "heat", "24", "cpu"]
    assert "plugin hint" in sweep
    assert "pool: 1 worker container x" in out
    assert "forecast:" in out
    assert "ETA unknown until the seconds per unit are learned" in out
    assert "nothing was started, enqueued or written" in out


@HEAT_GROUP
def test_run_of_the_demo_succeeds_and_writes_its_outputs(heat: HeatRuns) -> None:
    """`simrun run examples/heat.yaml` in a fresh directory exits 0, writes every point of
    the sweep and the report into ./simrun-store, and ends with a summary of each task's
    units, time, memory per process (requested and peak), kills and outputs; the processes
    it started are gone."""
    result = heat.first
    assert result.returncode == 0, result.stdout + result.stderr
    run_id = run_id_in(result.stdout)
    run_dir = heat.home / "simrun-store" / "runs" / run_id
    with (run_dir / "sweep" / "out" / "summary.csv").open() as fh:
        assert [int(r["index"]) for r in csv.DictReader(fh)] == list(range(24))
    assert "Heat sweep of a plate" in (run_dir / "summary" / "out" / "report.md").read_text()
    assert f"run {run_id} succeeded" in result.stdout
    assert f"simrun-store/runs/{run_id}/sweep/out" in result.stdout
    header = next(x for x in result.stdout.splitlines() if "peak/process" in x)
    assert [c.strip() for c in header.split("┃")[1:-1]] == [
        "task", "units", "time", "memory/process", "peak/process", "kills", "outputs"
    ]  # fmt: skip
    sweep = next(x for x in result.stdout.splitlines() if x.startswith("│ sweep"))
    assert [c.strip() for c in sweep.split("│")[2:3] + sweep.split("│")[6:7]] == ["24/24", "0"]
    assert "Traceback" not in result.stdout + result.stderr
    assert processes_mentioning(str(heat.home / "simrun-store")) == []


@HEAT_GROUP
def test_second_run_shows_an_eta_learned_from_the_first(heat: HeatRuns) -> None:
    """After one run, the forecast of the same workflow uses what was learned: the seconds
    per unit and memory come from the store, and the ETA is a number (--no-reuse: the
    tasks run again rather than reuse the first run's outputs)."""
    assert heat.first.returncode == 0, heat.first.stdout + heat.first.stderr
    second = simrun("run", "examples/heat.yaml", "--no-reuse", cwd=heat.home)
    assert second.returncode == 0, second.stdout + second.stderr
    before_start = second.stdout.split("submitted")[0]
    sweep = next(line for line in before_start.splitlines() if line.startswith("sweep"))
    assert "learned from 1 run" in sweep
    assert "s/unit" in sweep
    forecast = next(line for line in before_start.splitlines() if line.startswith("forecast"))
    assert "ETA unknown" not in forecast
    assert forecast.split("ETA ")[1].endswith(" s")


def test_a_failed_unit_is_named_and_replay_finishes_without_recomputing(tmp_path: Path) -> None:
    """A unit that fails makes `simrun run` exit non-zero naming the task, the unit and the
    error, with the replay command; once the cause is gone that command finishes the run
    and the units that were done are not computed again."""
    flag = tmp_path / "broken"
    flag.touch()
    write_work(
        tmp_path / "wf.yaml", units=6, seconds=0.05, fail_flag=str(flag), fail_indices=[2, 4]
    )
    failed = simrun("run", "wf.yaml", "--plugins", WORK, "--max-retries", "0", cwd=tmp_path)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    run_id = run_id_in(failed.stdout)
    for index in (2, 4):
        assert (
            f"task 'work', unit {index}: RuntimeError: unit {index} fails on purpose"
            in failed.stdout
        )
    replay = command_after(failed.stdout, "simrun replay")
    assert replay == ["simrun", "replay", run_id, "--store", "simrun-store", "--plugins", WORK]
    out = tmp_path / "simrun-store" / "runs" / run_id / "work" / "out"
    assert done_units(out) == {0, 1, 3, 5}

    flag.unlink()
    again = simrun(*replay[1:], cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"run {run_id} succeeded" in again.stdout
    assert done_units(out) == set(range(6))
    assert calls(out) == {0: 1, 1: 1, 2: 2, 3: 1, 4: 2, 5: 1}


def test_ctrl_c_stops_cleanly_and_the_run_goes_on_with_resume(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) stops the workers and the service, exits 130 with the command that
    goes on, leaves no process behind; `--resume` finishes the run without computing again
    the units that were done."""
    write_work(tmp_path / "slow.yaml", units=8, seconds=0.3)
    proc = start_simrun("run", "slow.yaml", "--plugins", WORK, "--processes", "2", cwd=tmp_path)
    store = tmp_path / "simrun-store"
    wait_for_a_done_unit(proc, store)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    run_id = run_id_in(output)
    out = store / "runs" / run_id / "work" / "out"
    before = done_units(out)
    assert 0 < len(before) < 8, output
    assert processes_mentioning(str(store)) == []
    address = re.search(r"private redis-server on (127\.0\.0\.1:\d+)", output)
    assert address is not None, output
    assert processes_mentioning(f"redis-server {address.group(1)}") == []
    resume = command_after(output, "simrun run --resume")
    assert resume[:5] == ["simrun", "run", "--resume", run_id, "--store"]

    finished = simrun(*resume[1:], cwd=tmp_path)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "going on where it stopped" in finished.stdout
    assert done_units(out) == set(range(8))
    counted = calls(out)
    assert all(counted[i] == 1 for i in before), (before, counted)


def test_a_killed_simrun_leaves_no_process_and_the_run_goes_on(tmp_path: Path) -> None:
    """When `simrun run` itself is killed (SIGKILL: no chance to clean up), its guard ends
    the workers and the private redis-server and removes the server's directory; the run
    is kept and `--resume` finishes it."""
    write_work(tmp_path / "slow.yaml", units=6, seconds=0.2)
    temp = tmp_path / "tmp"  # where the private redis-server keeps its directory
    temp.mkdir()
    proc = start_simrun(
        "run", "slow.yaml", "--plugins", WORK, "--processes", "2",
        cwd=tmp_path, env=clean_env(TMPDIR=str(temp)),
    )  # fmt: skip
    store = tmp_path / "simrun-store"
    wait_for_a_done_unit(proc, store)
    assert [p.name.startswith("simrun-redis-") for p in temp.iterdir()] == [True]
    proc.kill()
    output, _ = proc.communicate(timeout=10)
    address = re.search(r"private redis-server on (127\.0\.0\.1:\d+)", output)
    assert address is not None, output
    server = address.group(1)
    wait_until(
        lambda: not (processes_mentioning(str(store)) or processes_mentioning(server)),
        timeout_s=30,
        what="the workers and the redis-server to end with simrun",
    )
    with contextlib.suppress(WaitTimeout):  # the assertion below says what is left
        wait_until(lambda: not list(temp.iterdir()), timeout_s=30, what="the guard's cleanup")
    assert not list(temp.iterdir()), f"left behind: {list(temp.iterdir())}"

    finished = simrun("run", "--resume", run_id_in(output), "--plugins", WORK, cwd=tmp_path)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert done_units(store / "runs" / run_id_in(output) / "work" / "out") == set(range(6))


def test_a_mistake_in_the_workflow_is_a_few_lines_without_traceback(tmp_path: Path) -> None:
    """A workflow with an unknown task type: exit 2, the file, line and task named, no
    traceback and nothing created; --debug adds the traceback."""
    (tmp_path / "bad.yaml").write_text("tasks:\n  - name: a\n    type: nosuch\n")
    result = simrun("run", "bad.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert "bad.yaml" in result.stderr
    assert "line 3" in result.stderr
    assert "nosuch" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 4
    assert not (tmp_path / "simrun-store").exists()
    debug = simrun("--debug", "run", "bad.yaml", cwd=tmp_path)
    assert debug.returncode == 2
    assert "Traceback" in debug.stderr


def test_without_redis_server_one_line_says_how_to_install_it(tmp_path: Path) -> None:
    """No REDIS_URL and no redis-server on PATH: one line saying how to get one, exit 1,
    and the store is not created."""
    write_work(tmp_path / "wf.yaml", units=1)
    empty = tmp_path / "bin"
    empty.mkdir()
    result = simrun(
        "run", "wf.yaml", "--plugins", WORK, cwd=tmp_path, env=clean_env(PATH=str(empty))
    )
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert "apt-get install redis-server" in line
    assert "brew install redis" in line
    assert not (tmp_path / "simrun-store").exists()


@HEAT_GROUP
def test_status_and_resources_read_the_store_here_when_no_service_is_named(
    heat: HeatRuns,
) -> None:
    """In the directory of a `simrun run`, `simrun status` and `simrun resources` read
    ./simrun-store without --store (no --url, no SIMRUN_URL); a named service is asked
    instead (and, unreachable, the error points at the store)."""
    listed = simrun("status", cwd=heat.home)
    assert listed.returncode == 0, listed.stderr
    run_id = run_id_in(heat.first.stdout)
    assert run_id in listed.stdout
    one = simrun("status", run_id, cwd=heat.home)
    assert one.returncode == 0, one.stderr
    assert "succeeded" in one.stdout
    learned = simrun("resources", cwd=heat.home)
    assert learned.returncode == 0, learned.stderr
    assert "heat/plate/64" in learned.stdout
    url = f"http://127.0.0.1:{free_port()}"
    asked = simrun("status", "--url", url, cwd=heat.home)
    assert asked.returncode == 1
    assert "add --store" in asked.stderr


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
