"""The worker log of a worker process (`CappedLog`) over a real pipe: each unit's segment
ends at the marker the process writes after the unit, wherever the reads cut."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from simrun.worker.pool.output import CappedLog, unit_end_marker


async def copy_through(chunks: list[bytes], cap: int, sink: Path) -> str:
    """``chunks`` fed to a `CappedLog` one read at a time (a StreamReader fed by hand, so
    each chunk is one read); what reached the log file."""
    fd = os.open(sink, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        log = CappedLog(cap, fd=fd)
        log.label_of = lambda index: f"unit {index} of job J"
        reader = asyncio.StreamReader()
        for chunk in chunks:
            reader.feed_data(chunk)
        reader.feed_eof()
        await log.copy(reader)
    finally:
        os.close(fd)
    return await asyncio.to_thread(sink.read_text)


def cut(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("read_size", [1, 3, 7, 19, 64, 10_000])
async def test_each_unit_ends_at_its_marker_wherever_reads_cut(tmp_path: Path, read_size: int):
    """Three units print past a 40-byte cap, each followed by its marker, all read at
    once or a byte at a time: each unit keeps its head and tail, gets its own note naming
    it, and no marker reaches the log."""
    data = b"".join(
        f"HEAD {i} ".encode() + b"x" * 100 + f" TAIL {i}\n".encode() + unit_end_marker(i)
        for i in range(3)
    )
    text = await copy_through(cut(data, read_size), 40, tmp_path / "log")
    assert "simrun-unit-end" not in text
    assert "\x00" not in text
    for i in range(3):
        assert f"HEAD {i} " in text
        assert f"TAIL {i}\n" in text
        assert f"[simrun: unit {i} of job J: dropped" in text
    assert text.index("TAIL 0") < text.index("HEAD 1") < text.index("TAIL 1") < text.index("HEAD 2")


async def test_bytes_like_a_marker_are_output(tmp_path: Path):
    """Output that starts like a marker but is not one (no index, or cut off at the end)
    is written as it is."""
    fake = b"\x00\x1esimrun-unit-end:abc\x00 after\n"
    cut_off = b"end \x00\x1esimrun-unit"
    text = await copy_through([fake, cut_off], 0, tmp_path / "log")
    assert text.encode() == fake + cut_off


@pytest.mark.parametrize("read_size", [1, 5, 10_000])
async def test_each_unit_with_output_gets_its_own_capped_file(tmp_path: Path, read_size: int):
    """With a sink, each unit that printed gets a file of its own holding what the worker
    log got of it (head, the note on what was dropped, tail); a unit that printed nothing
    gets none; what a process printed when it died goes to the unit the runner names."""
    from simrun.core.unitlogs import attempt_paths
    from simrun.worker.pool.output import UnitLogSink

    data = (
        b"short 0\n"
        + unit_end_marker(0)
        + unit_end_marker(1)
        + b"HEAD 2 "
        + b"x" * 100
        + b" TAIL 2\n"
        + unit_end_marker(2)
        + b"last words of 3\n"
    )
    fd = os.open(tmp_path / "worker.log", os.O_WRONLY | os.O_CREAT)
    logs = tmp_path / "logs"
    try:
        log = CappedLog(40, fd=fd)
        log.sink = UnitLogSink(logs, attempt=2, orphan_unit=3)
        reader = asyncio.StreamReader()
        for chunk in cut(data, read_size):
            reader.feed_data(chunk)
        reader.feed_eof()
        await log.copy(reader)
        await log.settle(2, timeout_s=0.5)  # its marker was read: at once
    finally:
        os.close(fd)
    assert attempt_paths(logs, 0, 2)[1].read_text() == "short 0\n"
    assert not attempt_paths(logs, 1, 2)[1].exists()
    two = attempt_paths(logs, 2, 2)[1].read_text()
    assert two.startswith("HEAD 2 ")
    assert two.endswith(" TAIL 2\n")
    assert "dropped" in two
    assert attempt_paths(logs, 3, 2)[1].read_text().endswith("last words of 3\n")
    assert set(log.sink.written) == {0, 2, 3}


async def test_settle_finds_a_marker_read_ahead_of_later_ones() -> None:
    """The runner asks for the marker of a batch's last unit after the log may have read
    the markers of the batch sent ahead: it is found at once all the same, the markers
    before it are forgotten and the later ones kept; a marker never written is waited for
    at most the time given."""
    log = CappedLog(0, fd=os.open(os.devnull, os.O_WRONLY))
    try:
        reader = asyncio.StreamReader()
        reader.feed_data(b"".join(unit_end_marker(i) for i in (5, 6, 7, 8)))
        reader.feed_eof()
        await log.copy(reader)
        assert await log.settle(6, timeout_s=0.01)
        assert await log.settle(8, timeout_s=0.01)
        assert not await log.settle(5, timeout_s=0.01)  # forgotten: it ended before 6
        assert not await log.settle(9, timeout_s=0.01)
    finally:
        os.close(log.fd)
