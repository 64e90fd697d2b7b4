"""``simrun resources KEY --store DIR`` (click's runner, in this process) on a real store:
the evidence of a key as text and JSON, its PNG, and one error line for an unknown key."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from simrun.cli.group import cli
from simrun.core.layout import StoreLayout
from simrun.resources import ResourceKey, ResourceStore
from simrun.resources.store import Record
from tests.support.reports import killed as kill
from tests.support.reports import success as report

KEY = ResourceKey("heat", "plate", "64")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store of `simrun run` whose key heat/plate/64 saw a kill at 1 GiB, then 40
    successes of two processes each over three runs."""

    async def fill() -> None:
        async with ResourceStore(StoreLayout(tmp_path / "st").db) as resources:
            await resources.record(KEY, kill(1.0), 0.5, oom=True, run="r0")
            await resources.record_many(
                Record(KEY, report(1.2 + 0.01 * i, 1.3), 0.5, run=f"r{i % 3}") for i in range(40)
            )

    asyncio.run(fill())
    return tmp_path / "st"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["resources", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_key_shows_the_request_why_the_kills_and_the_histogram(store: Path) -> None:
    """The text names the request and its source, the reasons under "why" (the policy's
    own words), the samples, the kill with its limit, and a histogram of the 80 peaks whose
    counts add up, with the request marked; --json prints the same evidence as data."""
    code, out, err = run("heat/plate/64", "--store", str(store))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "heat/plate/64"
    data = json.loads(run("heat/plate/64", "--store", str(store), "--json")[1])
    e = data["explanation"]
    assert any(x.startswith("request ") and e["source"] in x for x in lines)
    why = lines.index("why")
    assert lines[why + 1 : why + 1 + len(e["reasons"])] == [f"  {r}" for r in e["reasons"]]
    assert any(x.startswith("samples    80 from 3 runs (81 observations") for x in lines)
    assert sum("killed at a limit of 1 GiB" in x for x in lines) == 1
    start = lines.index("peaks of the window (80, per process, linear bins)")
    bars = [x for x in lines[start + 1 :] if "█" in x]
    assert sum(int(x.split("█")[-1].split()[0]) for x in bars) == 80
    assert sum("◀ request" in x for x in lines[start + 1 :]) == 1
    assert (data["key"], len(data["peaks_gb"]), data["observations"]) == ("heat/plate/64", 80, 81)
    assert data["kills"][0][1] == 1.0


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("heat/plate/46", "error: no observations of resource key 'heat/plate/46'; "
                          "did you mean heat/plate/64?"),
        ("heat", "error: resource key 'heat' is not 'task_type/model' or "
                 "'task_type/model/variant'; did you mean heat/plate/64?"),
        ("zzz/yyy", "error: no observations of resource key 'zzz/yyy' "
                    "(`simrun resources` lists the known keys)"),
    ],
)  # fmt: skip
def test_an_unknown_key_is_one_error_line_with_close_keys(
    store: Path, key: str, expected: str
) -> None:
    """A key that does not parse or has no observations is one line on stderr naming it
    and the known keys close to it (a type names its keys), and nothing on stdout."""
    code, out, err = run(key, "--store", str(store))
    assert (code, out, err.splitlines()) == (1, "", [expected])


def test_plot_writes_a_png_of_the_peaks(store: Path, tmp_path: Path) -> None:
    """--plot FILE.png writes a PNG (with matplotlib, the plot extra) besides the text."""
    pytest.importorskip("matplotlib")
    png = tmp_path / "peaks.png"
    code, out, err = run("heat/plate/64", "--store", str(store), "--plot", str(png))
    assert code == 0, err
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert "why" in out.splitlines()
    assert f"wrote {png}" in err


def test_plot_needs_a_key(store: Path, tmp_path: Path) -> None:
    """--plot without KEY is a usage error (it draws the peaks of one key)."""
    code, _, err = run("--store", str(store), "--plot", str(tmp_path / "x.png"))
    assert code == 2
    assert "give a KEY" in err


def test_plot_without_matplotlib_says_to_install_the_extra(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without matplotlib (hidden here as Python hides a module set to None), --plot is one
    line saying to install simrun[plot], and no file."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    png = tmp_path / "peaks.png"
    code, out, err = run("heat/plate/64", "--store", str(store), "--plot", str(png))
    assert (code, out, err.splitlines()) == (
        1, "", ["--plot needs matplotlib: pip install 'simrun[plot]'"]
    )  # fmt: skip
    assert not png.exists()
