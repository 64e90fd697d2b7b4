"""The scripts of benchmarks/ import: every name they take from simrun and the tests'
support still exists (mypy checks their use; running them is each one's own)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[2] / "benchmarks").glob("*.py"))


def test_there_are_benchmarks() -> None:
    """The directory is found and holds the scripts (a wrong path would test nothing)."""
    assert len(BENCHMARKS) >= 10, BENCHMARKS


@pytest.mark.parametrize("path", BENCHMARKS, ids=[p.stem for p in BENCHMARKS])
def test_every_benchmark_imports(path: Path) -> None:
    """Importing the script as ``benchmarks.NAME`` succeeds (nothing runs: each keeps its
    work under ``if __name__ == "__main__"``)."""
    module = importlib.import_module(f"benchmarks.{path.stem}")
    assert module.__file__ == str(path)
