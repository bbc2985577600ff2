"""``psych serve``'s probes, unauthenticated (an orchestrator's probe holds no API key):

- ``GET /livez``: 200 while the process serves requests.
- ``GET /readyz``: 200 when the Temporal server answers its health check within
  2 s (``fleet.server_ready``; every ``/v1`` route needs it), else 503: a load balancer sends
  no callers to an instance that would answer each with a 503 of its own.

Both answer ``ok``/``not ok`` in plain text, as a worker's ``--health-port`` does.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse
from temporalio.client import Client

from psych_runtime.workers.fleet import server_ready


def health_routes(temporal: Client) -> APIRouter:
    """``/livez`` and ``/readyz``, answering from ``temporal``'s server."""
    router = APIRouter(include_in_schema=False)

    @router.get("/livez")
    async def livez() -> PlainTextResponse:
        return PlainTextResponse("ok\n")

    @router.get("/readyz")
    async def readyz() -> PlainTextResponse:
        ready = await server_ready(temporal)
        return PlainTextResponse("ok\n" if ready else "not ok\n", 200 if ready else 503)

    return router
