"""``/assets/<name>`` over the real app (real controller, the token set): a name with a NUL,
a ``..``, an encoded slash, a leading slash or past the file system's name length answers
404 with an `ErrorView`, never 500, and never a file of the package outside the bundle.
The requests go to the ASGI app as a server hands them (``raw_path`` and its decoded
``path``, dot segments left in: httpx would remove them)."""

from __future__ import annotations

import json

import pytest

from simrun.core.views import ErrorCode
from simrun.service import web
from simrun.service.controller import Controller
from simrun.service.routes import create_app
from tests.support.asgi import raw_get

pytestmark = pytest.mark.redis

#: Paths that must find nothing, as they come on the wire.
HOSTILE = [
    "/assets/%00",
    "/assets/x%00y.js",
    "/assets/%00/../../web.py",
    "/assets/../web.py",
    "/assets/../../web.py",
    "/assets/../../../routes/deps.py",
    "/assets/..%2F..%2Fweb.py",
    "/assets/%2e%2e%2f%2e%2e%2fweb.py",
    "/assets/%2E%2E/%2E%2E/web.py",
    "/assets/..%5c..%5cweb.py",
    "/assets/%2Fetc%2Fpasswd",
    "/assets//etc/passwd",
    "/assets/../index.html",
    "/assets/.",
    "/assets/..",
    "/assets/",
    "/assets/" + "a" * 300,
    "/assets/" + "a" * 5000,
    "/assets/" + "/".join(["b" * 250] * 30),
    "/assets/" + "%C3%A9" * 200,
    "/assets/%ff%fe",
]


async def test_hostile_asset_names_answer_404_and_serve_no_file(controller: Controller) -> None:
    """Every path of `HOSTILE` answers 404 NOT_FOUND (an `ErrorView` in one line), without
    the token (the bundle is open), and no answer holds a byte of a package file; a real
    file of the bundle is still served."""
    app = create_app(controller, token="assets-token")
    package = [p.read_bytes() for p in web.STATIC.parent.rglob("*.py")][:50]
    for raw in HOSTILE:
        status, body = await raw_get(app, raw)
        assert status == 404, (raw[:60], status, body[:200])
        answer = json.loads(body)
        assert answer["code"] == ErrorCode.NOT_FOUND, raw[:60]
        assert "\n" not in answer["detail"]
        assert len(answer["detail"]) < 200
        assert not any(body == text for text in package)
    bundle = sorted(p for p in (web.STATIC / "assets").iterdir() if p.is_file())
    assert bundle, "the bundle is built into simrun/service/static"
    status, body = await raw_get(app, f"/assets/{bundle[0].name}")
    assert (status, body) == (200, bundle[0].read_bytes())
