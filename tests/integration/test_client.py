"""`simrun.client.Client` against a real HTTP server on loopback: the typed views it parses,
and one clear `ClientError` naming the route when an answer is not what the route sends."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from simrun.client import Client, ClientError

#: What the server answers per path (the JSON of the body).
ANSWERS: dict[str, Any] = {
    "/runs?limit=50": [
        {
            "id": "r1",
            "name": None,
            "state": "running",
            "message": "",
            "created_s": 1.0,
            "updated_s": 2.0,
            "finished_s": None,
        },
    ],
    "/runs/r1": {"id": "r1", "state": "running"},  # no times: not a run's view
    "/runs/r1/failures": [{"task": "sweep", "unit": 3, "error": "boom"}],
}


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps(ANSWERS.get(self.path, {"detail": "not found"})).encode()
        self.send_response(200 if self.path in ANSWERS else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # the base's name
        return


@pytest.fixture
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_answers_are_parsed_into_views(url: str) -> None:
    """The runs and the failures come back as typed views, defaults filled in."""
    with Client(url) as client:
        (summary,) = client.runs()
        assert (summary.id, summary.state, summary.finished_s, summary.model) == (
            "r1",
            "running",
            None,
            "",
        )
        (failure,) = client.failures("r1")
        assert (failure.task, failure.unit, failure.error, failure.attempt) == (
            "sweep",
            3,
            "boom",
            0,
        )


def test_an_answer_that_is_not_a_view_is_one_client_error(url: str) -> None:
    """A run's answer without the fields of a run's view is refused with the route named
    and the missing field, not a traceback of the parser."""
    with Client(url) as client, pytest.raises(ClientError) as caught:
        client.run("r1")
    message = str(caught.value)
    assert message.startswith("GET /runs/r1: the answer is not understood:")
    assert "created_s" in message
