"""The example plugin: its registration, the demo workflow, the heat sweep's numbers and
files, and the report command run as a real process."""

from __future__ import annotations

import csv
import itertools
import json
import shlex
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from simrun.examples import heat, report
from simrun.examples.files import JsonFileError, read_json
from simrun.examples.plate import PlateError, load_plate
from simrun.plugins import TaskPaths, TaskType, load_task_types, resolve, task_type_problems
from simrun.workflow import (
    WorkflowError,
    check_workflow,
    load_workflow,
    parse_workflow,
    source_problems,
)
from tests.support.cli_harness import run_module

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: A small, fast sweep: 3 diffusivities by 2 edge temperatures on a 16-by-16 grid.
SMALL: dict[str, Any] = {
    "grid": 16,
    "diffusivities": [0.5, 1.0, 2.0],
    "boundary_temperatures": [0.0, 40.0],
    "duration": 0.05,
}

HEATER_PLATE: dict[str, Any] = {
    "name": "test plate",
    "initial_temperature": 20.0,
    "fixed_regions": [{"name": "heater", "x": [0.4, 0.6], "y": [0.4, 0.6], "temperature": 90.0}],
}


def write_plate(directory: Path, spec: Mapping[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "plate.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def task_paths(store: Path, plate: Path) -> TaskPaths:
    return TaskPaths.for_task(store, "run1", "sweep", inputs={"plate": plate})


def run_units(
    settings: Mapping[str, Any], paths: TaskPaths, skip: frozenset[int] = frozenset()
) -> int:
    """Run the heat task the way a worker does: through the references of its type."""
    task_type = load_task_types()["heat"]
    assert task_type.count_units is not None
    assert task_type.setup is not None
    assert task_type.compute_unit is not None
    count = resolve(task_type.count_units)(settings)
    resolve(task_type.setup)(settings, paths)
    for index in range(count):
        if index not in skip:
            resolve(task_type.compute_unit)(settings, index, paths)
    return count


def sweep(
    tmp_path: Path, settings: Mapping[str, Any], plate: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Run every unit and the merge; the point records in index order."""
    paths = task_paths(tmp_path / "store", write_plate(tmp_path / "src", plate))
    count = run_units(settings, paths)
    merge = load_task_types()["heat"].merge
    assert merge is not None
    resolve(merge)(settings, paths)
    return [
        json.loads((paths.out / heat.point_name(i)).read_text(encoding="utf-8"))
        for i in range(count)
    ]


def expand_command(command: str, settings: Path, out: Path, inputs: dict[str, Path]) -> list[str]:
    """The argv simrun-exec builds from a command template (the contract of TaskType)."""
    argv: list[str] = []
    for part in shlex.split(command):
        if "{input}" in part:
            argv += [part.replace("{input}", f"{p}={inputs[p]}") for p in sorted(inputs)]
        else:
            argv.append(part.replace("{settings}", str(settings)).replace("{out}", str(out)))
    return argv


def run_report(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_module("simrun.examples.report", *args, cwd=cwd)


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    heat.clear_cache()


@pytest.fixture(scope="module")
def heat_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output directory of a finished small sweep (points and summary.csv)."""
    tmp = tmp_path_factory.mktemp("heat")
    paths = task_paths(tmp / "store", write_plate(tmp / "src", HEATER_PLATE))
    run_units(SMALL, paths)
    heat.merge(SMALL, paths)
    return paths.out


# --- registration and the demo -----------------------------------------------------------


def test_both_types_are_registered_and_usable() -> None:
    """The package's entry points register `heat` (splittable) and `report` (a command),
    the very objects of the modules, and neither has a problem that stops it running."""
    types = load_task_types()
    assert types["heat"] is heat.TASK_TYPE
    assert types["report"] is report.TASK_TYPE
    for task_type in (heat.TASK_TYPE, report.TASK_TYPE):
        assert isinstance(task_type, TaskType)
        assert task_type_problems(task_type) == []
    assert heat.TASK_TYPE.splittable
    assert not report.TASK_TYPE.splittable
    assert heat.TASK_TYPE.inputs == ("plate",)
    assert report.TASK_TYPE.inputs == ("table",)
    assert heat.TASK_TYPE.cost_setting == "grid"
    for ref in ("count_units", "setup", "compute_unit", "merge"):
        assert callable(resolve(getattr(heat.TASK_TYPE, ref)))


def test_demo_workflow_validates() -> None:
    """examples/heat.yaml checks clean against the installed types, its source exists and
    is a valid plate, and its sweep has a demo's size."""
    path = EXAMPLES / "heat.yaml"
    doc = load_workflow(path)
    settings = check_workflow(doc, load_task_types(), str(path), path.read_text("utf-8"))
    assert source_problems(doc, path.parent) == []
    assert load_plate(EXAMPLES / doc.sources["plate"]).fixed_regions
    assert 12 <= heat.count_units(settings["sweep"]) <= 48
    assert doc.order() == ["sweep", "summary"]


def test_bad_settings_in_a_workflow_name_task_field_and_line() -> None:
    """A workflow whose heat settings break a rule is refused naming the task, the field
    and the line it is on."""
    text = (EXAMPLES / "heat.yaml").read_text("utf-8").replace("grid: 64", "grid: 4")
    doc = parse_workflow(text, "heat.yaml")
    with pytest.raises(WorkflowError) as caught:
        check_workflow(doc, load_task_types(), "heat.yaml", text)
    [problem] = caught.value.problems
    assert problem.where() == "task 'sweep', settings.grid"
    assert problem.line == text.splitlines().index("      grid: 4") + 1


# --- the heat sweep ----------------------------------------------------------------------


def test_sweep_writes_one_summary_row_per_point_in_order(heat_out: Path) -> None:
    """summary.csv lists every point once, by index, with the parameters of that index."""
    settings = heat.HeatSettings.model_validate(SMALL)
    with (heat_out / heat.SUMMARY_NAME).open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        assert tuple(reader.fieldnames or ()) == heat.SUMMARY_COLUMNS
        rows = list(reader)
    assert [int(r["index"]) for r in rows] == list(range(settings.points))
    for row in rows:
        diffusivity, boundary = settings.point(int(row["index"]))
        assert float(row["diffusivity"]) == diffusivity
        assert float(row["boundary_temperature"]) == boundary
        assert int(row["grid"]) == 16
    assert not list(heat_out.glob(".*")), "temporary files were left behind"


def test_equal_edges_settle_at_the_edge_temperature(tmp_path: Path) -> None:
    """With no held regions, a plate whose edges all sit at T comes to rest at T everywhere."""
    settings = {**SMALL, "boundary_temperatures": [25.0, -10.0], "duration": 2.0}
    settings["tolerance"] = 1e-3
    plate = {"initial_temperature": 80.0}
    for record in sweep(tmp_path, settings, plate):
        assert record["steady"] is True
        edge = record["boundary_temperature"]
        for key in ("min_temperature", "max_temperature", "mean_temperature"):
            assert record[key] == pytest.approx(edge, abs=1e-3), key


def test_higher_diffusivity_comes_to_rest_sooner(tmp_path: Path) -> None:
    """Each doubling of the diffusivity brings the steady state markedly sooner."""
    settings = {**SMALL, "diffusivities": [0.5, 1.0, 2.0, 4.0], "duration": 3.0}
    settings["boundary_temperatures"] = [0.0]
    records = sweep(tmp_path, settings, HEATER_PLATE)
    assert all(r["steady"] for r in records)
    times = [r["time_to_steady"] for r in records]
    for slower, faster in itertools.pairwise(times):
        assert faster < 0.75 * slower


def test_temperatures_stay_between_the_extremes_of_the_start(tmp_path: Path) -> None:
    """Maximum principle: at no time does a cell leave the range of the initial, held and
    edge temperatures, even at the largest stable time step (cfl = 1)."""
    plate = {
        "initial_temperature": 100.0,
        "fixed_regions": [{"x": [0.1, 0.3], "y": [0.6, 0.9], "temperature": 60.0}],
    }
    settings = {**SMALL, "boundary_temperatures": [0.0, 30.0], "cfl": 1.0, "save_fields": True}
    records = sweep(tmp_path, settings, plate)
    out = task_paths(tmp_path / "store", tmp_path / "src" / "plate.json").out
    for record in records:
        field = np.load(out / heat.field_name(record["index"]))
        low = min(record["boundary_temperature"], 60.0)
        assert field.min() >= low - 1e-9
        assert field.max() <= 100.0 + 1e-9
        assert record["steady"] is False, "the check needs a field still in motion"
        assert float(field.max()) == record["max_temperature"]


def test_cold_edges_cool_the_plate_over_time(tmp_path: Path) -> None:
    """Heat only leaves a hot plate through cold edges: the later, the cooler it is."""
    means = []
    for duration in (0.01, 0.03, 0.1):
        settings = {**SMALL, "diffusivities": [1.0], "boundary_temperatures": [0.0]}
        settings["duration"] = duration
        run = tmp_path / f"d{duration}"
        means.append(sweep(run, settings, {"initial_temperature": 100.0})[0]["mean_temperature"])
    assert means == sorted(means, reverse=True)
    assert means[0] < 100.0


def test_a_unit_is_deterministic_and_needs_no_setup(tmp_path: Path) -> None:
    """Computing an index twice, once in a process that never ran setup, writes identical
    bytes."""
    settings = {**SMALL, "save_fields": True}
    plate = write_plate(tmp_path / "src", HEATER_PLATE)
    first = task_paths(tmp_path / "a", plate)
    second = task_paths(tmp_path / "b", plate)
    heat.setup(settings, first)
    heat.compute_unit(settings, 4, first)
    heat.clear_cache()
    heat.compute_unit(settings, 4, second)
    for name in (heat.point_name(4), heat.field_name(4)):
        assert (first.out / name).read_bytes() == (second.out / name).read_bytes()
    heat.compute_unit(settings, 4, second)
    names = {p.name for p in second.out.iterdir()}
    assert names == {heat.point_name(4), heat.field_name(4)}, "a rerun leaves only its files"


def test_merge_refuses_missing_points_and_names_them(tmp_path: Path) -> None:
    """A merge with points not computed fails naming those indices, and writes no summary."""
    paths = task_paths(tmp_path / "store", write_plate(tmp_path / "src", HEATER_PLATE))
    run_units(SMALL, paths, skip=frozenset({1, 3, 4}))
    with pytest.raises(heat.MissingPointsError, match=r"3 of 6 points .*indices 1, 3-4$"):
        heat.merge(SMALL, paths)
    assert not (paths.out / heat.SUMMARY_NAME).exists()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"grid": 4}, "grid"),
        ({"grid": 100_000}, "grid"),
        ({"diffusivities": []}, "diffusivities"),
        ({"diffusivities": [1.0, -2.0]}, "diffusivities.1"),
        ({"diffusivities": [1.0, 1.0]}, "given twice"),
        ({"boundary_temperatures": [-300.0]}, "boundary_temperatures.0"),
        ({"duration": 0}, "duration"),
        ({"max_steps": 0}, "max_steps"),
        ({"cfl": 1.5}, "cfl"),
        ({"duration": 1000.0}, "max_steps"),
        ({"gird": 32}, "gird"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(change: dict[str, Any], named: str) -> None:
    """Settings that break a rule are refused with a message that names the field."""
    with pytest.raises(ValidationError, match=named):
        heat.count_units({**SMALL, **change})


def test_bad_plates_are_refused_naming_file_and_field(tmp_path: Path) -> None:
    """A broken plate file, a missing one or an unconnected port each stop the unit with
    a message naming what is wrong."""
    reversed_x = {"fixed_regions": [{"x": [0.6, 0.4], "y": [0.1, 0.2], "temperature": 1.0}]}
    path = write_plate(tmp_path / "src", reversed_x)
    with pytest.raises(PlateError, match=r"plate\.json: fixed_regions\.0: x goes from 0\.6"):
        heat.compute_unit(SMALL, 0, task_paths(tmp_path, path))
    with pytest.raises(PlateError, match=r"nowhere\.json"):
        heat.compute_unit(SMALL, 0, task_paths(tmp_path, tmp_path / "nowhere.json"))
    with pytest.raises(PlateError, match="no input 'plate'"):
        heat.compute_unit(SMALL, 0, TaskPaths.for_task(tmp_path, "run1", "sweep"))
    assert not list(tmp_path.glob("runs/run1/sweep/out/*"))


def test_plate_port_may_name_the_file_or_its_directory(tmp_path: Path) -> None:
    """The plate port works whether it points at the plate file or at a directory holding
    exactly one .json file, and the two give the same result."""
    path = write_plate(tmp_path / "src", HEATER_PLATE)
    by_file = task_paths(tmp_path / "a", path)
    by_dir = task_paths(tmp_path / "b", path.parent)
    heat.compute_unit(SMALL, 2, by_file)
    heat.compute_unit(SMALL, 2, by_dir)
    name = heat.point_name(2)
    assert (by_file.out / name).read_bytes() == (by_dir.out / name).read_bytes()
    (path.parent / "other.json").write_text("{}", encoding="utf-8")
    with pytest.raises(PlateError, match=r"exactly one plate \.json file"):
        heat.compute_unit(SMALL, 2, by_dir)


# --- the report command ------------------------------------------------------------------


def test_report_command_writes_the_report(heat_out: Path, tmp_path: Path) -> None:
    """The report's command template, expanded as simrun-exec does, writes report.md with
    the title, every point and the hottest point of the sweep."""
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"title": "Small sweep"}), encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    argv = expand_command(report.TASK_TYPE.command or "", settings, out, {"table": heat_out})
    assert argv[0] == report.PROG
    done = run_report(argv[1:], tmp_path)
    assert done.returncode == 0, done.stderr
    text = (out / report.REPORT_NAME).read_text(encoding="utf-8")
    assert text.startswith("# Small sweep\n")
    hottest = max(report.read_summary(heat_out), key=lambda p: p.mean)
    assert hottest.boundary == 40.0
    assert f"- Hottest (highest mean temperature): point {hottest.index}:" in text
    assert sum(line.startswith("| ") for line in text.splitlines()) == 1 + 6


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["settings.json", "out", "table=empty"], "summary.csv does not exist"),
        (["settings.json"], "expected a settings file and an output directory"),
        (["settings.json", "out", "empty"], "expected an input as <port>=<path>"),
        (["settings.json", "out", "plate=empty"], "unknown input port 'plate'"),
        (["missing.json", "out", "table=heat"], "cannot read the settings file"),
        (["bad-settings.json", "out", "table=heat"], "titel: not a setting"),
    ],
)
def test_report_refuses_bad_input_in_one_line(
    heat_out: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    """Bad input ends the report command non-zero with one stderr line and no traceback,
    and writes no report."""
    (tmp_path / "settings.json").write_text("{}", encoding="utf-8")
    (tmp_path / "bad-settings.json").write_text('{"titel": "x"}', encoding="utf-8")
    (tmp_path / "empty").mkdir()
    (tmp_path / "heat").symlink_to(heat_out)
    done = run_report(args, tmp_path)
    assert done.returncode != 0
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out" / report.REPORT_NAME).exists()


def test_read_json_names_each_failure(tmp_path: Path) -> None:
    """The examples' JSON reader returns the document, and tells a file that cannot be read
    from one that is not valid JSON."""
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text('{"a": 1}', encoding="utf-8")
    bad.write_text("{nope", encoding="utf-8")
    assert read_json(good) == {"a": 1}
    with pytest.raises(JsonFileError) as missing:
        read_json(tmp_path / "missing.json")
    assert missing.value.unreadable
    with pytest.raises(JsonFileError) as broken:
        read_json(bad)
    assert not broken.value.unreadable
    assert "Expecting property name" in broken.value.detail
