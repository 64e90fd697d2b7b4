"""The service as deployed (`simrun service`, a real process on a real Redis) with a token
and small intake limits: the token is needed, never shown in its log, and the limits come
from the environment (issue 11, items 2-4)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from simrun.local.machine import free_port
from tests.support.cli_harness import WORK, clean_env, start_simrun, stop_process, wait_for_service
from tests.support.redis_server import key_prefix

pytestmark = pytest.mark.e2e

TOKEN = "tok-7f3a9c-never-in-a-log"


def test_the_token_is_required_and_never_logged(tmp_path: Path, redis_url: str) -> None:
    """``SIMRUN_TOKEN`` and ``SIMRUN_MAX_TASKS`` reach the service: every route but /health
    (and /openapi.json) needs the token, too many tasks are refused naming the limit, and
    nothing the service writes (its log, access lines included) shows the token."""
    port = free_port()
    env = clean_env(SIMRUN_TOKEN=TOKEN, SIMRUN_MAX_TASKS="2")
    proc = start_simrun(
        "service", "--port", str(port), "--redis-url", redis_url, "--prefix", key_prefix("tok"),
        "--store", str(tmp_path / "store"), "--plugins", WORK, cwd=tmp_path, env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    right = {"Authorization": f"Bearer {TOKEN}"}
    try:
        wait_for_service(url, proc, timeout_s=30)
        assert httpx.get(f"{url}/openapi.json").status_code == 401
        assert httpx.get(f"{url}/runs", headers={"Authorization": "Bearer no"}).status_code == 401
        assert httpx.get(f"{url}/openapi.json", headers=right).status_code == 200
        assert httpx.get(f"{url}/runs?x={TOKEN[:3]}", headers=right).status_code == 200
        tasks = [{"name": f"t{i}", "type": "svc-work"} for i in range(3)]
        workflow = {"workflow": str({"tasks": tasks}).replace("'", '"')}
        response = httpx.post(f"{url}/runs", json=workflow, headers=right)
        assert response.status_code == 422
        assert "a run may have at most 2" in response.text
    finally:
        stop_process(proc)
    log = proc.communicate()[0]
    assert "GET /runs" in log  # the access log is on: requests are logged, tokens are not
    assert TOKEN not in log
