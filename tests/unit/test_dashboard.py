"""The web app's decisions (`simrun.service.dashboard`), as tables."""

from __future__ import annotations

from typing import Any

import pytest

from simrun.core.states import UnitRow
from simrun.core.views import RunView, TaskView
from simrun.service.dashboard import (
    MAX_PAGE,
    done_page,
    keep_run,
    page_of,
    pending_page,
    run_line,
)


def _task(name: str, units: int, kills: int = 0, **counts: int) -> TaskView:
    return TaskView(
        name=name, type="t", state="running", status="", queue="cpu", resources=None,
        units=units, counts=counts, merge=None, seconds_per_unit=None, eta_s=None, kills=kills,
    )  # fmt: skip


def test_a_run_s_line_adds_up_its_tasks_and_leaves_pauses_out() -> None:
    """A run's line counts its units done of all, running, failed and killed over its
    tasks; its running time is up to now (or its end) less its pauses."""
    view = RunView(
        id="r", name="n", state="running", message="", created_s=100.0, updated_s=0.0,
        finished_s=None, pauses=((110.0, 130.0),),
        tasks=(_task("a", 10, kills=1, done=4, failed=1), _task("b", 5, running=2)),
    )  # fmt: skip
    line = run_line(view, now_s=200.0)
    assert (line["units"], line["done"], line["running"], line["failed"]) == (15, 4, 2, 1)
    assert line["killed"] == 1
    assert line["running_s"] == pytest.approx(80.0)


LINE = {"id": "20261201-1-abc", "name": "Heat sweep", "model": "plate", "state": "running"}


@pytest.mark.parametrize(
    ("state", "text", "kept"),
    [
        (None, None, True),
        ("running", None, True),
        ("failed", None, False),
        (None, "heat", True),
        (None, "PLATE", True),
        (None, "abc", True),
        (None, "  ", True),
        ("running", "other", False),
    ],
)
def test_the_runs_filter(state: str | None, text: str | None, kept: bool) -> None:
    """The runs list keeps a run in the state asked (any without one) whose id, name or
    model holds the text, case ignored (any without one)."""
    assert keep_run(LINE, state, text) is kept


def _units(n: int, state: Any = "done") -> list[UnitRow]:
    return [UnitRow("r", "t", i, "chunk", state) for i in range(n)]


@pytest.mark.parametrize(
    ("count", "offset", "limit", "indices", "total"),
    [
        (10, 0, 3, [0, 1, 2], 10),
        (10, 8, 5, [8, 9], 10),
        (10, 20, 5, [], 10),
        (10, -4, 2, [0, 1], 10),
        (2000, 0, 10_000, list(range(MAX_PAGE)), 2000),
    ],
)
def test_a_page_of_units(
    count: int, offset: int, limit: int, indices: list[int], total: int
) -> None:
    """A page holds the units from its offset (never below 0), at most `MAX_PAGE`, with the
    total of the state."""
    page = page_of(_units(count), offset, limit)
    assert [u["index"] for u in page["units"]] == indices
    assert page["total"] == total


@pytest.mark.parametrize(
    ("sent_back", "fresh", "offset", "limit", "indices"),
    [
        ([2, 5], range(10, 1_000_000), 0, 4, [2, 5, 10, 11]),
        ([2, 5], range(10, 1_000_000), 1, 2, [5, 10]),
        ([2, 5], range(10, 1_000_000), 4, 2, [12, 13]),
        ([], range(0, 1_000_000), 999_998, 5, [999_998, 999_999]),
        ([7], range(0), 0, 5, [7]),
    ],
)
def test_a_page_of_pending_units_is_made_from_the_frontier(
    sent_back: list[int], fresh: range, offset: int, limit: int, indices: list[int]
) -> None:
    """Pending units: those sent back first, then the fresh ones from the frontier, made up
    for the page only (a million of them cost a page)."""
    rows = [UnitRow("r", "t", i, "chunk", "pending") for i in sent_back]
    total = len(sent_back) + len(fresh)
    page = pending_page(rows[: offset + limit], fresh, total, ("r", "t"), offset, limit)
    assert [u["index"] for u in page["units"]] == indices
    assert page["total"] == total


def _span(first: int, last: int) -> tuple[Any, ...]:
    return ("r", "t", first, last, 1, "job", 0.5, "w", 1.0, 2.0, 3.0)


@pytest.mark.parametrize(
    ("rows", "spans", "offset", "limit", "indices", "total"),
    [
        ([], [(0, 9)], 0, 3, [0, 1, 2], 10),
        ([], [(0, 9), (10, 999_999)], 999_997, 5, [999_997, 999_998, 999_999], 1_000_000),
        ([5], [(0, 4), (6, 9)], 3, 4, [3, 4, 5, 6], 10),
        ([0, 1], [], 1, 10, [1], 2),
        ([], [], 0, 10, [], 0),
        ([3], [(10, 19)], 0, 3, [3, 10, 11], 11),
    ],
)
def test_a_page_of_done_units_is_made_from_their_spans(
    rows: list[int],
    spans: list[tuple[int, int]],
    offset: int,
    limit: int,
    indices: list[int],
    total: int,
) -> None:
    """Done units: those with a row and the spans, by index; only the spans the page
    reaches become units (a million done units cost a page)."""
    own = [UnitRow("r", "t", i, "chunk", "done") for i in rows]
    page = done_page(own, [_span(a, b) for a, b in spans], offset, limit)
    assert [u["index"] for u in page["units"]] == indices
    assert page["total"] == total
