"""Full volumes, real ones (a small tmpfs mounted per test; skipped where mounting is not
permitted): a submission to a full store answers 507 NO_SPACE naming the store, its mount
point and free bytes, and leaves nothing (no run row, no run directory, no upload
directory), whether the copy of its sources or SQLite's write of its run hit the full
volume; the controller's loop, whose own writes fail meanwhile, says so in
``problems["disk"]`` and one log line, no traceback a second; once space is back the
problem goes (from /health too) and a submission is taken. A volume out of inodes, and a
full directory of uploads, answer 507 the same, naming them. Real Redis, real SQLite, the
real app."""

from __future__ import annotations

import asyncio
import base64
import errno
import logging
import os
import subprocess
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from simrun.client import NoSpace, refusal
from simrun.core.layout import StoreLayout
from simrun.core.views import ErrorCode
from simrun.service.controller import Controller
from simrun.service.routes import create_app
from tests.integration.test_controller import report, submit_work
from tests.support import REPO
from tests.support.service_harness import TYPES, settings, work_doc
from tests.support.wait import until

pytestmark = pytest.mark.redis

HEAT = (REPO / "examples" / "heat.yaml").read_text()
PLATE = base64.b64encode((REPO / "examples" / "plate.json").read_bytes()).decode()
SOURCES = {"plate": {"filename": "plate.json", "content_b64": PLATE}}


@contextmanager
def mounted(mnt: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted at ``mnt`` with ``options`` (root only: else the test is skipped),
    unmounted after."""
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root in a privileged container): {done.stderr}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted for this test alone, unmounted after it."""
    with mounted(tmp_path / "volume", "size=2m") as mnt:
        yield mnt


@pytest.fixture
async def full_store(
    volume: Path, tmp_path: Path, redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Controller]:
    """A controller whose store (and database) is on ``volume``; uploads staged in a
    directory of this test's."""
    staging = tmp_path / "staging"
    staging.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(staging))
    ctl = await Controller.open(settings(volume / "store", redis_url, redis_prefix), TYPES)
    try:
        yield ctl
    finally:
        await ctl.close()


def fill(volume: Path) -> Path:
    """Write a file on ``volume`` until not one byte more fits: the file."""
    filler = volume / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for chunk in (1 << 16, 1 << 12, 1):
            while True:
                try:
                    os.write(fd, b"x" * chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return filler


def take_inodes(directory: Path) -> int:
    """Make empty files in ``directory`` until its volume has no inode left: how many."""
    for i in range(100_000):
        try:
            (directory / str(i)).touch()
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            return i
    raise AssertionError(f"{directory}: 100,000 files and still inodes left")


def leftovers(controller: Controller, known: set[str]) -> list[str]:
    """What is in the store's runs and the staging directory besides the runs ``known``."""
    runs = StoreLayout(controller.settings.store).runs
    found = [p.name for p in runs.iterdir() if p.name not in known] if runs.is_dir() else []
    return found + [p.name for p in Path(tempfile.gettempdir()).iterdir()]


def counting(
    step: Callable[[], Awaitable[bool]],
) -> tuple[Callable[[], Awaitable[bool]], list[int]]:
    calls: list[int] = []

    async def counted() -> bool:
        calls.append(1)
        return await step()

    return counted, calls


async def test_a_full_store_answers_507_keeps_nothing_and_recovers(
    full_store: Controller, volume: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """On a full store: the loop's own writes fail (one warning, no traceback, however many
    steps) and ``problems["disk"]`` names the volume (/health: degraded, with it); a
    submission with sources (its copy
    fails) and one without (SQLite's write of its 300 KB document fails) each answer 507
    NO_SPACE naming the store, the mount point and the free bytes, leave no run row, run
    directory or upload directory, and the client raises `NoSpace` in one line. With the
    space back, the problem goes and the same submission is taken (201)."""
    controller = full_store
    transport = httpx.ASGITransport(app=create_app(controller))
    async with httpx.AsyncClient(transport=transport, base_url="http://simrun") as api:
        first = await api.post("/runs", json={"workflow": HEAT, "sources": SOURCES})
        assert first.status_code == 201, first.text
        kept = {first.json()["run"]}
        await controller.store.checkpoint()  # the WAL is emptied: a next write needs room
        filler = fill(volume)

        caplog.set_level(logging.INFO, logger="simrun.service")
        controller.step, calls = counting(controller.step)  # type: ignore[method-assign]
        stop = asyncio.Event()
        loop = asyncio.create_task(controller.run_forever(stop))
        try:
            await until(lambda: len(calls) >= 3, timeout_s=20, what="three steps of the loop")
            assert (controller.last_error or "").startswith("no space left: the store "), (
                controller.last_error
            )
            assert str(volume) in controller.problems["disk"]
            warned = [r for r in caplog.records if "no space left" in r.getMessage()]
            assert len(warned) == 1, [r.getMessage() for r in warned]
            assert not [r for r in caplog.records if r.exc_info], "no traceback"

            for body in (
                {"workflow": HEAT, "sources": SOURCES},
                {"workflow": work_doc(units=3) + "\n# " + "x" * 300_000},
            ):
                response = await api.post("/runs", json=body)
                assert response.status_code == 507, response.text
                answer = response.json()
                assert answer["code"] == ErrorCode.NO_SPACE
                detail = answer["detail"]
                assert f"the store {controller.settings.store} " in detail, detail
                assert f"mounted at {volume}," in detail, detail
                assert " bytes free" in detail, detail
                assert "\n" not in detail, detail
                error = refusal("POST", "/runs", response)
                assert isinstance(error, NoSpace)
                assert str(error).startswith("the simrun service: no space left: ")
                assert [r.id for r in await controller.queries.runs()] == [*kept]
                assert leftovers(controller, kept) == []
            health = (await api.get("/health")).json()
            assert (health["ok"], health["status"]) == (False, "degraded"), health
            assert f"mounted at {volume}," in health["problems"]["disk"], health

            filler.unlink()
            await until(
                lambda: "disk" not in controller.problems,
                timeout_s=20,
                what="the disk problem gone",
            )
            again = await api.post("/runs", json={"workflow": HEAT, "sources": SOURCES})
            assert again.status_code == 201, again.text
            assert "disk" not in (await api.get("/health")).json()["problems"]
            assert any("space is back" in r.getMessage() for r in caplog.records)
        finally:
            stop.set()
            await loop


async def test_a_volume_without_a_free_inode_answers_507_saying_so(
    tmp_path: Path, redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store on a tmpfs of few inodes, all taken (bytes left): a submission whose copy
    needs an inode answers 507 saying the volume has no free inode, and leaves nothing."""
    staging = tmp_path / "staging"
    staging.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(staging))
    with mounted(tmp_path / "volume", "size=8m,nr_inodes=64") as volume:
        controller = await Controller.open(
            settings(volume / "store", redis_url, redis_prefix), TYPES
        )
        try:
            transport = httpx.ASGITransport(app=create_app(controller))
            async with httpx.AsyncClient(transport=transport, base_url="http://simrun") as api:
                filler = volume / "inodes"
                filler.mkdir()
                taken = take_inodes(filler)
                assert 0 < taken < 64, taken
                response = await api.post("/runs", json={"workflow": HEAT, "sources": SOURCES})
                assert response.status_code == 507, response.text
                detail = response.json()["detail"]
                assert f"mounted at {volume}, with " in detail, detail
                assert "free but no free inode" in detail, detail
                assert await controller.queries.runs() == []
                assert leftovers(controller, set()) == []
        finally:
            await controller.close()


async def test_a_full_upload_directory_answers_507_naming_it(
    tmp_path: Path, controller: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Uploads staged on a full volume (the store has room): the submission answers 507
    naming the directory of uploads and its mount point, and leaves no upload directory and
    no run."""
    with mounted(tmp_path / "staging", "size=1m") as staging:
        monkeypatch.setattr(tempfile, "tempdir", str(staging))
        fill(staging)
        transport = httpx.ASGITransport(app=create_app(controller))
        async with httpx.AsyncClient(transport=transport, base_url="http://simrun") as api:
            response = await api.post("/runs", json={"workflow": HEAT, "sources": SOURCES})
        assert response.status_code == 507, response.text
        detail = response.json()["detail"]
        assert detail.startswith(f"no space left: the directory of uploads {staging} "), detail
        assert f"mounted at {staging}, with 0 bytes free" in detail, detail
        assert await controller.queries.runs() == []
        assert sorted(p.name for p in staging.iterdir()) == ["filler"]


async def test_the_ingest_on_a_full_store_waits_for_space_in_one_line(
    full_store: Controller, volume: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker's report read while the store is full: the ingest's write fails at every
    step, the loop logs it once (no traceback) and keeps ``problems["disk"]``; the report
    stays in the stream, and once space is back it is taken in (the unit is done) and the
    problem goes."""
    controller = full_store
    run_id = await submit_work(controller, units=2)
    await controller.step()  # the units are dispatched
    await controller.store.checkpoint()
    filler = fill(volume)
    await report(controller, run_id, 0, 1, "done")

    caplog.set_level(logging.INFO, logger="simrun.service")
    controller.step, calls = counting(controller.step)  # type: ignore[method-assign]
    stop = asyncio.Event()
    loop = asyncio.create_task(controller.run_forever(stop))
    try:
        await until(lambda: len(calls) >= 3, timeout_s=20, what="three steps of the loop")
        assert (controller.last_error or "").startswith("no space left: the store "), (
            controller.last_error
        )
        assert "disk" in controller.problems
        warned = [r for r in caplog.records if "no space left" in r.getMessage()]
        assert len(warned) == 1, [r.getMessage() for r in warned]
        assert "database or disk is full" in warned[0].getMessage()
        assert not [r for r in caplog.records if r.exc_info], "no traceback"
        [unit] = [u for u in await controller.store.units(run_id, "work") if u.index == 0]
        assert unit.state != "done"

        filler.unlink()

        async def taken_in() -> bool:
            units = await controller.store.units(run_id, "work")
            return any(u.index == 0 and u.state == "done" for u in units)

        await until(taken_in, timeout_s=20, what="the report taken in once space is back")
        await until(
            lambda: "disk" not in controller.problems, timeout_s=20, what="the disk problem gone"
        )
    finally:
        stop.set()
        await loop
