"""The live route of a unit's logs over a real controller (real Redis, real SQLite): what a
running attempt wrote so far is served from the offsets asked, then the rest and the header
once it ended."""

from __future__ import annotations

import base64
import json

import httpx
import pytest

from simrun.core.layout import StoreLayout, task_logs
from simrun.core.unitlogs import LiveAttempt, UnitLogHeader, attempt_paths, write_atomic
from simrun.service.controller import Controller
from tests.support import REPO

pytestmark = pytest.mark.redis

HEAT = (REPO / "examples" / "heat.yaml").read_text()


async def _submit(api: httpx.AsyncClient) -> str:
    plate = (REPO / "examples" / "plate.json").read_bytes()
    source = {"filename": "plate.json", "content_b64": base64.b64encode(plate).decode()}
    response = await api.post("/runs", json={"workflow": HEAT, "sources": {"plate": source}})
    assert response.status_code == 201, response.text
    run_id: str = response.json()["run"]
    return run_id


async def _live(api: httpx.AsyncClient, path: str, since: dict[str, int]) -> list[LiveAttempt]:
    params = [("since", f"{k}:{v}") for k, v in since.items()]
    response = await api.get(path, params=params)
    assert response.status_code == 200, response.text
    return [LiveAttempt.from_dict(a, "answer") for a in response.json()["attempts"]]


async def test_a_running_attempt_is_served_from_the_offset_asked(
    api: httpx.AsyncClient, controller: Controller
) -> None:
    """An attempt whose log is being written (no header yet) is served with what it holds
    and the offset to ask from next; asked again from that offset, only what came since
    (a character cut in two waits for its end); once its header is there, the rest and the
    header. A bad `since` answers 422, an unknown run 404."""
    run_id = await _submit(api)
    logs = task_logs(StoreLayout(controller.settings.store).task_dir(run_id, "sweep"))
    json_path, log_path = attempt_paths(logs, 3, 1)
    log_path.parent.mkdir(parents=True)
    log_path.write_bytes(b"first line\n")
    path = f"/runs/{run_id}/logs/sweep/3/live"

    [running] = await _live(api, path, {})
    assert running.header is None
    [chunk] = running.chunks
    assert (chunk.name, chunk.text, chunk.offset) == (log_path.name, "first line\n", 11)

    with log_path.open("ab") as f:
        f.write("second é".encode()[:-1])  # the é cut after its first byte
    [later] = await _live(api, path, {chunk.name: chunk.offset})
    assert later.chunks[0].text == "second "
    offset = later.chunks[0].offset
    with log_path.open("ab") as f:
        f.write("é".encode()[1:] + b"\n")
    header = UnitLogHeader(
        run=run_id, task="sweep", unit=3, attempt=1, job_id="j1", worker="w1", pid=7,
        outcome="done", error=None, seconds=1.0, peak_gb=0.1, limit_gb=0.5, started=1.0,
        finished=2.0, output_bytes=log_path.stat().st_size,
    )  # fmt: skip
    write_atomic(json_path, json.dumps(header.to_dict()).encode())
    [ended] = await _live(api, path, {chunk.name: offset})
    assert ended.header is not None
    assert ended.header.outcome == "done"
    assert ended.chunks[0].text == "é\n"

    bad = await api.get(path, params={"since": "nonsense"})
    assert bad.status_code == 422
    unknown = await api.get("/runs/20200101-000000-abcdef/logs/sweep/3/live")
    assert unknown.status_code == 404
