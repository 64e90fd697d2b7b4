"""The evidence view of ``simrun resources KEY`` (simrun.cli.evidence): the histogram of a
key's peaks (bins, counts, where the request and the hint fall) and the lines printed."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simrun.cli.evidence import LOG_SPAN, ROWS, evidence_lines, histogram, histogram_lines


def bar_of(line: str) -> int:
    return line.count("█")


def test_linear_bins_count_each_peak_once_and_close_the_last_bin() -> None:
    """Peaks spanning at most LOG_SPAN times get linear bins from the smallest to the
    largest peak; a peak on an inner edge counts in the bin above it, the largest in the
    last bin."""
    hist = histogram([1.0, 1.5, 2.0, 2.0, 3.0, 3.5, 4.0, 4.0, 4.0], rows=3)
    assert not hist.log
    assert [(b.low_gb, b.high_gb) for b in hist.bins] == [(1.0, 2.0), (2.0, 3.0), (3.0, 4.0)]
    assert [b.count for b in hist.bins] == [2, 2, 5]


def test_log_bins_when_the_peaks_span_more_than_log_span() -> None:
    """Peaks from 1 to 16 GiB (more than LOG_SPAN apart) get log-spaced bins: each edge is
    the same factor above the one before."""
    assert LOG_SPAN < 16
    hist = histogram([1.0, 1.1, 2.5, 3.0, 5.0, 16.0], rows=4)
    assert hist.log
    assert hist.edges == pytest.approx((1.0, 2.0, 4.0, 8.0, 16.0))
    assert [b.count for b in hist.bins] == [2, 2, 1, 1]


def test_few_distinct_peaks_make_few_bins_and_equal_peaks_one() -> None:
    """No more bins than ROWS nor than distinct peaks; all equal peaks are one bin."""
    assert len(histogram([float(i) for i in range(1, 100)]).bins) == ROWS
    assert len(histogram([1.0, 1.0, 2.0, 2.0, 3.0]).bins) == 3
    same = histogram([2.5] * 7)
    assert [(b.low_gb, b.high_gb, b.count) for b in same.bins] == [(2.5, 2.5, 7)]
    assert histogram([]).bins == ()
    assert histogram_lines(histogram([])) == []


def test_the_request_is_marked_on_the_line_of_its_bin() -> None:
    """A marker inside the peaks' range is written on its bin's line; one above the largest
    peak on a line after the bins, one below the smallest on a line before; each line's bar
    is as long as its count allows and ends with the count."""
    hist = histogram([1.0, 1.5, 2.0, 2.0, 3.0, 3.5, 4.0, 4.0, 4.0], rows=3)
    assert hist.index_of(2.4) == 1
    assert (hist.index_of(0.5), hist.index_of(4.0), hist.index_of(6.0)) == (-1, 2, 3)
    lines = histogram_lines(hist, [("request", 2.4), ("hint", 6.0), ("floor", 0.5)], width=10)
    assert len(lines) == 5
    below, first, second, third, above = lines
    assert below.lstrip().startswith("< 1 GiB")
    assert below.endswith("◀ floor 512 MiB")
    assert second.endswith("◀ request 2.4 GiB")
    assert "◀" not in first + third
    assert above.lstrip().startswith("> 4 GiB")
    assert above.endswith("◀ hint 6 GiB")
    assert (first.split()[0], third.split()[0]) == ("1-2", "3-4")
    assert [bar_of(x) for x in (first, second, third)] == [4, 4, 10]  # 2, 2, 5 of 5
    assert [x.split("█")[-1].split()[0] for x in (first, second, third)] == ["2", "2", "5"]


def test_labels_tell_narrow_bins_apart() -> None:
    """Bin edges get the decimals their width needs (a figure of it): narrow bins do not
    all read the same, and peaks all under a GiB read in MiB."""
    lines = histogram_lines(histogram([1.0, 1.01, 1.02, 1.03]))
    assert [line.split("  ")[1].strip() for line in lines] == [
        "1.000-1.008 GiB", "1.008-1.015 GiB", "1.015-1.022 GiB", "1.022-1.030 GiB",
    ]  # fmt: skip
    small = histogram_lines(histogram([0.02, 0.03]))
    assert [line.split()[0] for line in small] == ["20-26", "26-31"]


@given(
    st.lists(st.floats(0.001, 1000.0), min_size=1, max_size=300),
    st.integers(1, 20),
    st.floats(0.0, 2000.0),
)
def test_every_peak_is_counted_in_the_bin_that_holds_it(
    peaks: list[float], rows: int, marker: float
) -> None:
    """Whatever the peaks: the counts add up to the peaks, each peak lies within the edges of
    the bin `index_of` gives it, the edges rise, and a marker lands in one place."""
    hist = histogram(peaks, rows=rows)
    assert sum(b.count for b in hist.bins) == len(peaks)
    assert 1 <= len(hist.bins) <= min(rows, len(set(peaks)))
    assert list(hist.edges) == sorted(hist.edges)
    for peak in peaks:
        b = hist.bins[hist.index_of(peak)]
        assert b.low_gb <= peak <= b.high_gb
    if hist.log:
        assert max(peaks) / min(peaks) > LOG_SPAN
    lines = histogram_lines(hist, [("request", marker)])
    assert sum(line.count("◀ request") for line in lines) == 1


EVIDENCE = {
    "key": "heat/plate/64",
    "explanation": {
        "requested_gb": 2.6, "source": "learned from 2 runs", "samples": 6, "runs": 2,
        "center_gb": 2.0, "spread": math.log(1.25), "margin": 1.3, "learned_gb": 2.6,
        "hint_gb": 4.0, "hint_capped": False, "kill_floor_gb": None, "input_slope": None,
        "reasons": ["the typical peak is 2 GiB", "times a margin of 1.3 for a spread of 25 %"],
    },
    "peaks_gb": [1.8, 1.9, 2.0, 2.0, 2.1, 2.2],
    "kills": [[1_700_000_000.0, 1.0], [1_700_003_600.0, 1.5]],
    "observations": 9,
}  # fmt: skip


def test_evidence_lines_tell_the_request_why_the_samples_kills_and_peaks() -> None:
    """The view names the key, the request and its source, each reason under "why", the
    samples and runs, the spread as ± percent, the margin, the hint, each kill with its
    date and limit (latest first), and the histogram with the request marked."""
    lines = evidence_lines(EVIDENCE)
    assert lines[0] == "heat/plate/64"
    assert "request    2.6 GiB per process (learned from 2 runs)" in lines
    why = lines.index("why")
    assert lines[why + 1 : why + 3] == [
        "  the typical peak is 2 GiB", "  times a margin of 1.3 for a spread of 25 %",
    ]  # fmt: skip
    assert "samples    6 from 2 runs (9 observations recorded in all)" in lines
    assert "spread     ±25 %   margin 1.30   typical peak 2 GiB   learned 2.6 GiB" in lines
    assert "hint       4 GiB   no kill pending" in lines
    stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(1_700_003_600.0))
    kill_lines = [line for line in lines if "killed at a limit" in line]
    assert kill_lines[0] == f"  {stamp}  killed at a limit of 1.5 GiB"
    assert len(kill_lines) == 2
    assert "peaks of the window (6, per process, linear bins)" in lines
    marked = [line for line in lines if "◀ request 2.6 GiB" in line]
    assert len(marked) == 1
    assert marked[0].lstrip().startswith("> 2.20 GiB")


def test_a_key_without_successes_says_so() -> None:
    """Kills alone: no histogram, a line saying no success is recorded."""
    explanation = {**EVIDENCE["explanation"], "kill_floor_gb": 3.0, "hint_capped": True}
    only_kills = {**EVIDENCE, "peaks_gb": [], "explanation": explanation}
    lines = evidence_lines(only_kills)
    assert "peaks of the window: none yet (no success recorded)" in lines
    assert any("kill floor 3 GiB" in line and "caps" in line for line in lines)


def test_a_fit_to_the_input_size_is_shown() -> None:
    """When the policy fits memory to the input size, the exponent is on the spread line."""
    fitted = {**EVIDENCE, "explanation": {**EVIDENCE["explanation"], "input_slope": 0.8}}
    (line,) = [x for x in evidence_lines(fitted) if x.startswith("spread")]
    assert line.endswith("learned 2.6 GiB   memory ~ input^0.80")
