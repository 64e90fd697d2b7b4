"""The web app in a real browser: Playwright (the Python package) driving Debian's
Chromium against a real `simrun service` (with a token), a real `simrun worker` and a real
Redis, all child processes.

Chromium is `/usr/bin/chromium` (`.ci/run` installs it). Without it the tests are skipped
with the reason, except in CI (``CI=true``), where its absence fails them. They write the
README's two screenshots (``docs/screenshots/``), so those never go stale.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from simrun.local.machine import free_port
from tests.support import REPO
from tests.support.cli_harness import WORK, start_simrun, stop_process, wait_for_workers
from tests.support.redis_server import key_prefix
from tests.support.wait import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("web-browser")]

CHROMIUM = Path(os.environ.get("SIMRUN_CHROMIUM", "/usr/bin/chromium"))
TOKEN = "browser-test-token"
SCREENSHOTS = REPO / "docs" / "screenshots"


def _need_browser() -> Any:
    """Playwright's sync API; skips (fails in CI) when it or Chromium is missing."""
    in_ci = os.environ.get("CI", "").lower() == "true"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        reason = "the playwright package is not installed (pip install -e '.[dev]')"
        if in_ci:
            pytest.fail(reason)
        pytest.skip(reason)
    if not CHROMIUM.exists():
        reason = f"no Chromium at {CHROMIUM} (apt-get install -y chromium; .ci/run does)"
        if in_ci:
            pytest.fail(reason)
        pytest.skip(reason)
    return sync_playwright


@dataclass(frozen=True)
class Stack:
    url: str
    home: Path

    def api(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
        )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Stack]:
    """`simrun service --token` and one `simrun worker` (2 processes) on a prefix of their
    own, serving the installed types (heat, report) and the tests' svc-work."""
    _need_browser()
    home = tmp_path_factory.mktemp("web")
    prefix = key_prefix("web")
    port = free_port()
    common = ["--redis-url", redis_url, "--prefix", prefix, "--store", str(home / "store")]
    svc = start_simrun(
        "service", "--port", str(port), *common, "--plugins", WORK, "--max-retries", "0",
        "--token", TOKEN, cwd=REPO,
    )  # fmt: skip
    worker = start_simrun(
        "worker", *common, "--plugins", WORK, "--processes", "2", "--poll-delay-s", "0.01",
        cwd=REPO,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_workers(url, [svc, worker], timeout_s=60)
        yield Stack(url, home)
    finally:
        stop_process(worker)
        stop_process(svc)


@pytest.fixture(scope="module")
def browser(stack: Stack) -> Iterator[Any]:
    sync_playwright = _need_browser()
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any, stack: Stack) -> Iterator[Any]:
    """A page at 1280x800 that gave the token once (the prompt the page shows on a 401);
    afterwards, no script error happened and nothing was asked of another host."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    elsewhere: list[str] = []  # the page works with no network: nothing from another host

    def request(r: Any) -> None:
        if not r.url.startswith((stack.url, "data:", "blob:", "about:")):
            elsewhere.append(r.url)

    page.on("request", request)
    page.goto(f"{stack.url}/#/runs")
    prompt = page.get_by_role("dialog", name="token")
    prompt.wait_for()
    prompt.get_by_label("token").fill(TOKEN)
    prompt.get_by_role("button", name="Use token").click()
    page.get_by_role("heading", name="Runs").wait_for()
    yield page
    context.close()
    assert errors == [], errors
    assert elsewhere == [], elsewhere


def expect(locator: Any) -> Any:
    """Playwright's waiting assertions (imported once the browser is known to be there)."""
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def _settled_box(locator: Any) -> dict[str, float]:
    """The bounding box of ``locator`` once two looks agree (a view that fits or pans
    animates: a box read meanwhile is where the element was)."""
    seen: list[dict[str, float]] = []

    def still() -> dict[str, float] | None:
        seen.append(locator.bounding_box())
        return seen[-1] if len(seen) > 1 and seen[-1] == seen[-2] else None

    box: dict[str, float] = wait_until(still, timeout_s=10, what="the view to settle", poll_s=0.1)
    return box


def _drag(page: Any, source: Any, target: Any) -> None:
    """A mouse drag from the centre of ``source`` to the centre of ``target`` (how React
    Flow's handles are wired), once both stand still, going on only once the page drew
    the connection being dragged (a loaded browser handles the press late)."""
    a, b = _settled_box(source), _settled_box(target)
    ax, ay = a["x"] + a["width"] / 2, a["y"] + a["height"] / 2
    page.mouse.move(ax, ay)
    page.mouse.down()
    page.mouse.move(ax + 8, ay + 8, steps=2)
    page.locator(".react-flow__connectionline").wait_for()
    page.mouse.move(b["x"] + b["width"] / 2, b["y"] + b["height"] / 2, steps=12)
    page.mouse.up()


def test_a_workflow_built_in_the_editor_validates_forecasts_and_runs_live(
    page: Any, stack: Stack
) -> None:
    """From the palette: heat dragged onto the canvas, report added with the keyboard, the
    plate uploaded as a source and the ports wired; a bad setting shows the service's
    message on the node and its field, and it goes away once fixed; Forecast shows the
    units and the memory's source; Run opens the run page, whose progress reaches 100 %
    without a reload, and its workflow opens in the Editor again. The Editor's screenshot
    is the README's."""
    page.get_by_role("navigation").get_by_role("link", name="Editor").click()
    palette = page.get_by_role("complementary", name="palette")
    heat = palette.get_by_role("button", name="type heat")
    heat.wait_for()
    assert "heat diffusion" in heat.inner_text()
    palette.get_by_label("search task types").fill("report")
    report = palette.get_by_role("button", name="type report")
    assert not heat.is_visible()
    report.focus()
    page.keyboard.press("Enter")  # the keyboard adds a type too
    palette.get_by_label("search task types").fill("")
    # the keyboard: Enter adds a type (selected), Delete removes the selected task
    palette.get_by_role("button", name="type svc-work").press("Enter")
    added = page.get_by_label("task svc_work", exact=True)
    added.wait_for()
    page.keyboard.press("Delete")
    expect(added).to_have_count(0)
    canvas = page.get_by_label("canvas")
    heat.drag_to(canvas, target_position={"x": 150, "y": 120})
    heat_node = page.get_by_label("task heat", exact=True)
    heat_node.wait_for()
    report_node = page.get_by_label("task report", exact=True)

    # nothing wired yet: the service's messages are on the nodes
    heat_node.get_by_role("alert").wait_for()
    assert "not connected" in heat_node.get_by_role("alert").inner_text()

    page.get_by_role("button", name="Add source").click()
    plate = REPO / "examples" / "plate.json"
    page.get_by_label("file").set_input_files(str(plate))
    page.get_by_label("source model").get_by_text("plate.json").wait_for()
    page.get_by_role("button", name="Fit View").click()
    _drag(page, page.get_by_label("source model").locator(".react-flow__handle"),
          page.get_by_label("input plate of heat"))  # fmt: skip
    _drag(page, page.get_by_label("output out of heat"), page.get_by_label("input table of report"))
    page.wait_for_function("document.querySelectorAll('.react-flow__edge').length === 2")
    expect(heat_node.get_by_role("alert")).to_have_count(0)  # wired: the message went away

    heat_node.click()
    side = page.get_by_role("complementary", name="settings panel")
    grid = side.get_by_label("Grid")
    grid.fill("4")
    grid.press("Enter")
    expect(heat_node.get_by_role("alert")).to_contain_text("greater than or equal to 8")
    expect(side.get_by_role("alert")).to_contain_text("greater than or equal to 8")
    grid.fill("16")
    grid.press("Enter")
    diffusivities = side.get_by_label("Diffusivities")
    diffusivities.fill("0.5, 1")
    diffusivities.press("Enter")
    expect(heat_node.get_by_role("alert")).to_have_count(0)
    expect(page.get_by_role("status")).to_have_text("valid")
    expect(report_node.get_by_role("alert")).to_have_count(0)

    page.get_by_role("button", name="Forecast").click()
    forecast = page.get_by_role("table", name="forecast")
    forecast.wait_for()
    rows = forecast.locator("tbody tr")
    assert rows.count() == 2
    assert rows.nth(0).locator("td").nth(1).inner_text() == "12"  # 2 x 6 points
    assert "hint" in rows.nth(0).inner_text() or "learned" in rows.nth(0).inner_text()
    page.get_by_role("button", name="Arrange").click()
    page.wait_for_timeout(300)  # the view fits the arranged graph
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "editor.png"))

    exported = page.evaluate("sessionStorage.getItem('simrun-editor-draft')")
    page.get_by_role("button", name="Run").click()
    page.wait_for_url("**/#/runs/*")
    run_id = page.url.rsplit("/", 1)[1]
    url_before = page.url
    progress = page.get_by_role("progressbar", name="run progress")
    page.wait_for_function(
        "document.querySelector('[aria-label=\"run progress\"]')"
        "?.getAttribute('aria-valuenow') === '100'",
        timeout=120_000,
    )
    assert progress.get_attribute("aria-valuenow") == "100"
    assert page.url == url_before
    page.get_by_text("succeeded").first.wait_for(timeout=60_000)

    # the YAML the Editor wrote is the run's document: it runs unchanged
    with stack.api() as api:
        view = api.get(f"/runs/{run_id}").json()
    assert [t["name"] for t in view["tasks"]] == ["heat", "report"]
    assert "simrun-editor-layout" in exported

    # the run's workflow opens in the Editor again, laid out as it was
    page.get_by_role("link", name="Open in Editor").click()
    page.wait_for_url(f"**/#/editor/{run_id}")
    for name in ("task heat", "task report", "source model"):
        page.get_by_label(name, exact=True).wait_for()
    page.wait_for_function("document.querySelectorAll('.react-flow__edge').length === 2")


def test_a_failed_unit_s_log_its_replay_and_the_memory_plot_of_its_key(
    page: Any, stack: Stack
) -> None:
    """A run with failing units: the runs list shows it failed; on its page the failures
    are grouped by error, a failed unit's chip opens its log with the traceback; once the
    cause is gone, Replay puts it back and the run succeeds live; the resource key's page
    plots the peaks with the request. The run page's screenshot is the README's."""
    flag = stack.home / "broken"
    flag.write_text("the cause")
    doc = {
        "name": "flaky-sweep",
        "tasks": [
            {
                "name": "work",
                "type": "svc-work",
                "settings": {
                    "units": 12, "seconds": 0.05, "fail_flag": str(flag), "fail_indices": [3, 7],
                    "hog_mb": 40, "tag": "web",
                },
            }
        ],
    }  # fmt: skip
    with stack.api() as api:
        answer = api.post("/runs", json={"workflow": json.dumps(doc)})
        assert answer.status_code == 201, answer.text
        run_id = answer.json()["run"]
        wait_until(
            lambda: api.get(f"/runs/{run_id}").json()["state"] != "running",
            timeout_s=60,
            what=f"run {run_id} to end",
            poll_s=0.2,
        )

    page.goto(f"{stack.url}/#/runs")
    row = page.locator("table.runs tr", has_text="flaky-sweep")
    row.get_by_text("failed").wait_for()
    # the filters: by state, then by text
    page.get_by_label("state filter").select_option("succeeded")
    expect(row).to_have_count(0)
    page.get_by_label("state filter").select_option("failed")
    expect(row).to_have_count(1)
    page.get_by_label("search runs").fill("no such run")
    expect(row).to_have_count(0)
    page.get_by_label("search runs").fill("FLAKY")
    expect(row).to_have_count(1)
    row.click()
    page.wait_for_url(f"**/#/runs/{run_id}")
    failures = page.locator(".failures")
    failures.get_by_text("RuntimeError: unit # fails").wait_for()
    failures.locator("summary").first.click()  # one group: both units
    failures.get_by_role("button", name="work/3").click()
    log = page.get_by_label("unit log")
    log.locator("pre.traceback").wait_for()
    assert "fails on purpose" in log.locator("pre.traceback").inner_text()
    # the task's strip: the failed units, a page of them
    strip = page.get_by_label("units of work")
    assert strip.get_by_role("tab", name="failed 2").get_attribute("aria-selected") == "true"
    page.screenshot(path=str(SCREENSHOTS / "run.png"), full_page=True)
    strip.get_by_role("tab", name="done 10").click()
    expect(strip.locator(".chip")).to_have_count(10)
    strip.get_by_role("tab", name="failed 2").click()
    expect(strip.locator(".chip")).to_have_count(2)

    flag.unlink()
    # one chosen unit first, with more memory; then the other failed one
    strip.get_by_role("button", name="3", exact=True).click(modifiers=["Control"])
    page.get_by_label("replay memory").fill("0.5")
    strip.get_by_role("button", name="Replay chosen (1)").click()
    page.get_by_role("status").get_by_text("replayed 1").wait_for()
    page.get_by_role("button", name="Replay failed (1)").wait_for(timeout=60_000)
    page.get_by_label("replay memory").fill("")
    page.get_by_role("button", name="Replay failed (1)").click()
    page.get_by_role("status").get_by_text("replayed 1").wait_for()
    page.wait_for_function(
        "document.querySelector('[aria-label=\"run progress\"]')"
        "?.getAttribute('aria-valuenow') === '100'",
        timeout=60_000,
    )
    page.get_by_text("succeeded").first.wait_for(timeout=30_000)

    key = page.locator("table.tasks a[href^='#/resources/']").first
    key_text = key.inner_text()
    key.click()
    plot = page.get_by_role("img", name=f"memory plot of {key_text}")
    plot.wait_for()
    assert plot.locator("circle.peak").count() > 0
    assert plot.locator("line.request").count() == 1
    # a time axis: each peak where it was recorded
    assert "over time" in (plot.text_content() or "")


def test_a_unit_killed_for_memory_shows_in_its_strip_and_on_the_plot(
    page: Any, stack: Stack
) -> None:
    """A unit that uses more memory than its process was given is killed, then retried
    with more: the task's strip lists it under "killed", and the key's plot marks the
    kill at its limit."""
    doc = {
        "name": "hungry",
        "tasks": [
            {
                "name": "eat", "type": "svc-work",
                "settings": {"units": 4, "hog_mb": 600, "hog_indices": [1], "tag": "hungry"},
            }
        ],
    }  # fmt: skip
    with stack.api() as api:
        answer = api.post("/runs", json={"workflow": json.dumps(doc)})
        assert answer.status_code == 201, answer.text
        run_id = answer.json()["run"]
    page.goto(f"{stack.url}/#/runs/{run_id}")
    page.get_by_text("succeeded").first.wait_for(timeout=120_000)
    page.get_by_role("button", name="eat").click()
    strip = page.get_by_label("units of eat")
    strip.get_by_role("tab", name=re.compile(r"^killed [1-9]")).click()
    expect(strip.get_by_role("button", name="1", exact=True)).to_have_count(1)
    key = page.locator("table.tasks a[href^='#/resources/']").first
    key_text = key.inner_text()
    key.click()
    plot = page.get_by_role("img", name=f"memory plot of {key_text}")
    plot.wait_for()
    assert plot.locator("g.kill").count() >= 1


def test_an_example_yaml_opens_in_the_editor_with_a_layout(page: Any) -> None:
    """examples/heat.yaml, imported, shows its source and tasks wired as written, laid out
    from the graph; the source it names is to be uploaded, which the check says."""
    page.goto(page.url.split("#", 1)[0] + "#/editor")
    page.get_by_role("button", name="Import YAML").click()
    page.get_by_label("workflow yaml").fill((REPO / "examples" / "heat.yaml").read_text())
    page.get_by_role("button", name="Open this YAML").click()
    for name in ("task sweep", "task summary", "source plate"):
        page.get_by_label(name, exact=True).wait_for()
    page.wait_for_function("document.querySelectorAll('.react-flow__edge').length === 2")
    sweep = page.get_by_label("task sweep", exact=True).bounding_box()
    summary = page.get_by_label("task summary", exact=True).bounding_box()
    assert sweep["x"] < summary["x"]  # the summary reads the sweep: right of it
    expect(
        page.get_by_role("alert").filter(has_text="source 'plate' was not uploaded")
    ).to_have_count(1)
    assert page.get_by_label("workflow name").input_value() == "heat-demo"


def test_the_pages_of_a_run_of_a_million_units_send_no_unit_until_a_strip_opens(
    page: Any, stack: Stack
) -> None:
    """With a run of 1,000,000 units in the store (held back: its memory fits no worker),
    the runs list and the run's page show without any unit being sent: the run's view (what
    its event stream sends) stays a few KB, and opening a strip sends one page of 200 units.
    The page's Cancel button cancels it. (How fast the pages load, against a run of ten
    units: benchmarks/dashboard.py.)"""
    doc = {
        "name": "million",
        "tasks": [
            {
                "name": "big", "type": "svc-work", "settings": {"units": 1_000_000},
                "resources": {"memory_per_worker_gb": 4000},
            }
        ],
    }  # fmt: skip
    with stack.api() as api:
        answer = api.post("/runs", json={"workflow": json.dumps(doc)})
        assert answer.status_code == 201, answer.text
        run_id = answer.json()["run"]
        wait_until(
            lambda: api.get(f"/runs/{run_id}").json()["tasks"][0]["units"],
            timeout_s=60,
            what="the task to start",
            poll_s=0.2,
        )
        assert len(api.get(f"/runs/{run_id}").content) < 4096  # no unit in the view
    try:
        for fragment, ready in (
            ("#/runs", "table.runs tbody tr"),
            (f"#/runs/{run_id}", "[aria-label='run progress']"),
        ):
            page.goto("about:blank")
            page.goto(f"{stack.url}/{fragment}")
            page.locator(ready).first.wait_for()
        page.get_by_role("button", name="big").click()
        strip = page.get_by_label("units of big")
        strip.get_by_role("tab", name="pending 1,000,000").click()
        expect(strip.locator(".chip")).to_have_count(200)
        expect(strip).to_contain_text("200 of 1,000,000")
        page.get_by_role("button", name="Cancel run").click()  # the button cancels it
        page.get_by_role("status").get_by_text("cancelled").wait_for()
        expect(page.locator(".toolbar .badge")).to_have_text("cancelled")
    finally:
        with stack.api() as api:
            api.post(f"/runs/{run_id}/cancel")


def test_the_workers_page_shows_the_live_worker_and_its_queue(page: Any, stack: Stack) -> None:
    """The workers page (live: an event stream) shows the worker container with its
    processes and the memory its processes hold (measured by the worker) against its
    capacity, and the cpu queue with its backlog and what scale would ask."""
    page.get_by_role("navigation").get_by_role("link", name="Workers").click()
    card = page.locator(".card").first
    card.wait_for()
    assert "processes" in card.inner_text()
    assert "of 2" in card.inner_text()
    # a measured figure, not the dash of a worker that does not say
    measured = re.compile(r"\d+(\.\d+)? [MG]iB in use")
    expect(card.get_by_label("memory in use")).to_contain_text(measured)
    row = page.locator("table.queues tr", has_text="cpu")
    expect(row).to_contain_text("container(s)")


def test_an_unknown_run_s_page_says_so(page: Any, stack: Stack) -> None:
    """The page of a run the service does not know says so (once: no reconnecting)."""
    page.goto(f"{stack.url}/#/runs/no-such-run")
    expect(page.locator("main")).to_contain_text("there is no run 'no-such-run'")


def test_the_runs_and_run_pages_fit_a_phone(stack: Stack, page: Any) -> None:
    """At a phone's width (390 px) the runs list and a run page do not scroll sideways as
    a whole (wide tables scroll in their own box)."""
    with stack.api() as api:  # a run to show, whichever tests ran before
        doc = {"name": "small", "tasks": [{"name": "w", "type": "svc-work", "settings": {}}]}
        assert api.post("/runs", json={"workflow": json.dumps(doc)}).status_code == 201
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{stack.url}/#/runs")
    page.locator("table.runs tbody tr").first.wait_for()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.locator("table.runs tbody tr").first.click()
    page.get_by_role("progressbar", name="run progress").wait_for()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
