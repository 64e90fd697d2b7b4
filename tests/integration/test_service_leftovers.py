"""What a submission killed midway leaves (its upload directory; a run directory with the
copied sources and no run row, exactly as a SIGKILL between the copy and the row leaves
them) is removed when a controller opens (`simrun service` and `simrun run` alike), in one
log line with how many and their bytes; what may belong to a submission still going (a
directory written to lately), a run with its row, and what is not shaped as a run id or
an upload directory are left alone. Real SQLite and Redis; the ages set with ``utime``."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path

import pytest

from simrun.core.layout import StoreLayout
from simrun.service.controller import Controller
from simrun.service.submit import RUN_LEFTOVER_S, UPLOAD_LEFTOVER_S, UPLOAD_PREFIX
from tests.support.service_harness import TYPES, settings, submit, work_doc

pytestmark = pytest.mark.redis


def age(path: Path, seconds: float) -> None:
    """Make ``path`` and everything under it last written ``seconds`` ago."""
    when = time.time() - seconds
    for parent, dirs, files in os.walk(path, topdown=False):
        for name in (*dirs, *files):
            os.utime(os.path.join(parent, name), (when, when), follow_symlinks=False)
    os.utime(path, (when, when))


def tree(root: Path, files: int) -> Path:
    """A directory of ``files`` files of 1000 bytes in two subdirectories."""
    for i in range(files):
        path = root / f"part-{i % 2}" / f"file-{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 1000)
    return root


async def test_a_start_sweeps_what_killed_submissions_left(
    tmp_path: Path,
    redis_url: str,
    redis_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An upload directory unwritten for `UPLOAD_LEFTOVER_S` and a run-id directory without
    a row unwritten for `RUN_LEFTOVER_S` go at the next open, logged once with their count
    and bytes; a younger upload directory, a younger row-less run directory, a run with its
    row (however old), a directory not named as a run id and one in the staging directory
    without the prefix stay, byte for byte."""
    staging = tmp_path / "staging"
    staging.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(staging))
    config = settings(tmp_path / "store", redis_url, redis_prefix)
    controller = await Controller.open(config, TYPES)
    try:
        kept_run = await submit(controller, work_doc(units=2))
    finally:
        await controller.close()
    layout = StoreLayout(config.store)
    layout.run_dir(kept_run).mkdir(parents=True, exist_ok=True)
    (layout.run_dir(kept_run) / "work").mkdir(exist_ok=True)
    (layout.run_dir(kept_run) / "work" / "result.txt").write_text("kept")
    age(layout.run_dir(kept_run), 10 * RUN_LEFTOVER_S)

    old_upload = tree(staging / f"{UPLOAD_PREFIX}k1ll3d", 20)
    age(old_upload, UPLOAD_LEFTOVER_S + 60)
    young_upload = tree(staging / f"{UPLOAD_PREFIX}g01ng", 3)
    age(young_upload, UPLOAD_LEFTOVER_S / 2)
    other = tree(staging / "not-an-upload", 2)
    age(other, 10 * UPLOAD_LEFTOVER_S)

    orphan = tree(layout.sources("20260101-000000-dead01") / "data" / "data", 30)
    age(layout.run_dir("20260101-000000-dead01"), RUN_LEFTOVER_S + 30)
    young_orphan = tree(layout.sources("20260101-000001-beef02") / "data" / "data", 2)
    age(layout.run_dir("20260101-000001-beef02"), RUN_LEFTOVER_S / 3)
    not_a_run = tree(layout.runs / "notes", 2)
    age(not_a_run, 10 * RUN_LEFTOVER_S)
    assert orphan.is_dir()

    caplog.set_level(logging.INFO, logger="simrun.service.controller")
    again = await Controller.open(config, TYPES)
    try:
        assert await again.queries.exists(kept_run)
    finally:
        await again.close()
    assert not old_upload.exists()
    assert not layout.run_dir("20260101-000000-dead01").exists()
    for stays in (young_upload, other, young_orphan, not_a_run):
        assert stays.is_dir(), stays
    assert (layout.run_dir(kept_run) / "work" / "result.txt").read_text() == "kept"
    lines = [r.getMessage() for r in caplog.records if "interrupted submissions" in r.getMessage()]
    assert lines == [
        f"removed what interrupted submissions left: 1 upload directory in {staging}, 1 run "
        f"directory without a run in {layout.runs}, 50,000 bytes (48.8 KiB)"
    ]
