"""The layout, header and reading rules of the units' logs (`simrun.core.unitlogs`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simrun.core.unitlogs import (
    LogNotFound,
    UnitLogHeader,
    UnitLogs,
    attempt_paths,
    list_unit_logs,
    parse_unit,
    read_unit_logs,
    run_logs,
    store_unit_logs,
    write_atomic,
)

LOGS = Path("/store/runs/r1/sweep/logs")


def header(unit: int | str, attempt: int, outcome: str = "failed", **more: object) -> UnitLogHeader:
    fields: dict[str, object] = {
        "run": "r1",
        "task": "sweep",
        "unit": unit,
        "attempt": attempt,
        "job_id": f"r1:sweep:{unit}:{attempt}",
        "worker": "w1",
        "pid": 42,
        "outcome": outcome,
        "error": "Traceback ...\nValueError: boom" if outcome == "failed" else None,
        "seconds": None,
        "peak_gb": 0.25,
        "limit_gb": 1.0,
        "started": 100.0,
        "finished": 101.5,
        "output_bytes": 0,
    }
    fields.update(more)
    return UnitLogHeader.from_dict(fields, "test")


def keep(logs: Path, h: UnitLogHeader, output: bytes | None = None) -> None:
    json_path, log_path = attempt_paths(logs, h.unit, h.attempt)
    write_atomic(json_path, json.dumps(h.to_dict()).encode())
    if output is not None:
        write_atomic(log_path, output)


def test_paths_name_the_unit_and_the_attempt() -> None:
    """A unit of a chunk is ``unit-<index>``, the merge and a command their word; each
    attempt has a header (.json) and an output (.log) under ``logs/units``."""
    assert attempt_paths(LOGS, 7, 2) == (
        LOGS / "units" / "unit-7.attempt-2.json",
        LOGS / "units" / "unit-7.attempt-2.log",
    )
    assert attempt_paths(LOGS, "merge", 1)[1].name == "merge.attempt-1.log"


def test_a_unit_is_an_index_merge_or_command() -> None:
    """What a user types as UNIT: an integer >= 0, ``merge`` or ``command``; anything else
    is refused naming it."""
    assert parse_unit("12") == 12
    assert parse_unit("merge") == "merge"
    with pytest.raises(ValueError, match="unit 'x1'"):
        parse_unit("x1")
    with pytest.raises(ValueError, match="unit '-1'"):
        parse_unit("-1")


def test_a_header_lacking_fields_is_refused_naming_where() -> None:
    """A file that is not a header (missing fields, not an object) is a ValueError naming
    the file and what it lacks."""
    with pytest.raises(ValueError, match=r"h\.json: not a unit log header \(no attempt"):
        UnitLogHeader.from_dict({"run": "r1"}, "h.json")
    with pytest.raises(ValueError, match=r"h\.json: not a unit log header \(a JSON"):
        UnitLogHeader.from_dict([1], "h.json")


def test_attempts_are_read_in_order_and_the_listing_puts_failures_first(tmp_path: Path) -> None:
    """A unit's attempts come first attempt first with their output; the listing holds the
    last attempt of each unit, those that did not end well first."""
    keep(tmp_path, header(3, 2), b"second try\n")
    keep(tmp_path, header(3, 1), b"first try\n")
    keep(tmp_path, header(1, 1, "done"), b"hello\n")
    keep(tmp_path, header(5, 1, "killed"))
    found = read_unit_logs(tmp_path, "r1", "sweep", 3)
    assert [a.header.attempt for a in found.attempts] == [1, 2]
    assert [a.output for a in found.attempts] == ["first try\n", "second try\n"]
    listed = list_unit_logs(tmp_path)
    assert [(h.unit, h.attempt, h.outcome) for h in listed] == [
        (3, 2, "failed"),
        (5, 1, "killed"),
        (1, 1, "done"),
    ]
    assert read_unit_logs(tmp_path, "r1", "sweep", 5).attempts[0].output == ""


def test_unit_logs_survive_the_wire() -> None:
    """`UnitLogs.to_dict` read back by `from_dict` (what the API sends and the client
    reads) is the same logs."""
    from simrun.core.unitlogs import UnitAttempt

    logs = UnitLogs("r1", "sweep", 3, (UnitAttempt(header(3, 1), "out\n", (Path("/x.log"),)),))
    assert UnitLogs.from_dict(json.loads(json.dumps(logs.to_dict())), "wire") == logs
    with pytest.raises(ValueError, match="wire: not the logs of a unit"):
        UnitLogs.from_dict({"attempts": "no"}, "wire")


def test_unknown_run_task_unit_and_attempt_are_one_line_each(tmp_path: Path) -> None:
    """An unknown run, task, a unit without a log and an attempt without one each raise
    `LogNotFound` with one line naming it."""
    logs = tmp_path / "runs" / "r1" / "sweep" / "logs"
    keep(logs, header(3, 1))
    (tmp_path / "runs" / "r1" / "sources").mkdir()
    with pytest.raises(LogNotFound, match="there is no run 'r2'"):
        run_logs(tmp_path, "r2")
    with pytest.raises(LogNotFound, match=r"run 'r1' has no task 'sweeep' .*its tasks: sweep\)"):
        store_unit_logs(tmp_path, "r1", "sweeep", 3)
    with pytest.raises(LogNotFound, match="unit 4 of task 'sweep' of run 'r1' has no log"):
        store_unit_logs(tmp_path, "r1", "sweep", 4)
    with pytest.raises(LogNotFound, match=r"no log of attempt 2 \(attempts with one: 1\)"):
        store_unit_logs(tmp_path, "r1", "sweep", 3, 2)
    assert list(run_logs(tmp_path, "r1")) == ["sweep"]
    assert store_unit_logs(tmp_path, "r1", "sweep", 3, 1).attempts[0].header.attempt == 1
