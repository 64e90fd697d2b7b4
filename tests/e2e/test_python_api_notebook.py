"""The Python API in a real Jupyter kernel (ipykernel, driven by jupyter_client as a
notebook front end drives it): `run_local` with progress shows one output of the cell and
updates it in place until the run ended."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import start_new_kernel

from tests.support import REPO
from tests.support.cli_harness import clean_env

pytestmark = pytest.mark.e2e

CELL = """\
import simrun
result = simrun.run_local("examples/heat.yaml", store="notebook-store")
print("state:", result.state)
"""


def run_cell(code: str, cwd: Path, timeout_s: float = 180) -> list[dict[str, Any]]:
    """The messages a kernel published while it ran ``code`` in ``cwd``, up to idle."""
    env = clean_env()
    # the demo's report task is a command of this environment, as when it is activated
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(cwd), env=env)
    try:
        msg_id = client.execute(code)
        messages = []
        while True:
            msg = client.get_iopub_msg(timeout=timeout_s)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            messages.append(msg)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return messages
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_progress_in_a_notebook_is_one_output_updated_in_place(tmp_path: Path) -> None:
    """In a Jupyter kernel, `run_local` draws its progress in one output of the cell (a
    display id), replaced by each later view; the cell's result comes after, and nothing
    failed."""
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    messages = run_cell(CELL, tmp_path)
    errors = [m["content"] for m in messages if m["msg_type"] == "error"]
    assert errors == []
    shown = [m for m in messages if m["msg_type"] in ("display_data", "update_display_data")]
    assert [m["msg_type"] for m in shown[:1]] == ["display_data"]
    assert len(shown) >= 2
    assert {m["msg_type"] for m in shown[1:]} == {"update_display_data"}
    ids = {m["content"]["transient"]["display_id"] for m in shown}
    assert len(ids) == 1
    last = shown[-1]["content"]["data"]
    assert set(last) == {"text/html", "text/plain"}
    assert "succeeded" in last["text/plain"]
    assert "24/24" in last["text/plain"]
    printed = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
    assert "state: succeeded" in printed
