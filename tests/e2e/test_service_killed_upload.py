"""A `simrun service` SIGKILLed while it copies a 4,000-file upload into the store leaves
its upload directory and a run directory without a run (issue 23, item 4); started again on
the same store it removes both, says so in one line of its log, and leaves the runs it has
untouched. Real processes, real Redis; the leftovers are aged with ``utime`` (a start
removes only what no submission wrote to for minutes)."""

from __future__ import annotations

import base64
import os
import re
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from simrun.core.layout import StoreLayout
from simrun.local.machine import free_port
from simrun.service.submit import RUN_LEFTOVER_S, UPLOAD_LEFTOVER_S, UPLOAD_PREFIX
from tests.support import REPO
from tests.support.cli_harness import WORK, clean_env, start_simrun, stop_process, wait_for_service
from tests.support.redis_server import key_prefix
from tests.support.wait import wait_until

pytestmark = pytest.mark.e2e

HEAT = (REPO / "examples" / "heat.yaml").read_text()
PLATE = (REPO / "examples" / "plate.json").read_bytes()
#: Files of the big upload, and bytes of each.
FILES, FILE_BYTES = 4000, 2000


def age(path: Path, seconds: float) -> None:
    """Make ``path`` and everything under it last written ``seconds`` ago."""
    when = time.time() - seconds
    for parent, dirs, files in os.walk(path, topdown=False):
        for name in (*dirs, *files):
            os.utime(os.path.join(parent, name), (when, when), follow_symlinks=False)
    os.utime(path, (when, when))


def big_upload() -> dict[str, object]:
    files = [
        {
            "path": f"d{i % 40}/f{i}.bin",
            "content_b64": base64.b64encode(os.urandom(FILE_BYTES)).decode(),
        }
        for i in range(FILES)
    ]
    return {"workflow": HEAT, "sources": {"plate": {"filename": "plate.json", "files": files}}}


def test_leftovers_of_a_killed_submission_go_at_the_next_start(
    tmp_path: Path, redis_url: str
) -> None:
    """SIGKILL while the sources of a 4,000-file submission are copied: its upload directory
    and its run directory (no run row) stay behind; the next start removes them (one log
    line, counts and bytes), /runs lists the earlier run alone, whose files are intact."""
    staging = tmp_path / "staging"
    staging.mkdir()
    store = tmp_path / "store"
    env = clean_env(TMPDIR=str(staging))
    port = free_port()
    args = (
        "service", "--port", str(port), "--redis-url", redis_url, "--prefix", key_prefix("kill"),
        "--store", str(store), "--plugins", WORK,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    layout = StoreLayout(store)

    proc = start_simrun(*args, cwd=tmp_path, env=env)
    try:
        wait_for_service(url, proc, timeout_s=60)
        plate = {"filename": "plate.json", "content_b64": base64.b64encode(PLATE).decode()}
        first = httpx.post(f"{url}/runs", json={"workflow": HEAT, "sources": {"plate": plate}})
        assert first.status_code == 201, first.text
        kept = first.json()["run"]
        kept_copy = layout.sources(kept) / "plate" / "plate.json"
        assert kept_copy.read_bytes() == PLATE

        body = big_upload()
        answers: list[object] = []

        def post() -> None:
            try:
                answers.append(httpx.post(f"{url}/runs", json=body, timeout=120))
            except httpx.HTTPError as exc:  # the service is killed under it
                answers.append(exc)

        sender = threading.Thread(target=post, daemon=True)
        sender.start()

        def copying() -> list[Path]:
            assert not answers, f"the submission ended before the kill: {answers}"
            return [p for p in layout.runs.iterdir() if p.name != kept]

        [orphan] = wait_until(copying, timeout_s=120, what="the copy of the sources", poll_s=0.002)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        sender.join(timeout=30)
    finally:
        stop_process(proc)
    uploads = list(staging.glob(f"{UPLOAD_PREFIX}*"))
    assert len(uploads) == 1, uploads
    assert orphan.is_dir()
    assert sum(1 for _ in uploads[0].rglob("*.bin")) == FILES
    age(uploads[0], UPLOAD_LEFTOVER_S + 60)
    age(orphan, RUN_LEFTOVER_S + 60)

    again = start_simrun(*args, cwd=tmp_path, env=env)
    try:
        wait_for_service(url, again, timeout_s=60)
        runs = httpx.get(f"{url}/runs").json()
        assert [r["id"] for r in runs] == [kept]
        assert not orphan.exists()
        assert list(staging.glob(f"{UPLOAD_PREFIX}*")) == []
        assert kept_copy.read_bytes() == PLATE
    finally:
        stop_process(again)
    log = again.communicate()[0]
    lines = [line for line in log.splitlines() if "interrupted submissions" in line]
    assert len(lines) == 1, log
    assert "1 upload directory in " in lines[0]
    assert "1 run directory without a run in " in lines[0]
    removed = re.search(r"([\d,]+) bytes", lines[0])
    assert removed is not None, lines[0]
    assert int(removed[1].replace(",", "")) >= FILES * FILE_BYTES, lines[0]
