"""The demo workflow end to end: the real controller, a real Redis and a real worker
container running the example task types."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from simrun.examples import heat
from simrun.examples.plate import build_grid, load_plate
from tests.support import REPO
from tests.support.service_harness import service, workers

pytestmark = pytest.mark.e2e

HEAT = REPO / "examples" / "heat.yaml"


async def test_heat_demo_succeeds_with_right_outputs(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """examples/heat.yaml runs to success: summary.csv holds every point of the sweep, each
    row what the solver gives for it, and the report task wrote its report from it; the
    learned seconds per unit of the sweep are recorded."""
    store = tmp_path / "store"
    with workers(redis_url, redis_prefix, store=store, memory_gb=4.0, processes=2):
        async with service(store, redis_url, redis_prefix) as svc:
            run_id = await svc.submit(HEAT.read_text(), base=HEAT.parent)
            run = await svc.wait(run_id, timeout_s=120)
            assert (run.state, run.message) == ("succeeded", "")
            view = await svc.controller.queries.run(run_id)
            learned = await svc.controller.queries.resources_by_key()
    assert view is not None
    assert [(t.name, t.state, t.counts["done"]) for t in view.tasks] == [
        ("sweep", "done", 24),
        ("summary", "done", 1),
    ]
    assert view.tasks[0].merge == "done"
    out = store / "runs" / run_id / "sweep" / "out"
    with (out / heat.SUMMARY_NAME).open() as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["index"]) for r in rows] == list(range(24))
    settings = heat.HeatSettings.model_validate(
        {
            "grid": 64,
            "diffusivities": [0.1, 0.3, 1.0, 3.0],
            "boundary_temperatures": [0, 10, 20, 30, 40, 50],
            "duration": 0.25,
        }
    )
    grid = build_grid(load_plate(REPO / "examples" / "plate.json"), settings.grid)
    for index in (0, 13, 23):
        expected, _ = heat.simulate(grid, settings, index)
        assert float(rows[index]["mean_temperature"]) == pytest.approx(expected["mean_temperature"])
        point = json.loads((out / heat.point_name(index)).read_text())
        assert point["diffusivity"] == expected["diffusivity"]
    report = store / "runs" / run_id / "summary" / "out" / "report.md"
    assert "Heat sweep of a plate" in report.read_text()
    (sweep_key,) = [k for k in learned if k.key.task_type == "heat"]
    assert sweep_key.key.text() == "heat/plate/64"
    assert sweep_key.seconds_per_unit is not None
    assert sweep_key.seconds_per_unit > 0
