"""The fault campaign: a real campaign per scenario, a fault put into it mid-run, and the
same checks after each: the run's outcome, every unit's output present exactly once (each
unit computed once by the computation the store counts; see
`tests.support.campaign.Campaign.assert_every_unit_once`), no duplicate unit rows in the
store's SQLite file, and the recovery time printed (``pytest -s``) as one line
``fault=<name> recovery_s=<x> units=<n>``.

Real parts throughout (tests/support/campaign.py): a private ``redis-server`` per test
(never the shared one), the service as a child process (controller loop and HTTP API),
worker containers as child processes running ``fault-unit`` units
(tests/support/campaign_tasks.py), and the store's files read as they are.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.campaign import Campaign, fault_doc, report

pytestmark = pytest.mark.e2e


@pytest.fixture
def campaign(tmp_path: Path) -> Iterator[Campaign]:
    """A campaign with its Redis started (no service nor worker yet)."""
    found = Campaign(tmp_path)
    try:
        found.redis.start()
        yield found
    finally:
        found.close()


def test_worker_sigkill_mid_run(campaign: Campaign) -> None:
    """A worker container SIGKILLed (its whole process group) while it runs units: its
    units are dispatched again to the other worker, the run succeeds, and every unit is
    counted once: the units the dead worker completed without reporting are computed once
    more by the survivor, no other unit twice."""
    units = 120
    campaign.start_service()
    campaign.start_worker("doomed")
    campaign.start_worker("survivor")
    campaign.wait_workers(2)
    run_id = campaign.submit(fault_doc(units))
    held = campaign.wait(
        "the doomed worker to run units", lambda: campaign.held_by(run_id, "doomed")
    )
    killed_at = campaign.signal_worker("doomed", signal.SIGKILL)
    held = held | campaign.held_by(run_id, "doomed")
    campaign.wait(
        "the killed worker's units to be done again",
        lambda: held <= campaign.done(run_id),
        timeout_s=30,
    )
    recovered_at = time.monotonic()
    state, message = campaign.wait_run(run_id, timeout_s=60)
    report(
        "worker-sigkill", recovered_at - killed_at, units, finish_s=time.monotonic() - killed_at
    )
    assert (state, message) == ("succeeded", "")
    campaign.assert_every_unit_once(run_id, units, faulted=["doomed"])
    rows = {u.idx: u for u in campaign.units(run_id)}
    moved = [rows[i] for i in held if rows[i].worker == "survivor"]
    assert moved, "no unit of the killed worker was done by the survivor"
    assert all(u.attempt > 1 for u in moved), moved
