"""`simrun.client.Client` against a real HTTP server on loopback: the typed views it parses,
one clear `ClientError` naming the route when an answer is not what the route sends, and
the error it raises by the code of an error answer (never by its text)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from simrun.client import Client, ClientError, Rejected, StreamBroken, UnknownKey
from simrun.core.views import ErrorCode
from simrun.workflow import Problem

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
#: The error answers per path: status and body.
ERRORS: dict[str, tuple[int, Any]] = {
    "/runs/gone": (404, {"code": "unknown_run", "detail": "no such run here"}),
    "/runs/gone/events": (404, {"code": "unknown_run", "detail": "no such run here"}),
    "/runs/sick/events": (503, {"code": "unavailable", "detail": "Redis unreachable"}),
    "/runs/busy/failures": (409, {"code": "run_state", "detail": "it is busy"}),
    "/runs/proxy": (404, {"detail": "there is no run 'proxy'"}),  # no code: not the service's
    "/resources/a/b": (404, {"code": "unknown_key", "detail": "nothing of a/b"}),
    "/runs": (422, {"code": "rejected", "detail": "2 problems", "errors": [{"message": "m"}]}),
}


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status, answer = ERRORS.get(self.path, (200, ANSWERS.get(self.path)))
        if answer is None:
            status, answer = 404, {"detail": "not found"}
        body = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

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


def test_the_error_of_an_answer_follows_its_code(url: str) -> None:
    """The client raises by the code of the answer, whatever its text says: an unknown run
    (its line alone), an unknown key (`UnknownKey`), a refused workflow (`Rejected` with its
    problems), a conflict (the route, the status and the line); an answer without a code is
    not the service's and is taken for nothing more, whatever its text."""
    with Client(url) as client:
        with pytest.raises(ClientError) as gone:
            client.run("gone")
        assert (str(gone.value), gone.value.code) == ("no such run here", ErrorCode.UNKNOWN_RUN)
        with pytest.raises(UnknownKey, match=r"^nothing of a/b$"):
            client.resource_evidence("a/b")
        with pytest.raises(Rejected) as rejected:
            client.submit("name: x")
        assert rejected.value.problems == [Problem((), "m")]
        with pytest.raises(ClientError) as busy:
            client.failures("busy")
        assert str(busy.value) == "GET /runs/busy/failures: 409: it is busy"
        assert busy.value.code is ErrorCode.RUN_STATE
        with pytest.raises(ClientError) as proxy:
            client.run("proxy")
        assert proxy.value.code is None
        assert str(proxy.value).startswith("GET /runs/proxy: 404:")


async def test_the_event_stream_is_refused_by_code_and_broken_by_a_failure(url: str) -> None:
    """The stream of an unknown run is refused (`ClientError`, its code), and a service
    that fails (5xx) breaks it (`StreamBroken`: the follower connects again)."""
    with Client(url) as client:
        with pytest.raises(ClientError) as refused:
            await anext(client.events("gone"))
        assert refused.value.code is ErrorCode.UNKNOWN_RUN
        assert not isinstance(refused.value, StreamBroken)
        with pytest.raises(StreamBroken, match="503: Redis unreachable"):
            await anext(client.events("sick"))
