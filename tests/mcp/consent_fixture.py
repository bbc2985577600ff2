"""A consent server (``tests.mcp.consent_server``) with psych's OAuth callback served
beside it on loopback: what the consent tests and the recorded consent shapes share, and
the browser that follows an authorization URL to the callback."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn

from psych_runtime.activities.tokens import TokenStore
from psych_runtime.workers import oauth_callback_app
from psych_runtime.workflows import PsychClient
from tests.mcp.fixture import Transport
from tests.mcp.oauth_fixture import OAuthMcpServer, start_oauth_server

CLIENT = "psych-agent"
"""The public client the consent server has pre-registered."""


@dataclass
class Consenting:
    """A consent server and the callback its redirect lands on."""

    server: OAuthMcpServer
    callback_url: str


@asynccontextmanager
async def consenting(
    transport: Transport,
    client: PsychClient,
    store: TokenStore,
    *,
    as_host: str = "127.0.0.1",
    extra: tuple[str, ...] = (),
) -> AsyncIterator[Consenting]:
    """Serve psych's callback (resuming Runs through ``client``, the workers' ``store``)
    and start a consent server whose client redirects to it (its issuer named
    ``as_host``; ``extra``: further arguments, ``--registration``); stop both on leaving."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/oauth/callback"
    web = uvicorn.Server(
        uvicorn.Config(oauth_callback_app(client, store), log_level="warning", lifespan="off")
    )
    serving = asyncio.create_task(web.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(30):
            while not web.started:  # noqa: ASYNC110 (uvicorn offers no started event)
                await asyncio.sleep(0.01)
        server = start_oauth_server(
            transport,
            {CLIENT: url},
            module="tests.mcp.consent_server",
            as_host=as_host,
            extra=extra,
        )
        try:
            yield Consenting(server, url)
        finally:
            server.stop()
    finally:
        web.should_exit = True
        await serving
        sock.close()


async def follow(url: str) -> httpx.Response:
    """Open ``url`` as a person's browser would: the authorization server's ``/authorize``
    consents at once and redirects to psych's callback, whose page is the answer."""
    async with httpx.AsyncClient(follow_redirects=True, timeout=60) as browser:
        return await browser.get(url)


def record_files(root: Path) -> list[Path]:
    """The records of the local token store at ``root`` (not the empty lock files its
    updates hold, ``<shard>/.lock``)."""
    return [p for p in root.rglob("*") if p.is_file() and p.name != ".lock"]
