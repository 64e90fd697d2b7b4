"""benchmarks/learning.py: its replay rules on a hand-made trace, and a smoke run of the
script on a slice of the shared trace."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "learning.py"
TRACE = Path("/work/shared/traces/synthetic.csv")
HEADER = "submit_s,key,peak_gb,seconds,preset_gb,input_bytes\n"


def load_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("learning_bench", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["learning_bench"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark()


def write_trace(path: Path, rows: list[str]) -> Path:
    path.write_text(HEADER + "".join(f"{row}\n" for row in rows))
    return path


def test_replay_charges_kills_and_retries_at_once(bench: ModuleType, tmp_path: Path) -> None:
    """A unit above its request is killed at the end of its runtime, charged request x
    runtime, and resubmitted at once: static doubles, Nextflow multiplies by the attempt,
    the oracle never kills."""
    trace = write_trace(
        tmp_path / "t.csv",
        [
            "0,fit/m,1.0,3600,2.0,1000",  # fits the preset
            "10,fit/m,5.0,3600,2.0,1000",  # 5 GiB: static 2 -> 4 -> 8; nextflow 2 -> 4 -> 6
        ],
    )
    units = bench.load_trace(trace)
    static = asyncio.run(bench.replay(units, bench.Static()))
    assert (static.kills, static.killed_units) == (2, 1)
    assert static.requested_gbh == pytest.approx(2 + 2 + 4 + 8)
    assert static.used_gbh == pytest.approx(1 + 5)
    assert static.lost_h == pytest.approx(2.0)
    nextflow = asyncio.run(bench.replay(units, bench.Nextflow()))
    assert nextflow.requested_gbh == pytest.approx(2 + 2 + 4 + 6)
    oracle = asyncio.run(bench.replay(units, bench.Oracle()))
    assert (oracle.kills, oracle.wasted_gbh) == (0, 0.0)


def test_measurements_are_known_only_when_units_complete(bench: ModuleType, tmp_path: Path) -> None:
    """A unit submitted before the first one completes cannot learn from it; one submitted
    after can (max-seen asks for the preset, then for the peak seen)."""
    trace = write_trace(
        tmp_path / "t.csv",
        ["0,fit/m,1.0,100,4.0,1", "50,fit/m,1.0,100,4.0,1", "150,fit/m,1.0,100,4.0,1"],
    )
    out = asyncio.run(bench.replay(bench.load_trace(trace), bench.MaxSeen()))
    assert out.requested_gbh == pytest.approx((4 + 4 + 1) * 100 / 3600)


def test_variant_from_input_puts_the_size_bucket_in_the_key(
    bench: ModuleType, tmp_path: Path
) -> None:
    """--variant-from-input adds the log2 bucket of input_bytes to the variant."""
    trace = write_trace(
        tmp_path / "t.csv", ["0,cfd/hull/fine,1.0,1,2.0,1024", "1,mesh/hull,1.0,1,2.0,3000"]
    )
    keys = [u.key for u in bench.load_trace(trace, variant_from_input=True)]
    assert keys == ["cfd/hull/fine:in2^10", "mesh/hull/in2^11"]


def test_bad_trace_names_the_line(bench: ModuleType, tmp_path: Path) -> None:
    """A row that cannot be read stops the replay with its line number."""
    trace = write_trace(tmp_path / "t.csv", ["0,fit/m,1.0,1,2.0,1", "1,fit/m,lots,1,2.0,1"])
    with pytest.raises(SystemExit, match="line 3"):
        bench.load_trace(trace)


def test_a_probe_holds_the_rest_until_it_reported(bench: ModuleType, tmp_path: Path) -> None:
    """With probing, a batch of 16 units of a new key sends probe_units of them first (4 on
    4 processes); the other 12 wait until all 4 reported, the wait is charged, and every
    unit succeeds once."""
    rows = [f"{i * 0.01:.2f},fit/m,1.0,100,8.0,1000" for i in range(16)]
    units = bench.load_trace(write_trace(tmp_path / "t.csv", rows))
    out = asyncio.run(bench.replay(units, bench.SimrunPure(), probe=True))
    assert out.kills == 0
    # 12 units waited about one unit's runtime (100 s) for the probe
    assert out.waited_h == pytest.approx(12 * 100 / 3600, rel=0.01)
    # the 4 probe units ran at the hint (8 GiB), the others at the learned request
    assert out.requested_gbh < 16 * 8.0 * 100 / 3600 / 2
    plain = asyncio.run(bench.replay(units, bench.SimrunPure()))
    assert plain.waited_h == 0.0
    assert plain.requested_gbh == pytest.approx(16 * 8.0 * 100 / 3600)


def test_runs_and_keys_without_a_model(bench: ModuleType, tmp_path: Path) -> None:
    """A key without a model ("kind07") reads as a type with an empty model; a gap of over
    an hour between submissions starts the next run."""
    trace = write_trace(
        tmp_path / "t.csv", ["0,kind07,1.0,1,2.0,1", "10,kind07,1.0,1,2.0,1", "4000,kind07,1,1,2,1"]
    )
    units = bench.load_trace(trace)
    assert [u.key for u in units] == ["kind07/"] * 3
    assert [u.run for u in units] == [0, 0, 1]


@pytest.mark.skipif(not TRACE.is_file(), reason="the shared trace is not on this machine")
def test_script_runs_on_a_slice_of_the_trace() -> None:
    """The script replays the first rows through the real store and the baselines, prints
    one table, and the store agrees with the pure decision."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(TRACE), "--limit", "300"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "same requests as the pure decide: yes" in out
    for name in (
        "simrun v2 (ResourceStore)",
        "simrun (probe first)",
        "static preset",
        "nextflow",
        "max seen",
        "VPA-like",
        "today's rule (v1)",
        "cold-start floor",
    ):
        assert name in out
    oracle = next(line for line in out.splitlines() if line.startswith("oracle"))
    # no waste, no kill
    assert oracle.split()[4:10] == ["0.0", "0.000", "0", "(0.00%)", "0", "0.0"]
    assert "target <= 0.30" in out
