"""An MCP server that speaks only the 2026-07-28 protocol, run as its own process on loopback.

    python -m tests.mcp.modern_server [--list-ttl-ms N] [--list-scope public|private]

Built with the official ``mcp`` SDK's ``MCPServer`` over streamable HTTP at ``/mcp``, in
front of which a guard refuses every request of the handshake era (no
``MCP-Protocol-Version`` header, or a handshake-era one): JSON-RPC error -32022
(unsupported protocol version) naming ``2026-07-28`` as the one it supports, as a server
that dropped the ``initialize`` handshake answers. So a client must use ``server/discover``
and stateless requests (no session id). It prints ``port <N>`` once it listens.

Tools:

- ``echo(text)`` read-only: returns ``text``.
- ``order(item)`` (a write, not idempotent): answers the first request with an
  ``input_required`` result (one form elicitation, key ``quantity``, asking how many, and a
  ``requestState``); a retry carrying ``inputResponses`` records the order and returns
  ``ordered <n> x <item>``; a declined form returns ``not ordered``.

``--list-ttl-ms`` / ``--list-scope`` set ``ttlMs`` / ``cacheScope`` of ``tools/list`` results
(SDK ``CacheHint``; without them the SDK's defaults, 0 and ``private``).

Control surface (plain JSON, same port): ``GET /control/state`` -> ``refused`` (handshake-era
requests refused), ``lists`` (``tools/list`` requests), ``calls`` (tool -> ``tools/call``
requests, every round), ``orders`` (each completed order), ``responses`` (each round's
``inputResponses`` and ``requestState`` as received), ``bearers`` (each request's bearer
token, in order); ``POST /control/reset`` forgets them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from mcp.server.caching import CacheableMethod, CacheHint
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import (
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    ToolAnnotations,
)
from mcp_types import UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]

QUANTITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"quantity": {"type": "integer", "description": "How many to order."}},
    "required": ["quantity"],
}


@dataclass
class State:
    """What the server saw, for the control surface."""

    refused: int = 0
    lists: int = 0
    calls: Counter[str] = field(default_factory=Counter)
    orders: list[dict[str, Any]] = field(default_factory=list)
    responses: list[dict[str, Any]] = field(default_factory=list)
    bearers: list[str] = field(default_factory=list)

    def reset(self) -> None:
        self.refused = self.lists = 0
        self.calls.clear()
        self.orders.clear()
        self.responses.clear()
        self.bearers.clear()


def build_server(state: State, hint: CacheHint | None) -> MCPServer:
    """The server with its tools, observing into ``state``."""

    async def observe(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params or {}
        if ctx.method == "tools/list":
            state.lists += 1
        elif ctx.method == "tools/call":
            state.calls[str(params.get("name"))] += 1
        return await call_next(ctx)

    hints: dict[CacheableMethod, CacheHint] = {} if hint is None else {"tools/list": hint}
    server = MCPServer("psych-modern-mcp", middleware=[observe], cache_hints=hints)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def echo(text: str) -> str:
        """Return the text given."""
        return text

    @server.tool()
    def order(item: str, ctx: Context) -> str | InputRequiredResult:
        """Order an item; the server asks how many before it orders."""
        answers = ctx.input_responses
        state.responses.append(
            {
                "responses": None
                if answers is None
                else {key: value.model_dump(mode="json") for key, value in answers.items()},
                "request_state": ctx.request_state,
            }
        )
        answer = None if answers is None else answers.get("quantity")
        if not isinstance(answer, ElicitResult):
            return InputRequiredResult(
                input_requests={
                    "quantity": ElicitRequest(
                        params=ElicitRequestFormParams(
                            message=f"How many {item} should I order?",
                            requested_schema=QUANTITY_SCHEMA,
                        )
                    )
                },
                request_state=json.dumps({"item": item}),
            )
        if answer.action != "accept" or answer.content is None:
            return "not ordered"
        quantity = answer.content.get("quantity")
        state.orders.append({"item": item, "quantity": quantity})
        return f"ordered {quantity} x {item}"

    return server


def control_app(state: State) -> Starlette:
    async def control_state(request: Request) -> Response:
        return JSONResponse(
            {
                "refused": state.refused,
                "lists": state.lists,
                "calls": dict(state.calls),
                "orders": state.orders,
                "responses": state.responses,
                "bearers": state.bearers,
            }
        )

    async def control_reset(request: Request) -> Response:
        state.reset()
        return JSONResponse({"reset": True})

    return Starlette(
        routes=[
            Route("/control/state", control_state, methods=["GET"]),
            Route("/control/reset", control_reset, methods=["POST"]),
        ]
    )


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def modern_only(app: Asgi, control: Asgi, state: State) -> Asgi:
    """Refuse handshake-era requests; route ``/control/`` to the control surface."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        if scope["path"].startswith("/control/"):
            await control(scope, receive, send)
            return
        bearer = _header(scope, b"authorization")
        if bearer is not None:
            state.bearers.append(bearer.removeprefix("Bearer "))
        version = _header(scope, b"mcp-protocol-version")
        if version in MODERN_PROTOCOL_VERSIONS:
            await app(scope, receive, send)
            return
        state.refused += 1
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            request_id = json.loads(body).get("id") if body else None
        except (ValueError, AttributeError):
            request_id = None
        error = {
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {
                "code": UNSUPPORTED_PROTOCOL_VERSION,
                "message": "Unsupported protocol version: this server speaks 2026-07-28 only",
                "data": {"supported": list(MODERN_PROTOCOL_VERSIONS), "requested": version},
            },
        }
        await JSONResponse(error, status_code=400)(scope, receive, send)

    return guarded


async def serve(hint: CacheHint | None) -> None:
    """Serve until killed; print ``port <N>`` once listening."""
    state = State()
    server = build_server(state, hint)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    app = modern_only(server.streamable_http_app(stateless_http=True), control_app(state), state)
    web = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    serving = asyncio.create_task(web.serve(sockets=[sock]))
    while not web.started:
        if serving.done():
            await serving
            return
        await asyncio.sleep(0.01)
    print(f"port {sock.getsockname()[1]}", flush=True)
    await serving


def main() -> None:
    """Parse the flags and serve."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list-ttl-ms", type=int, default=None)
    parser.add_argument("--list-scope", choices=["public", "private"], default=None)
    args = parser.parse_args()
    hint = None
    if args.list_ttl_ms is not None or args.list_scope is not None:
        hint = CacheHint(ttl_ms=args.list_ttl_ms or 0, scope=args.list_scope or "private")
    asyncio.run(serve(hint))


if __name__ == "__main__":
    main()
