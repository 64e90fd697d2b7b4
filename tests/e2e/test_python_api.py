"""The Python API against a real embedded session (a private redis-server, the service in
this process, a worker container as a child process) and its service over HTTP: a workflow
given as a path, a YAML string or a dict runs to a typed result; a timeout, a failing unit,
a cancel and bad input behave as documented."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import simrun
from simrun.api import LocalSession, RunResult, RunTimeout
from simrun.workflow import WorkflowError
from tests.support import REPO
from tests.support.cli_harness import WORK
from tests.support.cli_harness import simrun as simrun_command

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("api-session")]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSession]:
    """One embedded session with the service's test task type, for the module."""
    store = tmp_path_factory.mktemp("api") / "store"
    with LocalSession(
        store, workers=1, processes=2, memory_gb=2.0, plugins=[WORK], grace_s=1.0
    ) as started:
        yield started


def work(name: str, **settings: object) -> dict[str, object]:
    """A workflow of one ``svc-work`` task named ``work``."""
    return {"name": name, "tasks": [{"name": "work", "type": "svc-work", "settings": settings}]}


# The tests of this module share one store and submit the same tasks: those that check
# the units ran give ``reuse=False`` (else they reuse an earlier test's work).
def assert_done(result: RunResult, units: int) -> None:
    assert isinstance(result, RunResult)
    assert result.state == "succeeded"
    assert result.succeeded
    assert result.failures == ()
    task = result.task("work")
    assert task.units == units
    assert task.count("done") == units


def test_submit_a_path_a_yaml_string_and_a_dict(session: LocalSession, tmp_path: Path) -> None:
    """`simrun.submit` to a service takes a workflow as a path, YAML text or a dict, and
    `wait` returns the typed view of the succeeded run with its units counted."""
    path = tmp_path / "work.yaml"
    path.write_text(yaml.safe_dump(work("from-path", units=3)))
    text = yaml.safe_dump(work("from-text", units=4))
    given = work("from-dict", units=5)
    for workflow, units in ((path, 3), (str(path), 3), (text, 4), (given, 5)):
        run = simrun.submit(workflow, url=session.url, plugins=[WORK], reuse=False)
        result = run.wait(timeout_s=60, progress=False)
        assert_done(result, units)
        assert result.id == run.id
        assert run.view().state == "succeeded"


def test_a_local_run_tells_where_its_outputs_are(session: LocalSession) -> None:
    """A run of the embedded session shows each task's output directory in its store,
    where the units wrote."""
    result = session.submit(work("outputs", units=2), reuse=False).wait(
        timeout_s=60, progress=False
    )
    assert_done(result, 2)
    out = result.outputs()["work"]
    assert out.is_relative_to(session.store)
    assert sorted(p.name for p in out.glob("unit-*.json")) == ["unit-0.json", "unit-1.json"]


def test_sources_are_relative_to_the_file_or_base(session: LocalSession, tmp_path: Path) -> None:
    """A source of a workflow file is found beside it; of a dict, under ``base``."""
    (tmp_path / "data.txt").write_text("hello")
    doc = {**work("sources", units=1), "sources": {"data": "data.txt"}}
    path = tmp_path / "wf.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert_done(session.submit(path, reuse=False).wait(timeout_s=60, progress=False), 1)
    assert_done(
        session.submit(doc, base=tmp_path, reuse=False).wait(timeout_s=60, progress=False), 1
    )
    with pytest.raises(WorkflowError, match=r"sources\.data: file not found"):
        session.submit(doc, base=tmp_path / "elsewhere")


def test_a_wait_past_its_timeout_raises_and_the_run_goes_on(session: LocalSession) -> None:
    """`wait(timeout_s=...)` raises `RunTimeout` naming the run, which goes on; it can be
    cancelled and waited for again."""
    run = session.submit(work("slow", units=2, seconds=3.0))
    with pytest.raises(RunTimeout, match=f"run {run.id} did not end within <1 s") as caught:
        run.wait(timeout_s=0.5, progress=False)
    assert caught.value.run_id == run.id
    assert run.view().state == "running"
    run.cancel()
    assert run.wait(timeout_s=30, progress=False).state == "cancelled"


def test_a_failing_units_failures_are_in_the_view(session: LocalSession, tmp_path: Path) -> None:
    """A run whose unit keeps failing ends failed, with the unit and its error in the
    view's ``failures``."""
    flag = tmp_path / "fail"
    flag.write_text("")
    doc = work("failing", units=3, fail_flag=str(flag), fail_indices=[1])
    result = simrun.submit(doc, url=session.url, plugins=[WORK]).wait(60, progress=False)
    assert result.state == "failed"
    assert not result.succeeded
    assert [(f.task, f.unit) for f in result.failures] == [("work", 1)]
    assert "unit 1 fails on purpose" in (result.failures[0].error or "")
    assert result.task("work").count("done") == 2


def test_the_api_works_where_an_event_loop_runs(session: LocalSession) -> None:
    """Called from a coroutine (as in a Jupyter cell, whose event loop is running), the
    blocking API still submits and waits."""

    async def cell() -> RunResult:
        return session.submit(work("in-a-loop", units=2), reuse=False).wait(
            timeout_s=60, progress=False
        )

    assert_done(asyncio.run(cell()), 2)


def test_progress_without_a_terminal_is_plain_lines(
    session: LocalSession, capsys: pytest.CaptureFixture[str]
) -> None:
    """With progress and no terminal, `wait` prints a line per change of a task and the
    run's last line."""
    run = session.submit(work("progress", units=2), reuse=False)
    run.wait(timeout_s=60)
    out = capsys.readouterr().out
    assert "work: done (2/2 units)" in out
    assert f"run {run.id} (progress): succeeded" in out


def _validate_lines(path: Path) -> list[str]:
    """What `simrun validate PATH` prints of its error, without the ``error: `` prefix."""
    done = simrun_command("validate", str(path), cwd=REPO)
    assert done.returncode != 0
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return [lines[0].removeprefix("error: "), *lines[1:]]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("yaml-error", "tasks: [\n  - name: a\n"),
        ("unknown-type", "tasks:\n  - name: a\n    type: no-such-type\n"),
        ("bad-setting", "tasks:\n  - name: a\n    type: heat\n    settings: {grid: 2}\n"),
    ],
)
def test_bad_input_raises_what_validate_says(name: str, text: str, tmp_path: Path) -> None:
    """A workflow that cannot run raises `WorkflowError` with the problems `simrun
    validate` prints, before anything starts (no store is made)."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    store = tmp_path / "store"
    with pytest.raises(WorkflowError) as caught:
        simrun.run_local(path, store=store, progress=False)
    mine = [line.strip() for line in str(caught.value).splitlines()]
    assert mine == _validate_lines(path)
    assert not store.exists()


def test_a_missing_file_raises_what_validate_says(tmp_path: Path) -> None:
    """A workflow file that is not there raises `WorkflowError` naming it, as `simrun
    validate` does."""
    path = tmp_path / "nowhere.yaml"
    with pytest.raises(WorkflowError) as caught:
        simrun.run_local(path, store=tmp_path / "store", progress=False)
    mine = [line.strip() for line in str(caught.value).splitlines()]
    assert mine == _validate_lines(path)
    assert "No such file or directory" in str(caught.value)


def test_a_type_the_service_does_not_know_is_a_workflow_error(session: LocalSession) -> None:
    """A task type unknown here and to the service: the service's refusal is raised as a
    `WorkflowError` naming the task and the type."""
    with pytest.raises(WorkflowError, match="no-such-type"):
        simrun.submit(
            {"tasks": [{"name": "a", "type": "no-such-type"}]}, url=session.url, plugins=[WORK]
        )


def test_the_api_reuses_unchanged_work_unless_told_not_to(session: LocalSession) -> None:
    """A task submitted again unchanged through the API reuses the earlier run's work (its
    view says from which run); ``rerun`` runs it again."""
    first = session.submit(work("reuse-1", units=7), reuse=False).wait(60, progress=False)
    assert_done(first, 7)
    again = session.submit(work("reuse-2", units=7)).wait(60, progress=False)
    assert again.succeeded
    assert again.task("work").reused_from == first.id
    forced = session.submit(work("reuse-3", units=7), rerun=["work"]).wait(60, progress=False)
    assert_done(forced, 7)
    assert forced.task("work").reused_from is None
