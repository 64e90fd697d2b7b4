"""`live_unit_logs` over real files: a command's two streams and a merge, by attempt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simrun.core.layout import StoreLayout, task_logs
from simrun.core.unitlogs import (
    LogNotFound,
    UnitLogHeader,
    attempt_paths,
    live_unit_logs,
    store_unit_logs,
    write_atomic,
)


def _header(unit: int | str, attempt: int, outcome: str) -> UnitLogHeader:
    return UnitLogHeader(
        run="r", task="t", unit=unit, attempt=attempt, job_id="j", worker="w", pid=None,
        outcome=outcome, error=None, seconds=None, peak_gb=0.0, limit_gb=0.0, started=1.0,
        finished=2.0,
    )  # fmt: skip


def test_a_commands_streams_and_attempts_are_read_from_their_offsets(tmp_path: Path) -> None:
    """A command's attempt is read from its stdout and stderr files (each from its own
    offset); an attempt that ended has its header, the next one (running) none; a merge is
    read from its own log; the files of other units are not mixed in."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "attempt-1.out").write_text("out one\n")
    (logs / "attempt-1.err").write_text("err one\n")
    write_atomic(attempt_paths(logs, "command", 1)[0], json.dumps(
        _header("command", 1, "failed").to_dict()).encode())  # fmt: skip
    (logs / "attempt-2.out").write_text("out two, more\n")
    attempts = live_unit_logs(logs, "command", {"attempt-2.out": 8})
    assert [(a.attempt, a.header is not None) for a in attempts] == [(1, True), (2, False)]
    assert {c.name: c.text for c in attempts[0].chunks} == {
        "attempt-1.out": "out one\n",
        "attempt-1.err": "err one\n",
    }
    [two] = attempts[1].chunks
    assert (two.text, two.offset) == (" more\n", 14)

    merge_log = attempt_paths(logs, "merge", 1)[1]
    merge_log.write_text("merging\n")
    attempt_paths(logs, 7, 1)[1].write_text("unit seven\n")
    [merge] = live_unit_logs(logs, "merge")
    assert [c.text for c in merge.chunks] == ["merging\n"]
    assert live_unit_logs(logs, 3) == []


def test_a_running_unit_without_a_header_is_said_to_be_running(tmp_path: Path) -> None:
    """`simrun logs RUN TASK UNIT` of a unit whose log is being written (no header yet)
    says it is running and that --follow prints it, rather than that it has no log."""
    layout = StoreLayout(tmp_path)
    logs = task_logs(layout.task_dir("r", "t"))
    log = attempt_paths(logs, 2, 1)[1]
    log.parent.mkdir(parents=True)
    log.write_text("so far\n")
    with pytest.raises(LogNotFound, match=r"is running.*--follow"):
        store_unit_logs(tmp_path, "r", "t", 2)
    with pytest.raises(LogNotFound, match="has no log"):
        store_unit_logs(tmp_path, "r", "t", 3)
