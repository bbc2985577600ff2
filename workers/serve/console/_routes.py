"""Serving the console's files: a fixed set of static files shipped as package data, read
once, each answer with a Content-Security-Policy that allows only the console's own
scripts, styles and API calls (no inline script, nothing from another origin)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

CONSOLE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""The Content-Security-Policy of every console response."""

MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}

_HEADERS = {
    "Content-Security-Policy": CONSOLE_CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidated on every load (an ETag answer is a 304 without a body), so a new release
    # of the console is never mixed with modules cached from the last one.
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True)
class _Asset:
    body: bytes
    media_type: str
    etag: str


def _load_assets() -> dict[str, _Asset]:
    folder = resources.files("psych_runtime.workers.serve.console").joinpath("static")
    assets: dict[str, _Asset] = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in MEDIA_TYPES:
            body = entry.read_bytes()
            etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
            assets[entry.name] = _Asset(body, MEDIA_TYPES[suffix], etag)
    if "index.html" not in assets:
        raise RuntimeError(f"the console's files are missing from {folder}: no index.html")
    return assets


def _problem(status: int, title: str, detail: str) -> JSONResponse:
    return JSONResponse(
        {"type": "about:blank", "title": title, "status": status, "detail": detail},
        status_code=status,
        media_type="application/problem+json",
        headers=_HEADERS,
    )


def console_routes(path: str = "/console") -> Mount:
    """The console as one Starlette route to include in an app (``app.routes.append``):
    ``<path>/`` is the page, ``<path>/<file>`` its scripts and styles. The page calls the
    API at ``../v1/`` relative to itself, so the app may itself be mounted under a prefix.

    Raises:
        RuntimeError: the package was installed without the console's files.
    """
    assets = _load_assets()

    async def asset(request: Request) -> Response:
        name = request.path_params.get("name", "index.html")
        found = assets.get(name)
        if found is None:
            return _problem(404, "Not Found", f"the console has no file {name!r}")
        headers = {**_HEADERS, "ETag": found.etag}
        if found.etag in request.headers.get("if-none-match", ""):
            return Response(status_code=304, headers=headers)
        return Response(found.body, media_type=found.media_type, headers=headers)

    # ``<path>`` without the slash is redirected to ``<path>/`` by the app's router
    # (``redirect_slashes``), so the page's relative URLs resolve under it.
    return Mount(path, routes=[Route("/", asset), Route("/{name}", asset)])
