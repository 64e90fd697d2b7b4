"""``simrun resources KEY``: the evidence behind one key's request as text and as a PNG,
from `KeyEvidence.to_dict` (what ``GET /resources/{key}`` answers)."""

from __future__ import annotations

import bisect
import importlib
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simrun.cli.progress import format_gb
from simrun.cli.tables import local_time

#: Bins of the histogram at most (fewer when the peaks have fewer distinct values).
ROWS = 10
#: The bins are log-spaced when the largest peak is more than this times the smallest
#: (memory spreads multiplicatively).
LOG_SPAN = 4.0
#: Width of the longest bar, in characters.
BAR_WIDTH = 30


@dataclass(frozen=True)
class Bin:
    """Peaks from ``low_gb`` (included) to ``high_gb`` (excluded, but for the last bin)."""

    low_gb: float
    high_gb: float
    count: int


@dataclass(frozen=True)
class Histogram:
    """The peaks of a key's window in bins, lowest first; ``log`` when log-spaced."""

    bins: tuple[Bin, ...]
    log: bool

    @property
    def edges(self) -> tuple[float, ...]:
        if not self.bins:
            return ()
        return (*(b.low_gb for b in self.bins), self.bins[-1].high_gb)

    def index_of(self, value_gb: float) -> int:
        """The bin ``value_gb`` falls in: -1 below the first, ``len(bins)`` above the last
        (and for no bins)."""
        return _index(self.edges, value_gb)


def _index(edges: Sequence[float], value: float) -> int:
    n = len(edges) - 1
    if n < 1 or value > edges[-1]:
        return max(n, 0)
    if value < edges[0]:
        return -1
    return min(bisect.bisect_right(edges, value) - 1, n - 1)


def histogram(peaks_gb: Sequence[float], rows: int = ROWS) -> Histogram:
    """``peaks_gb`` in at most ``rows`` bins (no more than distinct peaks), log-spaced when
    they span more than `LOG_SPAN` times, else linear."""
    if rows < 1:
        raise ValueError(f"histogram: rows must be >= 1, got {rows!r}")
    if not peaks_gb:
        return Histogram((), log=False)
    low, high = min(peaks_gb), max(peaks_gb)
    n = min(rows, len(set(peaks_gb)))
    log = low > 0 and high / low > LOG_SPAN
    if n == 1 or low == high:
        return Histogram((Bin(low, high, len(peaks_gb)),), log=False)
    if log:
        ratio = high / low
        edges = [low * ratio ** (i / n) for i in range(n + 1)]
    else:
        edges = [low + (high - low) * i / n for i in range(n + 1)]
    edges[0], edges[-1] = low, high  # exactly: the extremes fall in the first and last bin
    counts = [0] * n
    for peak in peaks_gb:
        counts[_index(edges, peak)] += 1
    return Histogram(tuple(Bin(edges[i], edges[i + 1], counts[i]) for i in range(n)), log=log)


def _edge_texts(edges: Sequence[float]) -> tuple[list[str], str]:
    """The edges in one unit (MiB under a GiB, else GiB) and that unit, with decimals
    enough to tell adjacent edges apart (at most 4)."""
    mib = edges[-1] < 1
    scaled = [e * 1024 if mib else e for e in edges]
    widths = [b - a for a, b in itertools.pairwise(scaled) if b > a]
    digits = max(0, -math.floor(math.log10(min(widths)))) if widths else 2
    digits = min(digits, 4)
    while digits < 4 and len({f"{v:.{digits}f}" for v in scaled}) < len(set(scaled)):
        digits += 1
    return [f"{v:.{digits}f}" for v in scaled], "MiB" if mib else "GiB"


def histogram_lines(
    hist: Histogram,
    markers: Sequence[tuple[str, float]] = (),
    *,
    width: int = BAR_WIDTH,
    bar: str = "█",
) -> list[str]:
    """The histogram as text, a line a bin (range, bar, count), each marker (a name and a
    value) on the line of its bin, or on one of its own below or above them."""
    if not hist.bins:
        return []
    texts, unit = _edge_texts(hist.edges)
    labels = [
        f"{texts[i]} {unit}" if b.low_gb == b.high_gb else f"{texts[i]}-{texts[i + 1]} {unit}"
        for i, b in enumerate(hist.bins)
    ]
    label_width = max(len(label) for label in labels)
    most = max(b.count for b in hist.bins)
    count_width = len(str(most))
    by_index: dict[int, list[str]] = {}
    for name, value in sorted(markers, key=lambda m: m[1]):
        by_index.setdefault(hist.index_of(value), []).append(f"◀ {name} {format_gb(value)}")

    def line(label: str, count: int | None, index: int) -> str:
        filled = 0 if not count else max(1, round(count / most * width))
        counted = "" if count is None else str(count)
        text = f"  {label:>{label_width}}  {bar * filled:<{width}} {counted:>{count_width}}"
        notes = by_index.get(index)
        return (f"{text}  {'  '.join(notes)}" if notes else text).rstrip()

    out = []
    if -1 in by_index:
        out.append(line(f"< {texts[0]} {unit}", None, -1))
    out.extend(line(labels[i], b.count, i) for i, b in enumerate(hist.bins))
    if len(hist.bins) in by_index:
        out.append(line(f"> {texts[-1]} {unit}", None, len(hist.bins)))
    return out


def _spread_text(spread: float | None) -> str:
    """A log-space sigma as the ± percentage people read: exp(sigma) - 1."""
    if spread is None:
        return "—"
    return f"±{(math.exp(spread) - 1) * 100:.0f} %"


def _markers(explanation: Mapping[str, Any]) -> list[tuple[str, float]]:
    return [
        ("request", float(explanation["requested_gb"])),
        ("hint", float(explanation["hint_gb"])),
    ]


def evidence_lines(evidence: Mapping[str, Any], *, bar: str = "█") -> list[str]:
    """What ``simrun resources KEY`` prints of ``evidence`` (`KeyEvidence.to_dict`)."""
    e = evidence["explanation"]
    peaks = [float(p) for p in evidence.get("peaks_gb", [])]
    kills = [(float(s), float(gb)) for s, gb in evidence.get("kills", [])]
    out = [
        f"{evidence['key']}",
        f"request    {format_gb(e['requested_gb'])} per process ({e['source']})",
        "why",
        *(f"  {reason}" for reason in e.get("reasons", [])),
    ]
    margin, slope = e.get("margin"), e.get("input_slope")
    out.append(
        f"samples    {e['samples']} from {e['runs']} run{'s' if e['runs'] != 1 else ''}"
        f" ({evidence['observations']} observations recorded in all)"
    )
    out.append(
        f"spread     {_spread_text(e.get('spread'))}"
        f"   margin {'—' if margin is None else f'{float(margin):.2f}'}"
        f"   typical peak {format_gb(e.get('center_gb'))}"
        f"   learned {format_gb(e.get('learned_gb'))}"
        + ("" if slope is None else f"   memory ~ input^{float(slope):.2f}")
    )
    hint = f"hint       {format_gb(e['hint_gb'])}"
    if e.get("hint_capped"):
        hint += " (caps the learned figure)"
    floor = e.get("kill_floor_gb")
    hint += f"   kill floor {format_gb(floor)}" if floor is not None else "   no kill pending"
    out.append(hint)
    if kills:
        out.append(f"kills      {len(kills)} (latest first)")
        out.extend(
            f"  {local_time(s)}  killed at a limit of {format_gb(gb)}" for s, gb in reversed(kills)
        )
    else:
        out.append("kills      none")
    hist = histogram(peaks)
    if hist.bins:
        spacing = "log-spaced" if hist.log else "linear"
        out.append(f"peaks of the window ({len(peaks)}, per process, {spacing} bins)")
        out.extend(histogram_lines(hist, _markers(e), bar=bar))
    else:
        out.append("peaks of the window: none yet (no success recorded)")
    return out


def write_plot(evidence: Mapping[str, Any], path: Path) -> None:
    """A PNG at ``path``: the histogram of the window's peaks (the bins of `histogram`),
    with the request and the hint as vertical lines (the caller checked matplotlib is here)."""
    matplotlib = importlib.import_module("matplotlib")  # by name: mypy needs no stubs
    matplotlib.use("Agg")  # files only, no display
    plt = importlib.import_module("matplotlib.pyplot")

    e = evidence["explanation"]
    peaks = [float(p) for p in evidence.get("peaks_gb", [])]
    hist = histogram(peaks)
    fig, ax = plt.subplots(figsize=(7, 4))
    try:
        if hist.bins:
            edges = list(hist.edges)
            if len(edges) == 2 and edges[0] == edges[1]:
                edges = [edges[0] * 0.98, edges[1] * 1.02 or 0.01]
            ax.hist(peaks, bins=edges, color="#4c78a8", edgecolor="white")
        if hist.log:
            ax.set_xscale("log")
        for (name, value), colour in zip(_markers(e), ("#d62728", "#7f7f7f"), strict=True):
            ax.axvline(value, color=colour, linestyle="--", label=f"{name} {format_gb(value)}")
        ax.set_xlabel("peak memory per process (GiB)")
        ax.set_ylabel("samples")
        ax.set_title(f"{evidence['key']}: {len(peaks)} peaks, {e['source']}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
