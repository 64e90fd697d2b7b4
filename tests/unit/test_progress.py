"""What the progress display and the end of a run show (simrun.cli.progress), from run views."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest
from rich.console import Console

from simrun.app.follow import stuck_reason
from simrun.cli.progress import (
    PlainView,
    error_line,
    failure_lines,
    format_duration,
    format_gb,
    format_rate,
    guess_eta,
    plain_lines,
    render_live,
    run_header,
    summary_rows,
    summary_table,
    task_eta,
    task_seconds,
)
from simrun.core.states import TaskCounts
from simrun.core.views import FailureView, RunView, TaskView, parse_run, parse_task
from simrun.runstore.rows import RunRow, TaskRow
from simrun.service.views import run_view


def task(name: str = "sweep", state: str = "running", **more: Any) -> TaskView:
    """A task's view as a service sends it (JSON), parsed; what ``more`` leaves out is
    what an older service does not tell."""
    counts = {"pending": 0, "queued": 0, "running": 0, "done": 0, "failed": 0}
    counts.update(more.pop("counts", {}))
    view: dict[str, Any] = {
        "name": name,
        "type": "heat",
        "state": state,
        "status": "",
        "queue": "cpu",
        "resources": None,
        "units": 24,
        "counts": counts,
        "merge": None,
        "seconds_per_unit": None,
        "eta_s": None,
    }
    view.update(more)
    return parse_task(view)


def run(*tasks: TaskView, state: str = "running", **more: Any) -> RunView:
    """A run's view as a service sends it (JSON), parsed."""
    view: dict[str, Any] = {
        "id": "20250101-120000-abcdef",
        "name": "demo",
        "state": state,
        "message": "",
        "created_s": 1000.0,
        "updated_s": 1010.0,
        "finished_s": None,
        "eta_s": None,
        "tasks": [asdict(t) for t in tasks],
    }
    view.update(more)
    return parse_run(view)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "—"),
        (0.2, "<1 s"),
        (-3, "<1 s"),
        (42.4, "42 s"),
        (59.6, "1 min 00 s"),
        (185, "3 min 05 s"),
        (3600, "1 h 00 min"),
        (7620, "2 h 07 min"),
        (3 * 86400 + 4 * 3600 + 59, "3 d 4 h"),
    ],
)
def test_format_duration(seconds, text):
    """Durations read at a glance, in the largest units that fit."""
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("gb", "text"),
    [
        (None, "—"),
        (0.5, "512 MiB"),
        (0.0001, "1 MiB"),
        (1.5, "1.5 GiB"),
        (18.04, "18 GiB"),
        (250.4, "250 GiB"),
    ],
)
def test_format_gb(gb, text):
    """Memory below a GiB in MiB, above it in GiB with three digits."""
    assert format_gb(gb) == text


@pytest.mark.parametrize(
    ("spu", "text"),
    [(None, "learning"), (0.004, "4 ms/unit"), (0.16, "0.16 s/unit"), (12.345, "12.3 s/unit")],
)
def test_format_rate(spu, text):
    """Seconds per unit; "learning" while nothing is learned."""
    assert format_rate(spu) == text


@pytest.mark.parametrize(
    ("args", "eta"),
    [
        ((24, 6, 0, 100.0, 112.0), 36.0),  # 6 units in 12 s: 18 left take 36 s
        ((24, 6, 2, 100.0, 112.0), 24.0),  # failed units are finished: 8 in 12 s, 16 left
        ((24, 0, 0, 100.0, 112.0), None),  # no pace before the first unit
        ((None, 6, 0, 100.0, 112.0), None),  # not started
        ((24, 6, 0, None, 112.0), None),  # the view does not tell when it started
        ((24, 6, 0, 100.0, None), None),  # no clock given
        ((24, 24, 0, 100.0, 148.0), 0.0),
    ],
)
def test_guess_eta(args, eta):
    """Without a learned speed and an ETA from the service, the ETA is the pace of the task
    so far (`simrun.core.eta`: finished units, done or failed, since it started)."""
    assert guess_eta(*args) == eta


def test_task_line_prefers_the_learned_eta_and_marks_a_guess():
    """The service's ETA (from the learned seconds per unit) wins; while nothing is learned,
    the guess from the pace so far is marked as one."""
    learned = task_eta(task(eta_s=5.0, started_s=100.0, counts={"done": 6}), now_s=112.0)
    assert learned == (5.0, False)
    guessed = task_eta(task(started_s=100.0, counts={"done": 6}), now_s=112.0)
    assert guessed == (36.0, True)
    waiting = task_eta(task(state="waiting", started_s=None, units=None), now_s=112.0)
    assert waiting == (None, False)
    # A learned speed without live workers (no ETA from the service) is not guessed at: the
    # task's start may lie in an earlier session.
    unplaced = task_eta(
        task(seconds_per_unit=0.3, started_s=100.0, counts={"done": 6}), now_s=112.0
    )
    assert unplaced == (None, False)


def test_plain_lines_show_active_tasks_with_counts_speed_and_eta():
    """One line per task with units on the way: done/total, running, queued, failed, kills,
    speed and ETA; finished and waiting tasks only when asked for all."""
    view = run(
        task(
            counts={"done": 10, "running": 2, "queued": 4, "failed": 1},
            kills=3,
            seconds_per_unit=0.31,
            eta_s=4.0,
        ),
        task("summary", state="waiting", units=None),
        task("prep", state="done", counts={"done": 24}),
    )
    assert plain_lines(view) == [
        "sweep: 10/24 done, 2 running, 4 queued, 1 failed, 3 killed for memory"
        " · 0.31 s/unit · ETA 4 s · running"
    ]
    every = plain_lines(view, only_active=False)
    assert every[1:] == ["summary: waiting for its inputs", "prep: 24/24 done, 0 failed · done"]


def test_plain_lines_say_why_a_task_is_blocked():
    """A blocked task shows the dispatcher's reason."""
    view = run(
        task(
            state="blocked",
            status="needs 40 GiB per process; the largest cpu worker has 16 GiB",
            counts={"pending": 24},
        )
    )
    (line,) = plain_lines(view)
    assert line.endswith("blocked: needs 40 GiB per process; the largest cpu worker has 16 GiB")


def test_a_probing_task_says_so():
    """A running task in the probing phase shows its status ("probing: ...") where the state
    goes, in the plain lines and the live display."""
    status = "probing: 2 units first, the other 22 wait for their memory"
    view = run(task(status=status, phase="probing", counts={"queued": 2, "pending": 22}))
    (line,) = plain_lines(view)
    assert line.endswith(f"· {status}")
    console = Console(width=200, record=True)
    console.print(render_live(view, 5.0, now_s=1005.0))
    assert status in console.export_text()
    # Another status of a running task is not shown as its state, nor is a status alone.
    (line,) = plain_lines(run(task(status="refused: the job id was taken")))
    assert line.endswith("· running")
    (line,) = plain_lines(run(task(status=status, counts={"queued": 2, "pending": 22})))
    assert line.endswith("· running")


HEAD = "run 20250101-120000-abcdef (demo)"


@pytest.mark.parametrize(
    ("view", "header"),
    [
        (run(eta_s=90.0), f"{HEAD}: running · elapsed 12 s · ETA 1 min 30 s"),
        (run(), f"{HEAD}: running · elapsed 12 s"),
        (
            run(state="failed", message="2 units failed: sweep [3, 7]"),
            f"{HEAD}: failed · elapsed 12 s · 2 units failed: sweep [3, 7]",
        ),
    ],
)
def test_run_header(view, header):
    """The header: the run, its state, the time so far, and its ETA or its message."""
    assert run_header(view, 12.0) == header


def test_summary_rows_per_task():
    """Units, time, the memory its units ran under against the peak, the kills for memory,
    and the outputs."""
    view = run(
        task(
            state="done",
            counts={"done": 24},
            started_s=100.0,
            finished_s=108.2,
            resources={"memory_per_worker_gb": 0.03},
            requested_gb=1.0,
            peak_memory_gb=0.025,
            kills=2,
            out="store/runs/r/sweep/out",
            splittable=True,
        ),
        task(
            "summary",
            state="done",
            units=1,
            counts={"done": 1},
            splittable=False,
            resources={"memory_per_worker_gb": 0.5},
        ),
        state="succeeded",
    )
    assert summary_rows(view) == [
        ("sweep", "24/24", "8 s", "1 GiB", "26 MiB", "2", "—", "—", "store/runs/r/sweep/out"),
        ("summary", "command", "—", "512 MiB", "—", "—", "—", "—", "—"),
    ]


@pytest.mark.parametrize(
    ("state", "started", "finished", "now", "seconds"),
    [
        ("done", 100.0, 108.0, None, 8.0),
        ("done", 100.0, 108.0, 500.0, 8.0),  # ended: the clock does not matter
        ("running", 100.0, None, 130.0, 30.0),  # so far
        ("blocked", 100.0, None, 130.0, 30.0),
        ("running", 100.0, None, None, None),  # no clock given
        ("cancelled", 100.0, None, 130.0, None),  # ended without an end time
        ("waiting", None, None, 130.0, None),
    ],
)
def test_task_seconds(state, started, finished, now, seconds):
    """A task took from its start to its end, or to now while it has units on the way."""
    view = task(state=state, started_s=started, finished_s=finished)
    assert task_seconds(view, now) == seconds


def test_a_service_view_fills_every_summary_column_but_outputs():
    """The view a service gives (`run_view`) tells the time, the memory requested and at
    its peak, and the kills of each task, so its summary shows the columns of `simrun run`;
    only the outputs (a path on the service's side) stay out."""
    row = TaskRow(
        run="r1", name="sweep", position=0, type="heat", settings={}, inputs={}, depends=(),
        override=None, memory_override_gb=None, splittable=True, has_merge=False,
        state="running", status="", queue="cpu", resource_key="heat/plate",
        resources={"memory_per_worker_gb": 0.5}, units=24, started_s=100.0, finished_s=None,
        kills=3, requested_gb=0.75, peak_memory_gb=0.3,
    )  # fmt: skip
    runrow = RunRow("r1", None, "plate", "running", "", "doc", 99.0, 99.0, None)
    view = run_view(runrow, [row], {"sweep": TaskCounts(pending=4, done=20)}, {})
    assert summary_rows(view, now_s=160.0) == [
        ("sweep", "20/24", "1 min 00 s", "768 MiB", "307 MiB", "3", "—", "—", "—")
    ]
    console = Console(width=200, record=True)
    console.print(summary_table(view, now_s=160.0))
    header = console.export_text().splitlines()[1]
    assert [c.strip() for c in header.split("┃")[1:-1]] == [
        "task", "units", "time", "memory/process", "peak/process", "kills"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("staged", "seconds", "peak", "asked", "staged_text", "scratch_text"),
    [
        (0, 0.0, None, None, "—", "—"),  # nothing staged, scratch not measured
        (3 * 1024**2, 0.25, 0.0, None, "3.0 MiB in 0.25 s", "—"),
        (512, 0.001, 0.5, 2.0, "512 B in <0.01 s", "512 MiB of 2 GiB"),
        (0, 0.0, 3.0, 2.0, "—", "3 GiB, over 2 GiB asked"),  # past its scratch_gb
        (0, 0.0, 1.5, None, "—", "1.5 GiB"),  # measured, nothing asked
    ],
)
def test_summary_shows_staging_and_scratch(staged, seconds, peak, asked, staged_text, scratch_text):
    """The summary says what staging a task's inputs took (bytes and seconds) and the most
    local scratch it used against its scratch_gb, saying when it went over."""
    resources = {"memory_per_worker_gb": 1.0, **({"scratch_gb": asked} if asked else {})}
    view = run(
        task(
            state="done", counts={"done": 1}, resources=resources, staged_bytes=staged,
            staged_s=seconds, scratch_peak_gb=peak,
        ),
        state="succeeded",
    )  # fmt: skip
    row = summary_rows(view)[0]
    assert (row[6], row[7]) == (staged_text, scratch_text)


def test_summary_table_leaves_out_columns_the_view_does_not_tell():
    """A service's view without times, peaks or outputs gives a table without them."""
    view = run(task(state="done", counts={"done": 24}), state="succeeded")
    console = Console(width=200, record=True)
    console.print(summary_table(view))
    text = console.export_text()
    assert "units" in text
    assert "24/24" in text
    assert "peak/process" not in text
    assert "outputs" not in text


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            "Traceback (most recent call last):\n  File x\nRuntimeError: boom\n\n",
            "RuntimeError: boom",
        ),
        ("killed for memory at its limit of 2 GiB", "killed for memory at its limit of 2 GiB"),
        (None, "failed without a message"),
        ("  \n", "failed without a message"),
    ],
)
def test_error_line(error, line):
    """The last line of a traceback is what was raised."""
    assert error_line(error) == line


def test_failure_lines_name_task_unit_and_error_and_count_the_rest():
    """Each failed unit by task and index (a merge or command by its name), at most
    ``limit`` of them and a count of the others."""
    failures = [
        FailureView(task="sweep", unit=i, error=f"Traceback\nValueError: bad point {i}")
        for i in range(4)
    ] + [FailureView(task="sweep", unit="merge", error="OSError: disk full")]
    assert failure_lines(failures, limit=3) == [
        "task 'sweep', unit 0: ValueError: bad point 0",
        "task 'sweep', unit 1: ValueError: bad point 1",
        "task 'sweep', unit 2: ValueError: bad point 2",
        "… and 2 more",
    ]
    assert failure_lines(failures[4:]) == ["task 'sweep', merge: OSError: disk full"]


def test_failure_lines_with_a_run_say_where_each_units_log_is():
    """With the run and where its logs are read (``--store DIR``), each failed unit is
    followed by the `simrun logs` command that shows its traceback and output."""
    failures = [
        FailureView(task="sweep", unit=3, error="ValueError: bad"),
        FailureView(task="sweep", unit="merge", error="OSError: disk full"),
    ]
    assert failure_lines(failures, run="r1", where=["--store", "my store"]) == [
        "task 'sweep', unit 3: ValueError: bad",
        "  traceback and output: simrun logs r1 sweep 3 --store 'my store'",
        "task 'sweep', merge: OSError: disk full",
        "  traceback and output: simrun logs r1 sweep merge --store 'my store'",
    ]


@pytest.mark.parametrize(
    ("view", "stuck"),
    [
        (
            run(task(state="blocked", status="needs 40 GiB", counts={"pending": 24})),
            "task 'sweep' is blocked: needs 40 GiB",
        ),
        # Units still in flight may finish: not stuck yet.
        (
            run(task(state="blocked", status="needs 40 GiB", counts={"pending": 20, "running": 4})),
            None,
        ),
        # Another task still progresses.
        (run(task(state="blocked", status="x"), task("other", state="running")), None),
        (run(task(state="running")), None),
        (run(task(state="blocked", status="x"), state="failed"), None),
        (run(task(state="waiting")), None),
    ],
)
def test_stuck_reason(view, stuck):
    """A run is stuck when every task with units on the way is blocked with nothing in
    flight: no worker will ever take them."""
    assert stuck_reason(view) == stuck


def test_render_live_has_a_bar_and_counts_per_task():
    """The live display shows every task with its units, failures, kills, speed and ETA."""
    view = run(
        task(counts={"done": 12, "failed": 1}, kills=2, seconds_per_unit=0.5, eta_s=3.0),
        task("summary", state="waiting", units=None),
    )
    console = Console(width=160, record=True)
    console.print(render_live(view, 5.0, now_s=1005.0))
    text = console.export_text()
    sweep = next(line for line in text.splitlines() if line.startswith("sweep"))
    assert "12/24" in sweep
    assert "0.5 s/unit" in sweep
    assert "3 s" in sweep
    assert sweep.split()[-1] == "running"
    assert "━" in sweep
    summary = next(line for line in text.splitlines() if line.startswith("summary"))
    assert summary.split()[-1] == "waiting"


def test_plain_view_prints_state_changes_and_periodic_progress():
    """Without a terminal: a line when a task changes state, and the active tasks'
    progress every every_s seconds (never on the first look)."""
    console = Console(width=200, record=True, force_terminal=False)
    view = PlainView(console, every_s=0.0)
    first = run(task(counts={"done": 1}), task("summary", state="waiting", units=None))
    view.update(first)
    view.update(first)
    view.update(run(task(state="done", counts={"done": 24}), task("summary", units=1)))
    lines = [line.split("] ", 1)[1] for line in console.export_text().splitlines()]
    assert lines == [
        "sweep: running (1/24 units)",
        "sweep: 1/24 done, 0 running, 0 queued, 0 failed · learning · ETA — · running",
        "sweep: done (24/24 units)",
        "summary: running (0/1 units)",
        "summary: 0/1 done, 0 running, 0 queued, 0 failed · learning · ETA — · running",
    ]


def test_a_task_that_took_units_says_how_many_and_from_which_run():
    """A task that reused some units (reuse per unit) shows "N units reused from RUN" in
    its plain line, the live display and the summary; they count as done but not for the
    pace its ETA is guessed from."""
    reused = {"units_reused": 8, "units_reused_from": "20250101-000000-aaaaaa"}
    text = "8 units reused from 20250101-000000-aaaaaa"
    view = run(task(counts={"done": 12, "queued": 12}, started_s=100.0, **reused))
    (line,) = plain_lines(view)
    assert line.endswith(f"· running · {text}")
    console = Console(width=220, record=True)
    console.print(render_live(view, 5.0, now_s=1005.0))
    assert text in console.export_text()
    done = run(task(state="done", counts={"done": 24}, **reused), state="succeeded")
    assert summary_rows(done)[0][1] == f"24/24, {text}"
    # 4 of the 16 it computes done in 12 s: 12 left take 36 s (the 8 reused are no pace).
    guessed = task_eta(task(started_s=100.0, counts={"done": 12}, **reused), now_s=112.0)
    assert guessed == (36.0, True)
    plain = task_eta(task(started_s=100.0, counts={"done": 12}), now_s=112.0)
    assert plain[0] == 12.0
