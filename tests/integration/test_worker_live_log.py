"""A running unit's output written to its log as it comes (`CappedLog` with a sink and a
known open unit), over a real pipe-like reader and real files."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from simrun.core.unitlogs import attempt_paths
from simrun.worker.pool.output import CappedLog, UnitLogSink, unit_end_marker
from tests.support.wait import until


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


async def test_the_open_units_log_grows_as_it_prints_and_ends_whole(tmp_path: Path) -> None:
    """While unit 4 prints (before its marker), its log holds what it printed so far; at
    its marker the log is written whole (head, note, tail), starting with what was there;
    the next unit of the batch is then the open one; output of a unit the log cannot name
    (no batch) is not written live."""
    logs = tmp_path / "logs"
    fd = os.open(tmp_path / "worker.log", os.O_WRONLY | os.O_CREAT)
    batch = [4, 5]
    try:
        log = CappedLog(64, fd=fd)
        log.sink = UnitLogSink(logs, attempt=1)

        def open_unit(last: int | None) -> int | None:
            if last is None or last not in batch:
                return batch[0]
            after = batch.index(last) + 1
            return batch[after] if after < len(batch) else None

        log.open_unit = open_unit
        path4 = attempt_paths(logs, 4, 1)[1]
        reader = asyncio.StreamReader()
        copying = asyncio.create_task(log.copy(reader))
        reader.feed_data(b"four starts\n")
        await until(lambda: _read(path4) == b"four starts\n", timeout_s=5, what="unit 4's log")
        live = path4.read_bytes()
        reader.feed_data(b"x" * 200 + b" four ends\n" + unit_end_marker(4) + b"five\n")
        path5 = attempt_paths(logs, 5, 1)[1]
        await until(lambda: _read(path5) == b"five\n", timeout_s=5, what="unit 5's log")
        final = path4.read_bytes()
        assert final.startswith(live)
        assert b"dropped" in final
        assert final.endswith(b" four ends\n")
        assert attempt_paths(logs, 5, 1)[1].read_bytes() == b"five\n"
        reader.feed_data(unit_end_marker(5))
        reader.feed_eof()
        await copying
        assert set(log.sink.written) == {4, 5}
    finally:
        os.close(fd)
    worker_log = (tmp_path / "worker.log").read_text()
    assert "four" not in worker_log
    assert worker_log.count("bytes of output in") == 2
