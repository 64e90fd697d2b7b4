"""The commands that work with a running service (`submit`, `status`, `replay`, `cancel`,
`resources`) as a user runs them: the real console script against a real `simrun service`
and a real `simrun worker`, each a child process, on a real Redis."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from simrun.local.machine import free_port
from tests.integration.test_plugins import make_distribution
from tests.support import REPO
from tests.support.cli_harness import (
    WORK,
    Output,
    clean_env,
    command_after,
    run_id_in,
    simrun,
    start_simrun,
    stop_process,
    wait_for_workers,
    write_work,
)
from tests.support.redis_server import key_prefix
from tests.support.units import calls

#: The tests share one service (a module fixture): in one pytest-xdist worker (--dist
#: loadgroup) it starts once.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("cli-service")]


@dataclass(frozen=True)
class Service:
    """The service's URL, the directory the commands run in, and what the first
    `simrun submit ok.yaml --wait` printed."""

    url: str
    home: Path
    first: subprocess.CompletedProcess[str]

    def __call__(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``simrun ARGS --url URL`` (with the test task type for local planning)."""
        return simrun(*args, "--url", self.url, cwd=self.home, timeout=timeout)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Service]:
    """`simrun service` and one `simrun worker` (2 processes) on a prefix of their own, and
    a first run of 4 units submitted with --wait (what the service learns from)."""
    url_redis = redis_url
    home = tmp_path_factory.mktemp("client")
    store = home / "store"
    prefix = key_prefix("cli")
    port = free_port()
    common = ["--redis-url", url_redis, "--prefix", prefix, "--store", str(store)]
    svc = start_simrun(
        "service", "--port", str(port), *common, "--plugins", WORK, "--max-retries", "0",
        cwd=home,
    )  # fmt: skip
    worker = start_simrun(
        "worker", *common, "--plugins", WORK, "--processes", "2", "--worker-memory-gb", "2",
        "--poll-delay-s", "0.01", cwd=home,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_workers(url, [svc, worker], timeout_s=30)
        write_work(home / "ok.yaml", units=4, seconds=0.05, tag="ok")
        first = simrun("submit", "ok.yaml", "--wait", "--plugins", WORK, "--url", url, cwd=home)
        yield Service(url, home, first)
    finally:
        stop_process(worker)
        stop_process(svc)


def test_submit_wait_then_status_and_resources_tell_the_run(service: Service) -> None:
    """`submit --wait` follows the run to its end and exits 0; `status` lists it and shows
    its units, time, memory requested and at its peak per process, and kills, as `simrun
    run` does; `resources` shows what was learned from it; all three speak JSON too."""
    submitted = service.first
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    run_id = run_id_in(submitted.stdout)
    assert f"run {run_id} succeeded" in submitted.stdout

    runs = json.loads(service("status", "--json").stdout)
    assert {r["id"]: r["state"] for r in runs}[run_id] == "succeeded"
    view = json.loads(service("status", run_id, "--json").stdout)
    assert [(t["name"], t["state"], t["counts"]["done"]) for t in view["tasks"]] == [
        ("work", "done", 4)
    ]
    assert view["failures"] == []
    (work,) = view["tasks"]
    assert work["splittable"] is True
    assert work["kills"] == 0
    assert work["requested_gb"] > 0
    assert work["peak_memory_gb"] > 0
    assert work["started_s"] <= work["finished_s"]
    shown = service("status", run_id).stdout
    for column in ("units", "time", "memory/process", "peak/process", "kills"):
        assert column in shown, shown
    assert "4/4" in shown
    table = service("status").stdout
    assert run_id in table
    assert "succeeded" in table

    learned = {r["key"]: r for r in json.loads(service("resources", "--json").stdout)}
    assert learned["svc-work//ok"]["samples"] > 0
    assert learned["svc-work//ok"]["seconds_per_unit"] > 0
    shown = service("resources").stdout
    line = next(x for x in shown.splitlines() if x.startswith("svc-work//ok"))
    assert "learned from 1 run" in line


def test_submit_dry_run_forecasts_from_the_service_and_submits_nothing(service: Service) -> None:
    """`submit --dry-run` counts the units here, takes the learned resources from the
    service, forecasts on the pool given or else on the live workers, and creates no run."""
    assert service.first.returncode == 0, service.first.stdout + service.first.stderr
    before = json.loads(service("status", "--json").stdout)
    write_work(service.home / "dry.yaml", units=40, seconds=0.05, tag="ok")
    dry = service(
        "submit", "dry.yaml", "--dry-run", "--plugins", WORK,
        "--workers", "1", "--processes", "4", "--worker-memory-gb", "8",
    )  # fmt: skip
    assert dry.returncode == 0, dry.stdout + dry.stderr
    work = next(line for line in dry.stdout.splitlines() if line.startswith("work"))
    assert work.split()[:4] == ["work", "svc-work", "40", "cpu"]
    assert "learned from 1 run" in work
    assert "pool: 1 worker container x 4 processes, 8 GiB each (given)" in dry.stdout
    forecast = next(line for line in dry.stdout.splitlines() if line.startswith("forecast"))
    assert "ETA unknown" not in forecast
    live = service("submit", "dry.yaml", "--dry-run", "--plugins", WORK)
    assert live.returncode == 0, live.stdout + live.stderr
    assert "pool: live: cpu: 1 worker container x 2 processes, 2 GiB each" in live.stdout
    assert "ETA unknown" not in live.stdout
    assert json.loads(service("status", "--json").stdout) == before


def test_failed_run_names_its_unit_and_replay_wait_finishes_it(service: Service) -> None:
    """A failing unit: `submit --wait` exits 1 naming it and printing the replay command;
    after the fix, that command with --wait finishes the run, the done units untouched."""
    flag = service.home / "broken"
    flag.touch()
    write_work(
        service.home / "bad.yaml", units=4, seconds=0.05, fail_flag=str(flag),
        fail_indices=[1], tag="bad",
    )  # fmt: skip
    failed = service("submit", "bad.yaml", "--wait", "--plugins", WORK)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    run_id = run_id_in(failed.stdout)
    assert "task 'work', unit 1: RuntimeError: unit 1 fails on purpose" in failed.stdout
    replay = command_after(failed.stdout, "simrun replay")
    assert replay == ["simrun", "replay", run_id, "--url", service.url]

    flag.unlink()
    done = simrun(*replay[1:], "--wait", cwd=service.home)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 failed units put back" in done.stdout
    assert f"run {run_id} succeeded" in done.stdout
    out = service.home / "store" / "runs" / run_id / "work" / "out"
    assert calls(out) == {0: 1, 1: 2, 2: 1, 3: 1}


def test_replay_all_reruns_a_succeeded_task_on_the_service(service: Service) -> None:
    """`replay RUN --url URL --task work --all --wait` right after the run succeeded: every
    unit is computed once more (their job ids, still kept by Redis, are dispatched again
    under the next attempt), into an emptied output directory, and the run succeeds
    again."""
    write_work(service.home / "again.yaml", units=3, seconds=0.05, tag="again")
    first = service("submit", "again.yaml", "--wait", "--plugins", WORK)
    assert first.returncode == 0, first.stdout + first.stderr
    run_id = run_id_in(first.stdout)
    out = service.home / "store" / "runs" / run_id / "work" / "out"
    assert calls(out) == {0: 1, 1: 1, 2: 1}
    again = service("replay", run_id, "--task", "work", "--all", "--wait")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "task 'work' runs again, all of its units (3 units before)" in again.stdout
    assert f"run {run_id} succeeded" in again.stdout
    # its outputs were removed before it ran again: each unit's call log starts anew
    assert calls(out) == {0: 1, 1: 1, 2: 1}
    assert (out / "merged.json").exists() or any(out.glob("unit-*.json"))


def test_logs_of_a_failed_unit_are_served_by_the_service(service: Service) -> None:
    """A unit that prints and fails under a service: `submit --wait` names `simrun logs RUN
    work 2 --url URL`, which prints its output, traceback, worker and process through the
    API; the listing names it; an unknown task is one line without traceback."""
    flag = service.home / "broken-logs"
    flag.touch()
    write_work(
        service.home / "logs.yaml", units=3, fail_flag=str(flag), fail_indices=[2],
        say_indices=[2], tag="logs",
    )  # fmt: skip
    failed = service("submit", "logs.yaml", "--wait", "--plugins", WORK)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    run_id = run_id_in(failed.stdout)
    hint = command_after(failed.stdout, "traceback and output:")
    assert hint[3:] == ["simrun", "logs", run_id, "work", "2", "--url", service.url]
    shown = simrun(*hint[4:], cwd=service.home)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "=== work unit 2, attempt 1 of 1: failed ===" in shown.stdout
    assert "unit 2 says hello from process" in shown.stdout
    assert "RuntimeError: unit 2 fails on purpose" in shown.stdout
    assert "· process " in shown.stdout
    listing = service("logs", run_id)
    assert listing.stdout.startswith("work unit 2: attempt 1 failed"), listing.stdout
    unknown = service("logs", run_id, "nope", "2")
    assert unknown.returncode != 0
    [line] = unknown.stderr.strip().splitlines()
    assert f"run '{run_id}' has no task 'nope'" in line


def test_status_watch_follows_a_run_submitted_without_wait(service: Service) -> None:
    """`submit` without --wait returns at once with the command that follows the run;
    `status RUN --watch` follows it to its end and exits 0."""
    write_work(service.home / "slow.yaml", units=6, seconds=0.3, tag="slow")
    submitted = service("submit", "slow.yaml", "--plugins", WORK)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    run_id = run_id_in(submitted.stdout)
    follow = command_after(submitted.stdout, "follow it:")
    assert follow[2:] == ["simrun", "status", run_id, "--watch", "--url", service.url]
    watched = simrun(*follow[3:], cwd=service.home)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert f"run {run_id} succeeded" in watched.stdout


def test_service_errors_are_one_line_without_traceback(service: Service) -> None:
    """Cancelling an ended run, an unknown run, an unreachable service: exit 1 and one
    line that says what is wrong."""
    runs = json.loads(service("status", "--json").stdout)
    ended = next(r["id"] for r in runs if r["state"] == "succeeded")
    for result, words in (
        (service("cancel", ended), "already ended"),
        (service("status", "nope"), "there is no run 'nope'"),
        (
            simrun("status", "--url", f"http://127.0.0.1:{free_port()}", cwd=service.home),
            "cannot reach the simrun service",
        ),
    ):
        assert result.returncode == 1
        (line,) = result.stderr.strip().splitlines()
        assert words in line


def test_types_json_lists_the_installed_types(tmp_path: Path) -> None:
    """`simrun types --json` lists the installed task types with their ports and hint."""
    result = simrun("types", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    found = {t["name"]: t for t in json.loads(result.stdout)}
    assert found["heat"]["inputs"] == ["plate"]
    assert found["heat"]["splittable"] is True
    assert found["report"]["splittable"] is False


def test_types_shows_every_trait_of_a_type_and_its_settings_types(tmp_path: Path) -> None:
    """`simrun types` shows a type's cost setting, whether it uses its pod's cores, its
    image and its checkpoints, and each setting with its type, bounds and default; `--json`
    carries the same fields (image included)."""
    make_distribution(
        tmp_path,
        "crunch-dist",
        "crunch_mod",
        """
        from typing import Literal
        from pydantic import Field

        class CrunchSettings(BaseModel):
            grid: int = Field(32, ge=8)
            mode: Literal["fast", "exact"] = "fast"

        CRUNCH = TaskType(
            name="crunch", settings=CrunchSettings, command="crunch {input} {out}",
            uses_cores=True, image="crunch:1.2", checkpoints=True, cost_setting="grid",
            description="crunches",
        )
        """,
        {"crunch": "CRUNCH"},
    )
    env = clean_env(PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    shown = simrun("types", cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "cost setting: grid; uses the cores of its pod; image: crunch:1.2; checkpoints" in text
    assert "grid: int >= 8 = 32" in text
    assert "mode: one of 'fast', 'exact' = 'fast'" in text
    listed = simrun("types", "--json", cwd=tmp_path, env=env)
    crunch = {t["name"]: t for t in json.loads(listed.stdout)}["crunch"]
    assert (crunch["image"], crunch["uses_cores"], crunch["checkpoints"]) == (
        "crunch:1.2",
        True,
        True,
    )
    assert crunch["cost_setting"] == "grid"


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
