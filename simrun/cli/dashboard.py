"""The dashboard's address as `simrun run` prints it (never with the token: URLs get
logged), and ``--open``: the run's page opened in the user's browser."""

from __future__ import annotations

import webbrowser
from urllib.parse import quote


def dashboard_url(service_url: str, run_id: str | None = None) -> str:
    """The page of ``run_id`` (the runs list without one) on the service at
    ``service_url``; the page routes with the fragment, which no server logs."""
    base = service_url.rstrip("/") + "/"
    return base if run_id is None else f"{base}#/runs/{quote(run_id, safe='')}"


def open_dashboard(url: str) -> str | None:
    """Open ``url`` in the user's browser; None when done, else a line saying it could not
    be (no browser here: the user opens the printed URL)."""
    try:
        opened = webbrowser.open(url, new=2)
    except webbrowser.Error as exc:
        return f"could not open a browser ({exc}): open {url}"
    return None if opened else f"no browser found here: open {url}"
