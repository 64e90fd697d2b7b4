"""POST /runs of a workflow whose task name holds a reference's separator: a 422 naming
the task and field, never a 500 (the references of the run could not name the task)."""

from __future__ import annotations

import base64

import httpx
import pytest

from simrun.core.views import ErrorCode
from simrun.service.controller import Controller
from tests.support import REPO

pytestmark = pytest.mark.redis

HEAT = (REPO / "examples" / "heat.yaml").read_text()
PLATE = base64.b64encode((REPO / "examples" / "plate.json").read_bytes()).decode()


async def test_a_dotted_task_name_is_refused_with_422_naming_it(
    api: httpx.AsyncClient, controller: Controller
) -> None:
    """``heat.sweep`` read as ``heat.sweep.out``: 422 REJECTED naming the task and its
    ``name`` field, and no run is made."""
    doc = HEAT.replace("name: sweep", "name: heat.sweep").replace('"sweep.out"', "heat.sweep.out")
    sources = {"plate": {"filename": "plate.json", "content_b64": PLATE}}
    response = await api.post("/runs", json={"workflow": doc, "sources": sources})
    assert response.status_code == 422, response.text
    answer = response.json()
    assert answer["code"] == ErrorCode.REJECTED
    named = [e for e in answer["errors"] if e["where"] == "task 'heat.sweep', name"]
    assert named, answer
    assert named[0]["message"].startswith("task name 'heat.sweep' contains '.'")
    assert (await api.get("/runs")).json() == []
