"""``psych serve``'s app on a loopback port for tests that need its A2A routes (the peer
push route among them): ``serve_app(client, tokens=...)`` yields its base URL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn

from psych_runtime.activities.tokens import TokenStore
from psych_runtime.workers.serve import ApiKey, AuthSettings, ServeSettings, create_app
from psych_runtime.workflows import PsychClient


@asynccontextmanager
async def serve_app(
    client: PsychClient,
    *,
    tokens: TokenStore,
    tenant: str = "acme",
    query_timeout_seconds: float = 10.0,
) -> AsyncIterator[str]:
    """The app over ``client``, keeping push records in ``tokens`` (the workers' store),
    accepting the API key ``acme-key-e2e`` for ``tenant``, waiting ``query_timeout_seconds``
    for a Run's worker; its base URL for the block."""
    settings = ServeSettings(
        client,
        AuthSettings((ApiKey.of("acme-key-e2e", tenant, "alice"),)),
        push_tokens=tokens,
        query_timeout_seconds=query_timeout_seconds,
    )
    app = create_app(settings)
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
        await task  # its shutdown closes its push registry
