"""Serves the web console: static files (HTML, JS, CSS, SVG) from this package, no CDN.

The console is a single page (`/console/`) that calls the public `/v1` API with the API key the
user typed at login, so it sees exactly what that key may see: isolation is the API's. Pages are
addressed by the URL's fragment (`/console/#/instances/i-…`), so the server has one page to serve.
`/` redirects to the console.
"""

from __future__ import annotations

import re
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse

from lowcostgpu.domain.errors import NotFound

STATIC = Path(__file__).parent / "static"
NAME = re.compile(r"^[a-z0-9_-]+\.(html|js|css|svg)$")  # no path separators: nothing outside
MEDIA_TYPES = {
    "html": "text/html; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "svg": "image/svg+xml",
}
# Everything comes from this server (no CDN, no inline script); pages are not framed elsewhere.
HEADERS = {
    "cache-control": "no-cache",
    "content-security-policy": (
        "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "x-content-type-options": "nosniff",
}

router = APIRouter(include_in_schema=False)


@router.get("/")
def root() -> RedirectResponse:
    return RedirectResponse("/console/", status_code=307)


@router.get("/console")
def console_no_slash() -> RedirectResponse:
    return RedirectResponse("/console/", status_code=307)


@router.get("/console/")
def index() -> FileResponse:
    return asset("index.html")


@router.get("/console/{name}")
def asset(name: str) -> FileResponse:
    """One of the console's files; anything else is a 404."""
    found = NAME.match(name)
    path = STATIC / name
    if found is None or not path.is_file():
        raise NotFound(f"no console file {name}", hint="open /console/")
    return FileResponse(path, media_type=MEDIA_TYPES[found.group(1)], headers=HEADERS)
