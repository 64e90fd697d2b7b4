"""Rough edges of the command line a new user hit (issue 14), each through the real
command."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from tests.support import REPO
from tests.support.cli_harness import simrun


def test_validate_counts_its_tasks_in_words(tmp_path: Path) -> None:
    """`simrun validate` says "1 task" for one task and "2 tasks" for two (it said
    "1 tasks")."""
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    demo = yaml.safe_load((tmp_path / "examples" / "heat.yaml").read_text())
    demo["tasks"] = demo["tasks"][:1]
    (tmp_path / "examples" / "one.yaml").write_text(yaml.safe_dump(demo))
    one = simrun("validate", "examples/one.yaml", cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    assert ", 1 task\n" in one.stdout
    two = simrun("validate", "examples/heat.yaml", cwd=tmp_path)
    assert two.returncode == 0, two.stderr
    assert ", 2 tasks\n" in two.stdout
