"""`simrun run` and the dashboard: it prints the URL of the run's page on its embedded
service, and ``--open`` opens it in the browser (here a stand-in named by ``BROWSER``,
which records the URL it was given) and keeps the service up after the run, to Ctrl-C."""

from __future__ import annotations

import re
import signal
import stat
from pathlib import Path

import httpx
import pytest

from simrun.local.machine import free_port
from tests.support.cli_harness import (
    WORK,
    Output,
    clean_env,
    run_id_in,
    simrun,
    start_simrun,
    stop_process,
    write_work,
)
from tests.support.redis_server import key_prefix

pytestmark = pytest.mark.e2e

URL_LINE = re.compile(r"^dashboard (http://127\.0\.0\.1:\d+/#/runs/(\S+))$", re.MULTILINE)


def test_run_prints_the_dashboard_url_of_its_run(tmp_path: Path) -> None:
    """Without --open, the URL of the run's page is printed (no token in it), and the
    command ends with the run."""
    write_work(tmp_path / "wf.yaml", units=2)
    done = simrun("run", "wf.yaml", "--plugins", WORK, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    found = URL_LINE.search(done.stdout)
    assert found is not None, done.stdout
    assert found.group(2) == run_id_in(done.stdout)


def test_open_opens_the_page_and_keeps_it_up_until_ctrl_c(tmp_path: Path) -> None:
    """With --open, the browser is given the run's page; after the run (its summary
    printed), the page and the run's data are still served, until SIGINT ends the command
    with the run's status."""
    seen = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" > {seen}\n')
    browser.chmod(browser.stat().st_mode | stat.S_IXUSR)
    write_work(tmp_path / "wf.yaml", units=2)
    proc = start_simrun(
        "run", "wf.yaml", "--plugins", WORK, "--open",
        cwd=tmp_path, env=clean_env(BROWSER=str(browser)),
    )  # fmt: skip
    output = Output(proc)
    try:
        output.wait_for(lambda text: "the dashboard stays up" in text, timeout_s=120)
        assert proc.poll() is None, output.text()
        so_far = output.text(timeout_s=0.1)
        assert so_far.index("succeeded in") < so_far.index("the dashboard stays up")
        found = URL_LINE.search(output.text(timeout_s=0.1))
        assert found is not None
        url, run_id = found.group(1), found.group(2)
        assert seen.read_text().strip() == url
        base = url.split("#", 1)[0]
        page = httpx.get(base, timeout=10)
        assert page.status_code == 200
        assert "<script" in page.text
        assert httpx.get(f"{base}runs/{run_id}", timeout=10).json()["state"] == "succeeded"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0, output.text()
    finally:
        stop_process(proc)


def test_the_service_prints_its_dashboard_and_serves_it(tmp_path: Path, redis_url: str) -> None:
    """`simrun service` prints the address of its web app, which answers with the page
    (without the token: the page holds no data) while the data routes need the token."""
    port = free_port()
    svc = start_simrun(
        "service", "--port", str(port), "--redis-url", redis_url, "--token", "t0ken",
        "--prefix", key_prefix("dash"), "--store", str(tmp_path / "store"), cwd=tmp_path,
    )  # fmt: skip
    output = Output(svc)
    line = f"dashboard http://127.0.0.1:{port}/"
    try:
        output.wait_for(lambda text: line in text, timeout_s=30)
        assert line in output.text(timeout_s=0.1)
        page = httpx.get(f"http://127.0.0.1:{port}/", timeout=10)
        assert page.status_code == 200
        assert "<script" in page.text
        assert httpx.get(f"http://127.0.0.1:{port}/dashboard/runs", timeout=10).status_code == 401
    finally:
        stop_process(svc)
