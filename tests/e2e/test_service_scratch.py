"""The scratch directory of a task lives on the worker's local disk (``--scratch-dir``), not
in the store; it is removed when the task ends done, and kept when it fails, for debugging
(issue 11, item 10; issue 15, item 2). A real controller, a real worker container."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from simrun.core.layout import StoreLayout
from simrun.plugins import load_types
from simrun.service.controller import Controller
from simrun.worker.settings import WorkerSettings, worker_argv
from tests.support import REPO
from tests.support.harness import spawn
from tests.support.mem_tasks import REFS
from tests.support.service_harness import RETRY_ONCE, Service, settings, stop_worker
from tests.support.wait import WaitTimeout

pytestmark = pytest.mark.e2e


def scratch_doc(name: str, **settings_: object) -> str:
    return json.dumps(
        {"name": name, "tasks": [{"name": "work", "type": "mem-scratch", "settings": settings_}]}
    )


async def test_scratch_is_removed_after_success_and_kept_after_failure(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A task whose units write into its scratch directory: the directory is the worker's
    (under its --scratch-dir), never in the store; once the task is done the worker removes
    it (told through Redis, at a heartbeat); once it failed, the directory and what its
    units left there are kept."""
    store = tmp_path / "store"
    local = tmp_path / "scratch" / "w-scratch"  # the worker's own in the scratch directory
    controller = await Controller.open(
        settings(store, redis_url, redis_prefix, limits=RETRY_ONCE), load_types(REFS)
    )
    service = Service(controller)
    flags = WorkerSettings(
        redis_url=redis_url, prefix=redis_prefix, plugins=REFS, python_path=(str(REPO),),
        poll_delay_s=0.01, processes=2, memory_gb=2.0, heartbeat_s=0.2, heartbeat_ttl_s=1.0,
        scratch_dir=tmp_path / "scratch", worker_id="w-scratch", store=store,
    )  # fmt: skip
    worker = spawn(worker_argv(flags), start_new_session=True)
    try:
        ok = await service.submit(scratch_doc("ok", units=3))
        bad = await service.submit(scratch_doc("bad", units=3, fail_indices=[1]))
        assert (await service.wait(ok)).state == "succeeded"
        assert (await service.wait(bad)).state == "failed"

        async def removed() -> bool:
            return not (local / ok / "work").exists()

        with contextlib.suppress(WaitTimeout):  # the assertion below says what is left
            await service.until(removed, timeout_s=10)
    finally:
        stop_worker(worker)
        await service.close()
    layout = StoreLayout(store)
    done = layout.task_paths(ok, "work")
    assert sorted(p.name for p in done.out.iterdir()) == ["unit-0.txt", "unit-1.txt", "unit-2.txt"]
    assert not done.scratch.exists()  # nothing in the store
    assert not (local / ok / "work").exists(), sorted((local / ok / "work").iterdir())
    assert (local / bad / "work" / "tmp-1.bin").exists()
    assert not layout.task_paths(bad, "work").scratch.exists()
