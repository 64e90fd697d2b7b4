"""`retry_on` through `simrun run`: a unit's exception matches the types it derives from."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.cli_harness import WORK, run_id_in, simrun

pytestmark = pytest.mark.e2e


def calls(out: Path) -> int:
    """How many times unit 0 of an ``svc-work`` task was computed."""
    return len((out / "calls-0.log").read_text().splitlines())


def test_retry_on_a_base_type_retries_its_subclasses(tmp_path: Path) -> None:
    """`retry_on: [OSError]` retries a unit that raises FileNotFoundError (the worker
    reports the type and its bases) as often as the service allows (3 computations);
    `retry_on: [LookupError]` retries a KeyError; `retry_on: [OSError]` does not retry a
    ValueError (1 computation)."""
    flag = tmp_path / "fail"
    flag.touch()
    fail = {"units": 1, "fail_flag": str(flag), "fail_indices": [0]}

    def task(name: str, raised: str, retry_on: list[str]) -> dict[str, object]:
        settings = {**fail, "fail_exception": raised}
        return {"name": name, "type": "svc-work", "settings": settings, "retry_on": retry_on}

    tasks = [
        task("fnf", "FileNotFoundError", ["OSError"]),
        task("key", "KeyError", ["LookupError"]),
        task("value", "ValueError", ["OSError"]),
    ]
    wf = tmp_path / "wf.yaml"
    wf.write_text(yaml.safe_dump({"tasks": tasks}, sort_keys=False))
    result = simrun(
        "run", str(wf), "--plugins", WORK, "--processes", "2", "--worker-memory-gb", "2",
        "--no-probe", cwd=tmp_path, timeout=90,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    run_dir = tmp_path / "simrun-store" / "runs" / run_id_in(result.stdout)
    assert calls(run_dir / "fnf" / "out") == 3
    assert calls(run_dir / "key" / "out") == 3
    assert calls(run_dir / "value" / "out") == 1
