"""The app under a real uvicorn on loopback: what it made is closed when it stops; bodies
are bounded, and a request its headers refuse is refused before its body is read, its
client getting the answer (not a reset connection)."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from psych_runtime.activities.blobs import S3BlobStore
from psych_runtime.activities.tokens import S3TokenStore, TokenKey
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import Version
from psych_runtime.workers.cli._parser import build_parser
from psych_runtime.workers.cli._serve_command import serve_settings
from psych_runtime.workers.serve import SMALL_BODY_BYTES, Caller, create_app
from psych_runtime.workers.serve.a2a import MemoryTokenStore, a2a_routes
from psych_runtime.workflows import PsychClient
from tests._s3_server import S3_ENV, s3_server

from ._app import ACME_KEY, KEYS, bearer, served, uvicorn_serving


async def test_the_app_closes_the_push_registry_it_made_when_the_server_stops(
    tmp_path: Path,
) -> None:
    async with served(tmp_path) as (base, app), httpx.AsyncClient() as http:
        card = await http.get(f"{base}/a2a/support/.well-known/agent-card.json")
        assert card.status_code == 404  # served: no agent published
        assert not app.state.a2a_pushes.closed
    # Closed by the app's shutdown: its tasks' push notifications are left to another
    # process at once, and its egress clients are closed.
    assert app.state.a2a_pushes.closed


def holds_client(store: S3BlobStore | S3TokenStore) -> bool:
    """Whether ``store`` holds an open client (``aclose`` lets it go)."""
    return store._client is not None


async def test_psych_serve_closes_its_s3_stores_when_the_server_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # From a review: the S3 blob store psych serve opens for reports' inputs (and its S3
    # token store) were never closed: their connection pools outlived the server.
    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PSYCH_SETTINGS", raising=False)
    monkeypatch.delenv("PSYCH_BLOB_DIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))  # no global settings file
    monkeypatch.delenv("PSYCH_TOKEN_DIR", raising=False)  # the bucket's, as a fleet's
    monkeypatch.setenv(
        "PSYCH_SERVE_API_KEYS", json.dumps([{"sha256": KEYS[0].sha256, "tenant": "acme"}])
    )

    async def lazy(args: argparse.Namespace) -> Client:  # nothing is ever sent to port 9
        return await Client.connect(
            "127.0.0.1:9", lazy=True, data_converter=pydantic_data_converter
        )

    async with s3_server() as s3:
        monkeypatch.setenv("PSYCH_BLOB_URL", s3.url(await s3.new_bucket(versioned=False)))
        args = build_parser().parse_args(["serve", "--store", str(tmp_path / "versions")])
        settings = await serve_settings(args, lazy)
        blobs, tokens = settings.client.blobs, settings.tokens
        assert isinstance(blobs, S3BlobStore) and isinstance(tokens, S3TokenStore)
        async with uvicorn_serving(create_app(settings)) as base, httpx.AsyncClient() as http:
            assert (await http.get(f"{base}/livez")).status_code == 200
            # Each store opens its client (a connection pool) on first use, as a report's
            # inputs and the OAuth callback use them.
            await blobs.put(b"what a model call was sent")
            assert await tokens.get(TokenKey("acme", None, "https://as.test", "c", "r")) is None
            # (moto's server closes each connection after its answer, so the pools are
            # seen through the stores' own state: a client held is one not closed.)
            assert holds_client(blobs) and holds_client(tokens)
        assert not holds_client(blobs) and not holds_client(tokens)


def test_the_a2a_mount_is_given_its_push_registry_and_makes_none() -> None:
    # A registry it made would be one nobody closes (nothing runs at a mount's shutdown).
    async def caller_for(header: str | None) -> Caller:
        raise AssertionError("never called")

    client = PsychClient.__new__(PsychClient)
    with pytest.raises(TypeError, match="pushes"):
        a2a_routes(  # type: ignore[call-arg]
            client, caller_for, jwt=False, query_timeout=timedelta(seconds=1)
        )


async def status_unsent(base: str, path: str, length: int, headers: dict[str, str]) -> str:
    """The status line the server answers a POST to ``path`` declaring a body of
    ``length`` bytes, none of which is sent: an answer at all shows it was decided
    before the body was read (a server reading it first would wait for it)."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        head = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        head += [f"Content-Length: {length}", "Content-Type: application/json", "", ""]
        writer.write("\r\n".join(head).encode())
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), timeout=5)
        return line.decode().strip()
    finally:
        writer.close()


async def test_a_request_is_refused_before_its_body_is_read_when_its_headers_decide(
    tmp_path: Path,
) -> None:
    acme = bearer(ACME_KEY)
    small = SMALL_BODY_BYTES + 1
    async with served(tmp_path, max_body_bytes=4 * 1024 * 1024, push_tokens=MemoryTokenStore()) as (
        base,
        _,
    ):
        refused = {
            # No credential: refused before the body, on every route that takes one.
            "publish": await status_unsent(base, "/v1/versions", 1000, {}),
            # A client waiting to be asked for its body is answered, never asked.
            "expecting": await status_unsent(
                base, "/v1/versions", 1000, {"Expect": "100-continue"}
            ),
            "validate": await status_unsent(base, "/v1/validate", 1000, bearer("wrong")),
            "a2a": await status_unsent(base, "/a2a/support/", 1000, {}),
            "a2a rest": await status_unsent(base, "/a2a/support/message:send", 1000, {}),
            "push": await status_unsent(base, "/a2a-push/acme/0123", 1000, {}),
            # Small bodies are bounded far below the app's 4 MiB, before anything is read.
            "steer": await status_unsent(base, "/v1/runs/r-1/steer", small, acme),
            "approve": await status_unsent(base, "/v1/runs/r-1/approve", small, acme),
            "peer push": await status_unsent(base, "/a2a-push/acme/0123", small, {}),
        }
    assert refused == {
        "publish": "HTTP/1.1 401 Unauthorized",
        "expecting": "HTTP/1.1 401 Unauthorized",
        "validate": "HTTP/1.1 401 Unauthorized",
        "a2a": "HTTP/1.1 401 Unauthorized",
        "a2a rest": "HTTP/1.1 401 Unauthorized",
        "push": "HTTP/1.1 403 Forbidden",
        "steer": "HTTP/1.1 413 Request Entity Too Large",
        "approve": "HTTP/1.1 413 Request Entity Too Large",
        "peer push": "HTTP/1.1 413 Request Entity Too Large",
    }


async def test_a_client_sending_past_the_bound_gets_the_413_then_the_connection_closes(
    tmp_path: Path,
) -> None:
    """An HTTP/1.1 client sends its whole body before it reads the answer: the server
    reads the rest of a refused body (and throws it away) so the client gets the 413
    problem rather than a reset connection, then closes the connection."""
    bound = 64 * 1024

    async def chunked() -> AsyncIterator[bytes]:
        for _ in range(64):  # 1 MiB, no Content-Length
            yield b"x" * (16 * 1024)

    json_headers = {**bearer(ACME_KEY), "content-type": "application/json"}
    async with served(tmp_path, max_body_bytes=bound) as (base, _):
        async with httpx.AsyncClient() as http:
            streamed = await http.post(
                f"{base}/v1/validate", content=chunked(), headers=json_headers
            )
            declared = await http.post(
                f"{base}/v1/validate", content=b"x" * (1024 * 1024), headers=json_headers
            )
        # The same on the wire: every byte sent, then the answer, then the end.
        host, port = base.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            head = [
                "POST /v1/validate HTTP/1.1",
                f"Host: {host}:{port}",
                f"Authorization: Bearer {ACME_KEY}",
                "Content-Type: application/json",
                "Transfer-Encoding: chunked",
                "",
                "",
            ]
            writer.write("\r\n".join(head).encode())
            async for chunk in chunked():
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            wire = await asyncio.wait_for(reader.read(), timeout=10)  # to the end: closed
        finally:
            writer.close()
    for answer in (streamed, declared):
        assert answer.status_code == 413, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.headers["connection"] == "close"
        assert answer.json()["max_bytes"] == bound
    assert f"over {bound} bytes" in streamed.json()["detail"]
    assert "declares 1048576 bytes" in declared.json()["detail"]
    status, _, rest = wire.partition(b"\r\n")
    assert status == b"HTTP/1.1 413 Request Entity Too Large"
    assert rest.endswith(b'"max_bytes": 65536}')


async def test_an_unexpected_failure_is_a_500_problem_naming_nothing_of_the_server(
    tmp_path: Path,
) -> None:
    # The version store fails under the server with an error no route maps (a store's
    # own bug; a disk error is a mapped StoreUnavailable since 37a79e4). It was
    # Starlette's text/plain "Internal Server Error", the one answer of the API that is
    # not a problem.
    class Broken(FileVersionStore):
        def get(self, version_hash: str) -> Version:
            raise RuntimeError(f"a bug reading {self.root} for {version_hash}")

    body = {"version": "sha256:" + "0" * 64, "input": "hello"}
    broken = Broken(tmp_path / "versions")
    async with (
        served(tmp_path, versions=broken) as (base, _),
        httpx.AsyncClient(base_url=base) as http,
    ):
        answer = await http.post("/v1/runs", json=body, headers=bearer(ACME_KEY))
        after = await http.get("/v1/runs/psych-globex-x", headers=bearer(ACME_KEY))
    assert answer.status_code == 500, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["type"] == "urn:psych:problem:internal"
    assert problem["status"] == 500
    assert "log" in problem["detail"]
    assert str(tmp_path) not in answer.text
    assert after.status_code == 404  # the server goes on serving
