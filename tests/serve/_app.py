"""The API under test without a Temporal server: a lazy client never connects, so only
routes that answer before any Temporal call (auth, bounds, specs, refusals) are driven;
through httpx's ASGI transport (``api``) or a real uvicorn on loopback (``served``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from psych_runtime.activities.tokens import TokenStore
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import TenantPermits, ToolRegistry, VersionStore
from psych_runtime.workers.serve import (
    ApiKey,
    AuthSettings,
    JwtSettings,
    ServeSettings,
    create_app,
)
from psych_runtime.workflows import PsychClient

ACME_KEY = "acme-key-0123456789"
GLOBEX_KEY = "globex-key-9876543210"
KEYS = (ApiKey.of(ACME_KEY, "acme", "ops", publisher=True), ApiKey.of(GLOBEX_KEY, "globex"))


@asynccontextmanager
async def api(
    home: Path,
    *,
    max_body_bytes: int = 64 * 1024,
    registry: ToolRegistry | None = None,
    tokens: TokenStore | None = None,
    jwt: JwtSettings | None = None,
    permits: TenantPermits | None = None,
    versions: VersionStore | None = None,
) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client of the app (ASGI transport), with an acme and a globex API key (and
    JWTs verified as ``jwt`` says; Runs dispatched within ``permits``; Versions in
    ``versions``, else a directory of ``home``)."""
    # Port 9 (discard) on loopback: lazy, so nothing is ever sent there.
    temporal = await Client.connect(
        "127.0.0.1:9", lazy=True, data_converter=pydantic_data_converter
    )
    store = versions or FileVersionStore(home / "versions")
    client = PsychClient(temporal, store=store, registry=registry, permits=permits)
    settings = ServeSettings(
        client, AuthSettings(KEYS, jwt), max_body_bytes=max_body_bytes, tokens=tokens
    )
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as http:
        yield http


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@asynccontextmanager
async def served(
    home: Path,
    *,
    max_body_bytes: int = 64 * 1024,
    push_tokens: TokenStore | None = None,
    versions: VersionStore | None = None,
) -> AsyncIterator[tuple[str, FastAPI]]:
    """The app under a real uvicorn on 127.0.0.1 (a free port), with the acme and globex
    API keys (Versions in ``versions``, else a directory of ``home``): its base URL and the
    app. Stopped after the block."""
    temporal = await Client.connect(
        "127.0.0.1:9", lazy=True, data_converter=pydantic_data_converter
    )
    client = PsychClient(temporal, store=versions or FileVersionStore(home / "versions"))
    settings = ServeSettings(
        client, AuthSettings(KEYS), max_body_bytes=max_body_bytes, push_tokens=push_tokens
    )
    app = create_app(settings)
    async with uvicorn_serving(app) as base:
        yield base, app


@asynccontextmanager
async def uvicorn_serving(app: FastAPI) -> AsyncIterator[str]:
    """``app`` under a real uvicorn on 127.0.0.1 (a free port, its lifespan run): its base
    URL. Stopped after the block, as ``psych serve`` stops on a signal."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
