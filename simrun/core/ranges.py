"""Unit indices as sorted, disjoint ranges: what a task's units are in the run store (its
frontier, range jobs and spans), in a page of the dashboard and in a job's payload, so
that a million units cost as much as one range."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property

from simrun.core.wire import PayloadError


@dataclass(frozen=True)
class Ranges:
    """Unit indices as ``parts``: non-empty ``range``s of step 1, ascending, neither
    overlapping nor adjacent (`of` makes them so)."""

    parts: tuple[range, ...] = ()

    @classmethod
    def of(cls, parts: Iterable[range]) -> Ranges:
        """The union of ``parts`` (step 1), adjacent ones joined."""
        out: list[range] = []
        for part in sorted((r for r in parts if r), key=lambda r: r.start):
            if out and part.start <= out[-1].stop:
                out[-1] = range(out[-1].start, max(out[-1].stop, part.stop))
            else:
                out.append(part)
        return cls(tuple(out))

    @classmethod
    def of_indices(cls, indices: Iterable[int]) -> Ranges:
        """The distinct ``indices``: ``[5, 0, 1, 2, 2]`` → ``0-2, 5``."""
        out: list[range] = []
        for index in sorted(set(indices)):
            if out and out[-1].stop == index:
                out[-1] = range(out[-1].start, index + 1)
            else:
                out.append(range(index, index + 1))
        return cls(tuple(out))

    @classmethod
    def from_wire(cls, data: object, most: int) -> Ranges:
        """The ranges of a payload's ``[[first, last], ...]`` (inclusive, ascending and
        apart), at most ``most`` units in all; `PayloadError` says what is wrong."""
        if not isinstance(data, list | tuple):
            raise PayloadError(f"field 'ranges' must be a list of [first, last], got {data!r}")
        parts: list[range] = []
        after, total = -1, 0
        for pair in data:
            first, last = pair if isinstance(pair, list | tuple) and len(pair) == 2 else (0, -1)
            if not (_is_int(first) and _is_int(last) and after < first <= last):
                raise PayloadError(
                    f"field 'ranges' holds {pair!r}: each must be [first, last] with "
                    "0 <= first <= last, ascending and apart"
                )
            total += last - first + 1
            if total > most:
                raise PayloadError(f"field 'ranges' names more than {most} units")
            parts.append(range(first, last + 1))
            after = last
        return cls.of(parts)

    def to_wire(self) -> list[list[int]]:
        """``[[first, last], ...]``, inclusive: what `from_wire` reads."""
        return [[first, last] for first, last in self.pairs]

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """The parts as inclusive ``(first, last)``."""
        return [(r.start, r.stop - 1) for r in self.parts]

    @cached_property
    def _starts(self) -> list[int]:
        return [r.start for r in self.parts]

    @cached_property
    def _ends(self) -> list[int]:
        """How many units the parts up to each one hold."""
        return list(itertools.accumulate(len(r) for r in self.parts))

    @property
    def count(self) -> int:
        return self._ends[-1] if self.parts else 0

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return bool(self.parts)

    def __iter__(self) -> Iterator[int]:
        return itertools.chain.from_iterable(self.parts)

    def __contains__(self, index: object) -> bool:
        if not isinstance(index, int):
            return False
        at = bisect.bisect_right(self._starts, index) - 1
        return at >= 0 and index in self.parts[at]

    def __or__(self, other: Ranges) -> Ranges:
        return Ranges.of((*self.parts, *other.parts))

    def __str__(self) -> str:
        """``0, 3-5, 9``."""
        return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in self.pairs)

    def slice(self, start: int, stop: int) -> Ranges:
        """The units at positions ``start`` to ``stop`` (excluded) in ascending order."""
        start, stop = max(0, start), min(stop, self.count)
        out: list[range] = []
        first = bisect.bisect_right(self._ends, start)
        for at in range(first, len(self.parts)):
            before = self._ends[at] - len(self.parts[at])
            if before >= stop:
                break
            part = self.parts[at]
            out.append(part[max(0, start - before) : stop - before])
        return Ranges(tuple(out))

    def page(self, offset: int, limit: int) -> Ranges:
        """The page of at most ``limit`` units from position ``offset`` (never below 0)."""
        offset = max(0, offset)
        return self.slice(offset, offset + max(0, limit))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
