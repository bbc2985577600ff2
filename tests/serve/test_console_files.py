"""The console's files as an app serves them: the page, its modules, the security headers,
revalidation, and a clear 404 for anything else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette

from psych_runtime.workers.serve.console import CONSOLE_CSP, console_routes

from ._app import api


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    app = Starlette(routes=[console_routes()])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://console.test") as client:
        yield client


async def test_the_page_and_its_modules_carry_the_policy(http: httpx.AsyncClient) -> None:
    page = await http.get("/console/")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["content-security-policy"] == CONSOLE_CSP
    assert "script-src 'self'" in CONSOLE_CSP and "unsafe-inline" not in CONSOLE_CSP
    assert page.headers["x-content-type-options"] == "nosniff"
    assert '<script type="module" src="console.js">' in page.text
    module = await http.get("/console/console.js")
    assert module.headers["content-type"] == "text/javascript; charset=utf-8"
    assert module.headers["content-security-policy"] == CONSOLE_CSP
    assert (await http.get("/console/console.css")).headers["content-type"].startswith("text/css")


async def test_without_the_slash_it_redirects_to_the_page(http: httpx.AsyncClient) -> None:
    answer = await http.get("/console")
    assert answer.status_code in (307, 308)
    assert answer.headers["location"] == "http://console.test/console/"


async def test_an_unchanged_file_is_not_sent_again(http: httpx.AsyncClient) -> None:
    first = await http.get("/console/run.js")
    again = await http.get("/console/run.js", headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304
    assert again.content == b""
    other = await http.get("/console/run.js", headers={"If-None-Match": '"stale"'})
    assert other.status_code == 200 and other.content == first.content


async def test_an_unknown_file_is_a_problem_naming_it(http: httpx.AsyncClient) -> None:
    for path in ("/console/nope.js", "/console/_routes.py", "/console/__init__.py"):
        answer = await http.get(path)
        assert answer.status_code == 404, path
        assert answer.headers["content-type"] == "application/problem+json"
    # A path out of the folder matches no route at all (the app's own 404 answers it).
    assert (await http.get("/console/..%2F_routes.py")).status_code == 404
    assert "'nope.js'" in (await http.get("/console/nope.js")).json()["detail"]


def test_every_module_the_page_imports_is_shipped() -> None:
    """Each ``import ... from "./x.js"`` names a file of the package, and the whole console
    stays small (the issue asks for fast to load)."""
    folder = resources.files("psych_runtime.workers.serve.console").joinpath("static")
    files = {entry.name: entry.read_text() for entry in folder.iterdir()}
    imported = {
        line.split('"./')[1].split('"')[0]
        for text in files.values()
        for line in text.splitlines()
        if line.startswith("import ") and '"./' in line
    }
    assert imported and imported <= set(files)
    assert sum(len(text.encode()) for text in files.values()) < 60_000
    for name, text in files.items():
        assert "innerHTML" not in text, name


async def test_create_app_serves_the_console_without_a_credential(tmp_path: Path) -> None:
    """The page is public (it holds no data; every API call it makes carries the key)."""
    async with api(tmp_path) as http:
        page = await http.get("/console/")
        assert page.status_code == 200
        assert page.headers["content-security-policy"] == CONSOLE_CSP
        assert (await http.get("/console")).headers["location"].endswith("/console/")
        assert (await http.get("/v1/runs")).status_code == 401
        paths = (await http.get("/openapi.json")).json()["paths"]
        assert not [path for path in paths if path.startswith("/console")]
