"""`simrun.core.ranges.Ranges`: unit indices as ranges, as tables and properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simrun.core.ranges import Ranges
from simrun.core.wire import PayloadError

indices = st.lists(st.integers(min_value=0, max_value=300), max_size=60)


@pytest.mark.parametrize(
    ("given_indices", "pairs"),
    [
        ([], []),
        ([3], [(3, 3)]),
        ([5, 0, 1, 2, 2], [(0, 2), (5, 5)]),
        ([9, 7, 8, 1], [(1, 1), (7, 9)]),
    ],
)
def test_indices_as_ranges(given_indices: list[int], pairs: list[tuple[int, int]]) -> None:
    """The distinct indices as inclusive ranges, ascending."""
    assert Ranges.of_indices(given_indices).pairs == pairs


@pytest.mark.parametrize(
    ("parts", "merged"),
    [
        ([range(5, 8), range(0, 3)], [range(0, 3), range(5, 8)]),
        ([range(0, 3), range(3, 6)], [range(0, 6)]),
        ([range(0, 5), range(2, 4)], [range(0, 5)]),
        ([range(4, 4), range(1, 2)], [range(1, 2)]),
    ],
)
def test_the_union_of_ranges(parts: list[range], merged: list[range]) -> None:
    """Overlapping and adjacent ranges are joined, empty ones dropped, in order."""
    assert list(Ranges.of(parts).parts) == merged


@pytest.mark.parametrize(
    ("pairs", "offset", "limit", "page"),
    [
        ([(0, 9)], 0, 3, [0, 1, 2]),
        ([(0, 9), (20, 999_999)], 999_987, 5, [999_997, 999_998, 999_999]),
        ([(0, 4), (6, 9)], 3, 4, [3, 4, 6, 7]),
        ([(0, 1)], 1, 10, [1]),
        ([], 0, 10, []),
        ([(3, 3), (10, 19)], 0, 3, [3, 10, 11]),
        ([(0, 9)], -4, 2, [0, 1]),
        ([(0, 9)], 20, 5, []),
    ],
)
def test_a_page_of_ranges(
    pairs: list[tuple[int, int]], offset: int, limit: int, page: list[int]
) -> None:
    """A page is the units at the positions from ``offset`` (never below 0), by index."""
    ranges = Ranges(tuple(range(a, b + 1) for a, b in pairs))
    assert list(ranges.page(offset, limit)) == page


@given(indices, st.integers(min_value=-5, max_value=80), st.integers(min_value=0, max_value=80))
def test_a_slice_is_the_slice_of_the_indices(found: list[int], start: int, stop: int) -> None:
    """Count, membership, a slice and the wire form agree with the sorted indices."""
    ranges = Ranges.of_indices(found)
    expected = sorted(set(found))
    assert (len(ranges), list(ranges)) == (len(expected), expected)
    assert list(ranges.slice(start, stop)) == expected[max(0, start) : stop]
    assert all(i in ranges for i in expected)
    assert -1 not in ranges
    assert Ranges.from_wire(ranges.to_wire(), most=len(expected)) == ranges
    assert str(ranges) == ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges.pairs)


@given(indices, indices)
def test_the_union_holds_both(a: list[int], b: list[int]) -> None:
    assert list(Ranges.of_indices(a) | Ranges.of_indices(b)) == sorted(set(a) | set(b))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("0-3", "must be a list of"),
        ([[3, 1]], "each must be"),
        ([[0, 2], [2, 4]], "ascending and apart"),
        ([[-1, 2]], "0 <= first"),
        ([[True, 2]], "each must be"),
        ([[0, 1, 2]], "each must be"),
        ([[0, 10]], "more than 5 units"),
    ],
)
def test_a_bad_wire_form_is_refused(data: object, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        Ranges.from_wire(data, most=5)
