"""Reading a unit's log while it is written: a read stops before a character cut in two."""

from __future__ import annotations

import pytest

from simrun.core.unitlogs import whole_utf8

E_ACUTE = "é".encode()  # 2 bytes
EURO = "€".encode()  # 3 bytes
FACE = "😀".encode()  # 4 bytes


@pytest.mark.parametrize(
    ("data", "whole"),
    [
        (b"", 0),
        (b"plain\n", 6),
        (b"a" + E_ACUTE, 3),
        (b"a" + E_ACUTE[:1], 1),
        (b"a" + EURO[:2], 1),
        (b"a" + EURO, 4),
        (b"a" + FACE[:3], 1),
        (b"a" + FACE, 5),
        (b"\xff\xfe", 2),  # not UTF-8 at all: taken as it is
        (b"\x80\x80\x80\x80\x80", 5),  # only continuation bytes: taken as they are
    ],
)
def test_a_read_ends_on_a_whole_character(data: bytes, whole: int) -> None:
    """The bytes of a read that end on a character's end: a UTF-8 sequence cut at the end
    waits for the next read (so a follower never prints half a character); bytes that are
    no UTF-8 are not held back."""
    assert whole_utf8(data) == whole
