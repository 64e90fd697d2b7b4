"""CappedSegment: what one unit's output leaves in the worker's log."""

from __future__ import annotations

import io
import os
import threading

import pytest

from simrun.worker.cgroups import KERNEL_LIMIT_FACTOR
from simrun.worker.pool.output import CappedSegment, copy_capped
from simrun.worker.pool.processes import kernel_limit_bytes


@pytest.mark.parametrize(
    ("cap", "chunks", "now", "dropped", "tail"),
    [
        (10, [b"abc"], b"abc", 0, b""),  # below the cap: all at once, nothing held
        (10, [b"0123456789"], b"01234", 0, b"56789"),  # exactly the cap: head + tail
        (10, [b"0123456789abcdef"], b"01234", 6, b"bcdef"),
        (10, [b"012", b"34567", b"89abcdef"], b"01234", 6, b"bcdef"),  # across chunks
        (11, [b"0123456789abcdef"], b"012345", 5, b"bcdef"),  # odd cap: head is larger
        (0, [b"0123456789abcdef"], b"0123456789abcdef", 0, b""),  # 0: no cap
    ],
)
def test_a_segment_keeps_head_and_tail_and_counts_the_rest(
    cap: int, chunks: list[bytes], now: bytes, dropped: int, tail: bytes
) -> None:
    """The first half of the cap is written as it comes, the last half is held back and
    written at the end after a note of the bytes dropped in between (no note when none)."""
    segment = CappedSegment(cap)
    written = b"".join(segment.feed(chunk) for chunk in chunks)
    assert written == now
    assert segment.dropped == dropped
    end = segment.end("unit 3")
    assert end.endswith(tail)
    if dropped:
        assert f"unit 3: dropped {dropped} bytes".encode() in end
    else:
        assert end == tail
    assert segment.feed(b"xy") == b"xy"  # the next segment starts empty
    assert segment.end("unit 4") == b""


def test_a_negative_cap_is_refused() -> None:
    """A cap below 0 is a mistake, named."""
    with pytest.raises(ValueError, match="log cap"):
        CappedSegment(-1)


@pytest.mark.parametrize(
    ("kill_at", "expected"),
    [(None, None), (1.0, int(KERNEL_LIMIT_FACTOR * 2**30)), (0.25, int(0.25 * 1.25 * 2**30))],
)
def test_the_kernel_limit_is_a_little_above_the_samplers(
    kill_at: float | None, expected: int | None
) -> None:
    """The cgroup's limit is KERNEL_LIMIT_FACTOR times the sampler's, none without one."""
    assert kernel_limit_bytes(kill_at) == expected


@pytest.mark.parametrize(
    ("chunks", "cap", "expected"),
    [
        ([b"abc"], 8, b"abc"),
        ([b"0123", b"4567", b"89"], 4, b"01" + b"\n[simrun: stdout: dropped 6 bytes of output "
         b"beyond the 4-byte cap of a stream; its last 2 bytes follow]\n" + b"89"),
        ([b"0123456789"], 0, b"0123456789"),
    ],
)  # fmt: skip
def test_copy_capped_writes_the_head_then_the_note_and_the_tail(
    chunks: list[bytes], cap: int, expected: bytes
) -> None:
    """A stream copied through copy_capped keeps its first half-cap at once and, at end of
    file, a note saying how many bytes were dropped, then its last half-cap."""
    read_fd, write_fd = os.pipe()
    for chunk in chunks:
        os.write(write_fd, chunk)
    os.close(write_fd)
    sink = io.BytesIO()
    copy_capped(read_fd, sink, CappedSegment(cap, "a stream"), "stdout", threading.Event())
    os.close(read_fd)
    assert sink.getvalue() == expected


def test_copy_capped_ends_when_told_though_a_writer_holds_the_pipe() -> None:
    """Once told the command is over, copy_capped stops at the first quiet moment even
    when an escaped writer still holds the pipe open (no end of file would come)."""
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"hello")
    done = threading.Event()
    done.set()
    sink = io.BytesIO()
    try:
        copy_capped(read_fd, sink, CappedSegment(64, "a stream"), "stdout", done)
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert sink.getvalue() == b"hello"
