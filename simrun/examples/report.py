"""The ``report`` task type: a markdown report of a heat sweep (``report.md``), and a plot
(``plot.png``) when matplotlib is installed. Bad input ends it with one line on stderr."""

from __future__ import annotations

import csv
import importlib
import io
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from simrun.examples.files import JsonFileError, read_json, write_atomic
from simrun.examples.heat import SUMMARY_COLUMNS, SUMMARY_NAME
from simrun.plugins import ResourceHint, TaskType

PROG = "simrun-heat-report"
USAGE = f"usage: {PROG} SETTINGS_JSON OUT_DIR table=HEAT_OUTPUT_DIR"
REPORT_NAME = "report.md"
PLOT_NAME = "plot.png"
EXIT_BAD_INPUT = 1
EXIT_USAGE = 2


class ReportSettings(BaseModel):
    """The settings of a report: its title and how many points its table lists at most."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    title: str = Field(default="Heat sweep", min_length=1, max_length=200)
    max_rows: int = Field(default=200, ge=1, le=100_000)

    @field_validator("title")
    @classmethod
    def _one_line(cls, title: str) -> str:
        if any(ord(c) < 32 or ord(c) == 127 for c in title):
            raise ValueError("the title must be one line without control characters")
        return title


class BadInput(Exception):
    """Input the report cannot use; the message is the one line shown to the user."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Invocation:
    """What the command line asks for: the settings file, the output and the table input."""

    settings: Path
    out: Path
    table: Path


@dataclass(frozen=True)
class Point:
    """One row of a heat sweep's summary."""

    index: int
    diffusivity: float
    boundary: float
    grid: int
    final_time: float
    time_to_steady: float | None
    mean: float
    low: float
    high: float
    center: float


# --- reading -----------------------------------------------------------------------------


def parse_argv(argv: Sequence[str]) -> Invocation:
    """Read ``SETTINGS OUT port=PATH...``; the only port is ``table``."""
    if len(argv) < 2:
        raise BadInput(f"expected a settings file and an output directory; {USAGE}", EXIT_USAGE)
    inputs: dict[str, Path] = {}
    for arg in argv[2:]:
        port, sep, value = arg.partition("=")
        if not sep or not port or not value:
            raise BadInput(f"expected an input as <port>=<path>, got {arg!r}; {USAGE}", EXIT_USAGE)
        if port != "table":
            raise BadInput(f"unknown input port {port!r}; the only port is 'table'", EXIT_USAGE)
        if port in inputs:
            raise BadInput(f"input port {port!r} is given twice", EXIT_USAGE)
        inputs[port] = Path(value)
    if "table" not in inputs:
        raise BadInput(f"the input 'table' is missing; {USAGE}", EXIT_USAGE)
    return Invocation(settings=Path(argv[0]), out=Path(argv[1]), table=inputs["table"])


def load_settings(path: Path) -> ReportSettings:
    """The report's settings from the JSON file at ``path``."""
    try:
        raw = read_json(path)
    except JsonFileError as exc:
        if exc.unreadable:
            raise BadInput(f"cannot read the settings file {path}: {exc.detail}") from exc
        raise BadInput(f"the settings file {path} is not valid JSON: {exc.detail}") from exc
    if not isinstance(raw, dict):
        raise BadInput(f"the settings file {path} holds a {type(raw).__name__}, not an object")
    try:
        return ReportSettings.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "settings"
        message = (
            "not a setting of the report"
            if first["type"] == "extra_forbidden"
            else first["msg"].removeprefix("Value error, ")
        )
        raise BadInput(f"the settings file {path}: {where}: {message}") from exc


def _number(row: dict[str, str], column: str, where: str) -> float:
    text = row.get(column) or ""
    try:
        return float(text)
    except ValueError:
        raise BadInput(f"{where}: column {column!r} is not a number: {text!r}") from None


def _point(row: dict[str, str], where: str) -> Point:
    steady = row.get("time_to_steady") or ""
    return Point(
        index=int(_number(row, "index", where)),
        diffusivity=_number(row, "diffusivity", where),
        boundary=_number(row, "boundary_temperature", where),
        grid=int(_number(row, "grid", where)),
        final_time=_number(row, "final_time", where),
        time_to_steady=_number(row, "time_to_steady", where) if steady else None,
        mean=_number(row, "mean_temperature", where),
        low=_number(row, "min_temperature", where),
        high=_number(row, "max_temperature", where),
        center=_number(row, "center_temperature", where),
    )


def read_summary(table: Path) -> list[Point]:
    """The points of the summary in ``table`` (a heat task's output directory, or the
    ``summary.csv`` itself), sorted by index."""
    path = table / SUMMARY_NAME if table.is_dir() else table
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(
            f"{path} does not exist; the table input must be the output of a heat task"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read {path}: {exc}") from None
    reader = csv.DictReader(io.StringIO(text))
    absent = [c for c in SUMMARY_COLUMNS if c not in (reader.fieldnames or [])]
    if absent:
        raise BadInput(f"{path} is not a heat summary: it lacks the columns {', '.join(absent)}")
    points = [_point(row, f"{path}, line {reader.line_num}") for row in reader]
    if not points:
        raise BadInput(f"{path} holds no points")
    return sorted(points, key=lambda p: p.index)


# --- writing -----------------------------------------------------------------------------


def _values(values: Sequence[float], unit: str = "") -> str:
    """The distinct values, ascending: ``0, 10, 20 °C``."""
    return ", ".join(f"{v:g}" for v in sorted(set(values))) + unit


def _describe(point: Point) -> str:
    return (
        f"point {point.index}: diffusivity {point.diffusivity:g}, edges at "
        f"{point.boundary:g} °C; mean {point.mean:.2f} °C, centre {point.center:.2f} °C"
    )


def _row(point: Point) -> str:
    steady = f"{point.time_to_steady:.4g}" if point.time_to_steady is not None else "—"
    temperatures = (f"{t:.2f}" for t in (point.mean, point.low, point.high, point.center))
    cells = (str(point.index), f"{point.diffusivity:g}", f"{point.boundary:g}", *temperatures)
    return "| " + " | ".join((*cells, steady)) + " |"


def render(settings: ReportSettings, points: Sequence[Point], plot: bool = False) -> str:
    """The markdown report of ``points`` (sorted by index, at least one)."""
    steady = sum(p.time_to_steady is not None for p in points)
    hottest = max(points, key=lambda p: p.mean)
    coolest = min(points, key=lambda p: p.mean)
    grids = " and ".join(f"{g}-by-{g}" for g in sorted({p.grid for p in points}))
    diffusivities = {p.diffusivity for p in points}
    edges = {p.boundary for p in points}
    lines = [
        f"# {settings.title}",
        "",
        f"{len(points)} points on a {grids} grid: {len(diffusivities)} diffusivities "
        f"({_values([p.diffusivity for p in points])}) by {len(edges)} edge temperatures "
        f"({_values([p.boundary for p in points], ' °C')}).",
        f"{steady} of {len(points)} points reached a steady state within "
        f"{max(p.final_time for p in points):.4g} time units.",
        "",
        f"- Hottest (highest mean temperature): {_describe(hottest)}.",
        f"- Coolest (lowest mean temperature): {_describe(coolest)}.",
        "",
    ]
    if plot:
        lines += [f"![Mean temperature against edge temperature]({PLOT_NAME})", ""]
    lines += [
        "| point | diffusivity | edges °C | mean °C | min °C | max °C | centre °C | steady at |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(_row(p) for p in points[: settings.max_rows]),
    ]
    if len(points) > settings.max_rows:
        lines += ["", f"The table shows the first {settings.max_rows} of {len(points)} points."]
    return "\n".join(lines) + "\n"


def _pyplot() -> Any | None:
    """matplotlib's pyplot on a backend without a display, or None when it is missing."""
    try:
        matplotlib = importlib.import_module("matplotlib")
    except ImportError:
        return None
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")


def write_plot(settings: ReportSettings, points: Sequence[Point], out: Path) -> bool:
    """Plot mean against edge temperature, one line per diffusivity, into ``plot.png``;
    False when matplotlib is not installed."""
    plt = _pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    try:
        for diffusivity in sorted({p.diffusivity for p in points}):
            line = sorted(
                (p for p in points if p.diffusivity == diffusivity), key=lambda p: p.boundary
            )
            xs = [p.boundary for p in line]
            ax.plot(xs, [p.mean for p in line], marker="o", label=f"{diffusivity:g}")
        ax.set_xlabel("edge temperature (°C)")
        ax.set_ylabel("mean plate temperature (°C)")
        ax.set_title(settings.title)
        ax.legend(title="diffusivity")
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=100)
    finally:
        plt.close(fig)
    write_atomic(out / PLOT_NAME, buffer.getvalue())
    return True


def _plot_or_warn(settings: ReportSettings, points: Sequence[Point], out: Path) -> bool:
    """`write_plot`, but a failing plot costs only the plot: one warning line, no image."""
    try:
        return write_plot(settings, points, out)
    except Exception as exc:  # noqa: BLE001  # the plot is optional; the report must survive
        print(f"{PROG}: warning: {PLOT_NAME} not written: {exc}", file=sys.stderr)
        return False


def run(invocation: Invocation) -> None:
    """Write the report (and the plot) that ``invocation`` asks for."""
    settings = load_settings(invocation.settings)
    points = read_summary(invocation.table)
    try:
        invocation.out.mkdir(parents=True, exist_ok=True)
        plotted = _plot_or_warn(settings, points, invocation.out)
        text = render(settings, points, plot=plotted)
        write_atomic(invocation.out / REPORT_NAME, text.encode())
    except OSError as exc:
        raise BadInput(f"cannot write into {invocation.out}: {exc}") from exc


def main(argv: Sequence[str] | None = None) -> int:
    """The command ``simrun-heat-report``; returns its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    try:
        run(parse_argv(args))
    except BadInput as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


TASK_TYPE = TaskType(
    name="report",
    settings=ReportSettings,
    inputs=("table",),
    hint=ResourceHint(memory_base_gb=0.25, memory_per_worker_gb=0.5),
    command=f"{PROG} {{settings}} {{out}} {{input}}",
    description="Markdown report (and plot) of a heat sweep's summary table",
)


if __name__ == "__main__":
    sys.exit(main())
