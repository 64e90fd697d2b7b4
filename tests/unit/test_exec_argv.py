"""The argv template of unsplit tasks (`expand_argv`) and the job file of simrun-exec
(`CommandSpec`): pure logic, no process is started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simrun.core.reports import WorkerReport
from simrun.plugins import TaskPaths
from simrun.worker.exec.argv import expand_argv
from simrun.worker.exec.main import exec_main
from simrun.worker.exec.spec import CommandResult, CommandSpec, JobFileError

SETTINGS = Path("/store/runs/r1/report/settings.json")
OUT = Path("/store/runs/r1/report/out")
TABLE = Path("/store/runs/r1/heat/out")
B = Path("/store/runs/r1/b/out")
SPACED = Path("/data/my dir/x")

# (template, inputs, expected argv): the spec's rules, one row each.
EXPANSIONS: list[tuple[str, dict[str, Path], list[str]]] = [
    # The spec's own example: ports sorted by name, each as <port>=<path>.
    (
        "simrun-heat-report {settings} {out} {input}",
        {"table": TABLE, "b": B},
        ["simrun-heat-report", str(SETTINGS), str(OUT), f"b={B}", f"table={TABLE}"],
    ),
    # Without inputs the {input} part is dropped.
    (
        "simrun-heat-report {settings} {out} {input}",
        {},
        ["simrun-heat-report", str(SETTINGS), str(OUT)],
    ),
    # One input: one part.
    ("prog {input}", {"table": TABLE}, ["prog", f"table={TABLE}"]),
    # A quoted part holding {input} is one argv element per port, spaces and all.
    (
        'prog "--in {input}" {out}',
        {"x": SPACED, "a": B},
        ["prog", f"--in a={B}", f"--in x={SPACED}", str(OUT)],
    ),
    # ... and dropped as a whole without inputs.
    ('prog "--in {input}" {out}', {}, ["prog", str(OUT)]),
    # Only the part with {input} repeats: a flag in its own part stays once.
    ("prog --in {input}", {"b": B, "a": TABLE}, ["prog", "--in", f"a={TABLE}", f"b={B}"]),
    # Placeholders embedded in a larger part.
    (
        "prog --out={out} --settings={settings}",
        {},
        ["prog", f"--out={OUT}", f"--settings={SETTINGS}"],
    ),
    ("prog --in={input}", {"t": TABLE}, ["prog", f"--in=t={TABLE}"]),
    # Several placeholders in one part; {input} twice in one part gets the same port.
    ("prog {out}:{settings}", {}, ["prog", f"{OUT}:{SETTINGS}"]),
    ("prog {input}+{input}", {"p": B}, ["prog", f"p={B}+p={B}"]),
    # A path with spaces stays one element: no shell ever splits it again.
    ("prog {input}", {"p": SPACED}, ["prog", f"p={SPACED}"]),
    # Quotes group words and are removed; placeholders inside quotes are still filled.
    ("prog 'a b' \"c d\" '{out}'", {}, ["prog", "a b", "c d", str(OUT)]),
    ("prog a\\ b", {}, ["prog", "a b"]),
    # Doubled braces are literal braces; '#' is not a comment; $VAR is not expanded.
    ("prog {{x}} {{{out}}}", {}, ["prog", "{x}", "{" + str(OUT) + "}"]),
    ("prog # $HOME ; | >", {}, ["prog", "#", "$HOME", ";", "|", ">"]),
    # Extra whitespace between parts does not make empty parts.
    ("  prog   {out}  ", {}, ["prog", str(OUT)]),
]


@pytest.mark.parametrize(("template", "inputs", "expected"), EXPANSIONS)
def test_expand_argv_follows_the_spec(
    template: str, inputs: dict[str, Path], expected: list[str]
) -> None:
    """{settings} and {out} are replaced wherever they occur; a part with {input} is repeated
    per input port sorted by port as <port>=<path>, and dropped without inputs."""
    assert expand_argv(template, SETTINGS, OUT, inputs) == expected


# (template, inputs, words the error must contain): each bad template's one clear error.
BAD_TEMPLATES: list[tuple[str, dict[str, Path], list[str]]] = [
    ("prog {foo}", {}, ["'prog {foo}'", "'{foo}'", "unknown placeholder"]),
    ("prog --x={Out}", {}, ["'--x={Out}'", "unknown placeholder"]),
    ("prog {}", {}, ["'{}'", "unknown placeholder"]),
    ('prog "unclosed {out}', {}, ["'prog \"unclosed {out}'", "'\"unclosed {out}'", "quotation"]),
    ("prog 'single", {}, ['"\'single"', "quotation"]),
    ("prog trailing\\", {}, ["'trailing\\\\'", "escaped"]),
    ("prog a{b", {}, ["'a{b'", "unmatched '{'"]),
    ("prog a}b", {}, ["'a}b'", "unmatched '}'"]),
    ("prog {foo}{input}", {}, ["'{foo}'", "unknown placeholder"]),  # even if dropped
    ("", {}, ["''", "empty"]),
    ("   ", {}, ["empty"]),
    ("{input}", {}, ["'{input}'", "nothing is left to run"]),
    ("prog {input}", {"a=b": B}, ["'a=b'", "port"]),
    ("prog {input}", {"": B}, ["''", "port"]),
]


@pytest.mark.parametrize(("template", "inputs", "words"), BAD_TEMPLATES)
def test_bad_templates_raise_one_clear_error(
    template: str, inputs: dict[str, Path], words: list[str]
) -> None:
    """A template that cannot be expanded raises ValueError naming the template and the part
    (or the port) at fault."""
    with pytest.raises(ValueError, match="command template") as info:
        expand_argv(template, SETTINGS, OUT, inputs)
    for word in words:
        assert word in str(info.value)


_PORTS = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)
_PATHS = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\0"),
    min_size=1,
    max_size=20,
).map(lambda s: Path("/" + s))


@given(inputs=st.dictionaries(_PORTS, _PATHS, max_size=5), n_before=st.integers(0, 3))
def test_any_paths_pass_verbatim_and_sorted(inputs: dict[str, Path], n_before: int) -> None:
    """Whatever characters the paths hold, each input becomes exactly one element
    '<port>=<path>', in the order of the sorted port names, after the fixed parts."""
    template = "prog " + " ".join(f"a{i}" for i in range(n_before)) + " {input} {out}"
    argv = expand_argv(template, SETTINGS, OUT, inputs)
    fixed = ["prog", *(f"a{i}" for i in range(n_before))]
    expected_inputs = [f"{port}={inputs[port]}" for port in sorted(inputs)]
    assert argv == [*fixed, *expected_inputs, str(OUT)]


# --- the job file --------------------------------------------------------------------------


def _spec(**changes: Any) -> CommandSpec:
    paths = TaskPaths.for_task(Path("/store"), "r1", "report", {"table": TABLE})
    fields: dict[str, Any] = {
        "command": "simrun-heat-report {settings} {out} {input}",
        "settings": {"title": "T", "nested": {"x": [1, 2.5, None]}},
        "paths": paths,
        "limit_gb": 1.5,
        "timeout_s": 30.0,
        "checkpoints": True,
        "attempt": 3,
        "report": Path("/tmp/r.json"),
    }
    fields.update(changes)
    return CommandSpec(**fields)


def test_command_spec_round_trips_through_plain_data() -> None:
    """from_dict(to_dict(spec)) gives back the same spec, for every field."""
    spec = _spec()
    data = spec.to_dict()
    assert data["version"] == 1
    assert data["paths"]["inputs"] == {"table": str(TABLE)}
    assert CommandSpec.from_dict(data) == spec
    minimal = _spec(timeout_s=None, checkpoints=False, attempt=1, report=None)
    assert CommandSpec.from_dict(minimal.to_dict()) == minimal


def _mutated(change: Any) -> dict[str, Any]:
    data = _spec().to_dict()
    change(data)
    return data


# (how to spoil a good job, what the error must name)
BAD_JOBS: list[tuple[Any, str]] = [
    (lambda d: d.pop("command"), "'command' is missing"),
    (lambda d: d.update(command="  "), "'command'"),
    (lambda d: d.update(command=["prog"]), "'command'"),
    (lambda d: d.update(settings=[1]), "'settings'"),
    (lambda d: d.update(limit_gb="abc"), "'limit_gb'"),
    (lambda d: d.update(limit_gb=0), "'limit_gb'"),
    (lambda d: d.update(limit_gb=True), "'limit_gb'"),
    (lambda d: d.update(timeout_s=-1), "'timeout_s'"),
    (lambda d: d.update(attempt=0), "'attempt'"),
    (lambda d: d.update(attempt=1.5), "'attempt'"),
    (lambda d: d.update(checkpoints="yes"), "'checkpoints'"),
    (lambda d: d.update(version=2), "'version'"),
    (lambda d: d.pop("version"), "'version'"),
    (lambda d: d.update(colour="red"), "unknown field 'colour'"),
    (lambda d: d.update(paths="/store"), "'paths'"),
    (lambda d: d["paths"].pop("out"), "'paths.out' is missing"),
    (lambda d: d["paths"].update(out=""), "'paths.out'"),
    (lambda d: d["paths"].update(out=7), "'paths.out'"),
    (lambda d: d["paths"].update(extra="/x"), "'paths.extra'"),
    (lambda d: d["paths"].update(inputs=["table"]), "'paths.inputs'"),
    (lambda d: d["paths"]["inputs"].update(table=None), "'paths.inputs.table'"),
    (lambda d: d["paths"]["inputs"].update({"a=b": "/x"}), "'a=b'"),
    (lambda d: d.update(report=3), "'report'"),
]


@pytest.mark.parametrize(("change", "words"), BAD_JOBS)
def test_bad_job_fields_are_named(change: Any, words: str) -> None:
    """A job with a missing, unknown or ill-typed field raises JobFileError naming it."""
    with pytest.raises(JobFileError) as info:
        CommandSpec.from_dict(_mutated(change))
    assert words in str(info.value)


def test_a_job_must_be_an_object() -> None:
    """A job that is not a JSON object is refused as such."""
    with pytest.raises(JobFileError, match="JSON object"):
        CommandSpec.from_dict([1, 2])


def test_command_result_round_trips_and_checks_its_fields() -> None:
    """A result read back equals the one written; a result with a bad outcome is refused."""
    result = CommandResult(
        outcome="killed",
        exit_code=None,
        error="why\ntail",
        report=WorkerReport(
            peak_memory_gb=(0.25,),
            seconds_per_unit=None,
            units=0,
            limit_gb=0.1,
            killed_for_memory=True,
        ),
        started="2024-01-01T00:00:00.000+00:00",
        finished="2024-01-01T00:00:01.000+00:00",
        wall_s=1.0,
        signal="SIGKILL",
        argv=("prog", "x"),
        attempt=2,
        logs={"stderr": "/x.err"},
    )
    assert CommandResult.from_dict(result.to_dict()) == result
    bad = result.to_dict() | {"outcome": "exploded"}
    with pytest.raises(JobFileError, match="'outcome'"):
        CommandResult.from_dict(bad)


def test_usage_errors_return_an_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    """simrun-exec without --job returns 2 and prints the usage, it does not raise."""
    assert exec_main([]) == 2
    assert "--job" in capsys.readouterr().err
