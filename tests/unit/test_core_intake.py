"""The pure rules of what the service accepts (`simrun.core.intake`), the YAML bounds of
the workflow reader, and the options that configure them, on tables of cases."""

from __future__ import annotations

import base64

import click
import pytest
from click.testing import CliRunner

from simrun.config import click_options
from simrun.core.intake import (
    SMALL_BODY_BYTES,
    InputLimits,
    body_limit,
    body_too_large,
    decoded_size,
    file_count_problem,
    file_size_problem,
    run_units_problem,
    tasks_problem,
    unit_count_problem,
    upload_path_problem,
    workflow_size_problem,
)
from simrun.service.routes.guard import token_matches
from simrun.service.settings import ControllerSettings
from simrun.workflow import WorkflowError, parse_workflow

LIMITS = InputLimits(max_units_per_task=100, max_units_per_run=150, max_depth=2, max_tasks=3)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (0, None),
        (100, None),
        (101, "returned 101 units; a task may have at most 100"),
        (10**9, "returned 1000000000 units"),
        (-1, "returned -1, a negative count"),
        (True, "returned bool True, not an integer"),
        (2.0, "returned float 2.0, not an integer"),
        ("3", "returned str '3', not an integer"),
        (None, "returned NoneType None, not an integer"),
        ([1] * 100, "returned list [1, 1,"),
    ],
)
def test_unit_count_problem(value: object, problem: str | None) -> None:
    """A count is a non-negative int (not a bool) no larger than max_units_per_task; the
    message names the type and what it returned."""
    found = unit_count_problem(value, "heat", LIMITS)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert "count_units of type 'heat'" in found
        assert problem in found
        assert len(found) < 250


@pytest.mark.parametrize(
    ("started", "count", "refused"), [(0, 150, False), (100, 50, False), (100, 51, True)]
)
def test_run_units_problem(started: int, count: int, refused: bool) -> None:
    """A task may not take the run's units past max_units_per_run."""
    found = run_units_problem(started, count, "heat", LIMITS)
    assert (found is not None) == refused
    if found:
        assert f"{started + count} units in the run" in found
        assert "at most 150" in found


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("a.txt", None),
        ("a/b/c.txt", None),
        ("a/b/c/d.txt", "3 directories deep; the most accepted is 2"),
        ("", "empty path"),
        ("/etc/passwd", "is absolute"),
        ("../x", "'..' part"),
        ("a/./b", "'.' or '..' part"),
        ("a//b", "empty"),
        ("a/", "empty"),
        ("a\\b", "backslash"),
        ("a\nb", "control character"),
        ("x" * 256, "longer than 255"),
    ],
)
def test_upload_path_problem(path: str, problem: str | None) -> None:
    """A file of an uploaded directory has a safe relative POSIX path within the depth."""
    found = upload_path_problem(path, LIMITS)
    assert found is None if problem is None else (found is not None and problem in found)


def test_sizes_counts_and_bodies() -> None:
    """The size, count and body rules refuse past the limit only, naming the limit and
    the option that raises it."""
    limits = InputLimits(max_file_bytes=1024, max_files=2, max_workflow_bytes=2048)
    assert file_size_problem(1024, limits) is None
    assert "1 KiB (raise it with --max-file-bytes" in (file_size_problem(1025, limits) or "")
    assert file_count_problem(2, limits) is None
    assert "--max-files" in (file_count_problem(3, limits) or "")
    assert workflow_size_problem(2048, limits) is None
    assert "--max-workflow-bytes" in (workflow_size_problem(2049, limits) or "")
    assert tasks_problem(3, LIMITS) is None
    assert "4 tasks; a run may have at most 3" in (tasks_problem(4, LIMITS) or "")
    assert body_limit("POST", "/runs", limits) == limits.max_request_bytes
    assert body_limit("post", "/runs/", limits) == limits.max_request_bytes
    assert body_limit("POST", "/runs/x/replay", limits) == SMALL_BODY_BYTES
    assert "--max-request-bytes" in body_too_large(2**20, 2**30)
    assert "--max-request-bytes" not in body_too_large(2**20, submission=False)


@pytest.mark.parametrize("data", [b"", b"a", b"ab", b"abc", b"abcd", bytes(range(256)) * 3])
def test_decoded_size_is_exact(data: bytes) -> None:
    """The size checked before decoding is the decoded size."""
    assert decoded_size(base64.b64encode(data).decode()) == len(data)


@pytest.mark.parametrize(
    "bad",
    [{"max_tasks": 0}, {"max_files": -1}, {"max_depth": True}, {"count_timeout_s": 0.0}],
)
def test_limits_refuse_nonsense(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="InputLimits"):
        InputLimits(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("header", "token", "ok"),
    [
        (None, None, True),
        ("whatever", None, True),
        (None, "t0k", False),
        ("Bearer t0k", "t0k", True),
        ("bearer  t0k ", "t0k", True),
        ("Basic t0k", "t0k", False),
        ("Bearer t0", "t0k", False),
        ("Bearer t0k", "t0k\u00e9", False),
        ("Bearer \u00e9t\u00e9", "t0k", False),
        ("t0k", "t0k", False),
    ],
)
def test_token_matches(header: str | None, token: str | None, ok: bool) -> None:
    """The bearer token: a wrong scheme, value or a header that is not ASCII is refused."""
    assert token_matches(header, token) is ok


def test_anchors_used_with_reason_are_read() -> None:
    """Anchors and aliases used as people use them (shared settings) still work."""
    doc = parse_workflow(
        "tasks:\n  - {name: a, type: t, settings: &s {units: 2}}\n"
        "  - {name: b, type: t, settings: *s}\n"
    )
    assert [t.settings for t in doc.tasks] == [{"units": 2}, {"units": 2}]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tasks: " + "[" * 70 + "]" * 70, "nested more than 64 levels deep"),
        ("tasks: " + "[" * 10_000, "nest"),
        (
            "a: &a [1,1,1,1,1,1,1,1,1,1]\n"
            + "".join(
                f"{c}: &{c} [" + ",".join([f"*{p}"] * 10) + "]\n"
                for p, c in zip("abcde", "bcdef", strict=True)
            )
            + "tasks: []\n",
            "more than 1000000 values once its aliases are expanded",
        ),
    ],
    ids=["deep", "deep-unclosed", "alias-bomb"],
)
def test_yaml_bounds(text: str, message: str) -> None:
    """Deep nesting and alias bombs are refused with a message, not a crash or a stall."""
    with pytest.raises(WorkflowError) as caught:
        parse_workflow(text)
    assert message in str(caught.value)


def test_intake_options_read_their_environment_variables() -> None:
    """The intake options of ``simrun service`` (or their SIMRUN_* variables) make one
    `InputLimits`, defaults otherwise."""
    seen: list[InputLimits] = []

    @click.command()
    @click_options(ControllerSettings)
    def command(settings: ControllerSettings) -> None:
        seen.append(settings.intake)

    runner = CliRunner()
    result = runner.invoke(command, ["--max-tasks", "7"], env={"SIMRUN_MAX_UNITS_PER_TASK": "99"})
    assert result.exit_code == 0, result.output
    assert seen == [InputLimits(max_tasks=7, max_units_per_task=99)]
    result = runner.invoke(command, ["--max-files", "0"])
    assert result.exit_code == 2
    assert "--max-files" in result.output
