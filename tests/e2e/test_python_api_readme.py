"""The README's "From Python" examples run as a user runs them: each ``python`` block of
that section, as a script of its own, from a directory holding a copy of ``examples/``,
against a real embedded session (a private redis-server, the service, worker containers)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.cli_harness import clean_env

pytestmark = pytest.mark.e2e

SECTION = "## From Python"


def python_blocks(readme: str) -> list[str]:
    """The ``python`` code blocks of the README's "From Python" section, in order."""
    start = readme.index(SECTION)
    end = readme.find("\n## ", start + len(SECTION))
    section = readme[start : end if end >= 0 else len(readme)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


def test_the_readme_has_python_examples() -> None:
    """The section shows a run of the demo with `run_local`, and `submit` to a service."""
    blocks = python_blocks((REPO / "README.md").read_text(encoding="utf-8"))
    assert len(blocks) == 2
    assert "simrun.run_local(" in blocks[0]
    assert "simrun.submit(" in blocks[1]


@pytest.mark.parametrize("number", [0, 1])
def test_a_readme_example_runs(number: int, tmp_path: Path) -> None:
    """The README's Python example runs to its end against a real embedded session and
    prints the succeeded run with its tasks' counts."""
    code = python_blocks((REPO / "README.md").read_text(encoding="utf-8"))[number]
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    env = clean_env()
    # the demo's report task is a command of this environment, as when it is activated
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "succeeded" in done.stdout
    if number == 0:
        assert re.search(r"sweep: 24/24 units done, outputs in /\S+/sweep/out", done.stdout)
        assert "summary: 1/1 units done" in done.stdout
    else:
        assert "'done': 4" in done.stdout
