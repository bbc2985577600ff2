"""The app under a real uvicorn on loopback: what it made is closed when it stops; bodies
are bounded, and a request its headers refuse is refused before its body is read."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from psych_runtime.workers.serve import SMALL_BODY_BYTES, Caller
from psych_runtime.workers.serve.a2a import MemoryTokenStore, a2a_routes
from psych_runtime.workflows import PsychClient

from ._app import ACME_KEY, bearer, served


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
