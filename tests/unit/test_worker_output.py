"""CappedSegment: what one unit's output leaves in the worker's log."""

from __future__ import annotations

import pytest

from simrun.worker.pool.output import CappedSegment
from simrun.worker.pool.processes import KERNEL_LIMIT_FACTOR, kernel_limit_bytes


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
