"""The web app's files (the page and its bundle, built from ``web/``), served without the
token."""

from __future__ import annotations

import asyncio
import mimetypes
from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, HTMLResponse

#: Where the built bundle lives inside the package.
STATIC = Path(__file__).resolve().parent / "static"
#: The URL prefix of the bundle's files (scripts, styles).
ASSETS_PREFIX = "/assets/"
#: The page's own paths (the document and its icon).
PAGE_PATHS = frozenset({"/", "/index.html", "/favicon.svg"})

#: The page of an installation without its bundle.
MISSING = (
    "<!doctype html><title>simrun</title><p>The web app's bundle is missing from this "
    "installation: build it with <code>cd web &amp;&amp; npm ci &amp;&amp; npm run build"
    "</code>.</p>"
)

router = APIRouter(include_in_schema=False)


def is_static(path: str) -> bool:
    """Whether ``path`` is one of the page's files (served without the token)."""
    return path in PAGE_PATHS or path.startswith(ASSETS_PREFIX)


def bundle_files(root: Path) -> dict[str, Path]:
    """The files under ``root``/assets by their path there ("index-1a2b.js"), each inside it
    once resolved (blocking)."""
    base = (root / "assets").resolve()
    if not base.is_dir():
        return {}
    return {
        path.relative_to(base).as_posix(): path
        for path in base.rglob("*")
        if path.is_file() and path.resolve().is_relative_to(base)
    }


def asset_path(root: Path, name: str) -> Path | None:
    """The file ``name`` of the bundle under ``root``/assets, or None. ``name`` is looked up
    among the bundle's own files, never opened as a path: a name with a NUL, a ``..``, an
    encoded slash or past the file system's length finds nothing (blocking)."""
    return bundle_files(root).get(name)


@router.get("/", response_model=None)
@router.get("/index.html", response_model=None)
async def page() -> FileResponse | HTMLResponse:
    index = STATIC / "index.html"
    if not index.is_file():
        return HTMLResponse(MISSING, status_code=503)
    return FileResponse(index, media_type="text/html", headers={"Cache-Control": "no-cache"})


@router.get("/favicon.svg")
async def favicon() -> FileResponse:
    icon = STATIC / "favicon.svg"
    if not icon.is_file():
        raise HTTPException(status_code=404, detail="no icon")
    return FileResponse(icon, media_type="image/svg+xml")


@router.get("/assets/{name:path}")
async def asset(name: str) -> FileResponse:
    found = await asyncio.to_thread(asset_path, STATIC, name)
    if found is None:
        shown = name if len(name) <= 80 else f"{name[:80]}..."
        raise HTTPException(status_code=404, detail=f"no asset {shown!r}")
    media = mimetypes.guess_type(found.name)[0] or "application/octet-stream"
    # The bundle's names carry a hash of their content: a name is never reused.
    return FileResponse(
        found, media_type=media, headers={"Cache-Control": "public, max-age=31536000, immutable"}
    )
