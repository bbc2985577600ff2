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
token, in order), ``mismatched`` (``tools/call`` requests refused with ``HEADER_MISMATCH``),
``lists_failed``; ``POST /control/reset`` forgets them and ends every fault below.

Faults, each set by a ``POST`` and ended by ``/control/reset``:

- ``/control/mismatch {"calls": n}``: the next ``n`` ``tools/call`` requests are refused with
  JSON-RPC error -32020 (``HEADER_MISMATCH``, HTTP 400), as the SDK's transport refuses a
  request whose headers disagree with its body: before any tool runs.
- ``/control/lists {"pass": k, "fail": n, "delay_seconds": s}``: after ``k`` more
  ``tools/list`` requests served, the next ``n`` are answered with JSON-RPC error -32603
  (internal error); every ``tools/list`` waits ``s`` seconds before it is served (each
  key optional, 0 by default).
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
from mcp_types import HEADER_MISMATCH, INTERNAL_ERROR, UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.mcp.refusals import replaying

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
    mismatched: int = 0
    lists_failed: int = 0
    mismatch_calls: int = 0
    """Faults (``/control/mismatch``, ``/control/lists``): how many to come."""
    lists_to_pass: int = 0
    lists_to_fail: int = 0
    list_delay: float = 0.0

    def reset(self) -> None:
        self.refused = self.lists = self.mismatched = self.lists_failed = 0
        self.mismatch_calls = self.lists_to_pass = self.lists_to_fail = 0
        self.list_delay = 0.0
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
                "mismatched": state.mismatched,
                "lists_failed": state.lists_failed,
            }
        )

    async def control_reset(request: Request) -> Response:
        state.reset()
        return JSONResponse({"reset": True})

    async def control_mismatch(request: Request) -> Response:
        state.mismatch_calls = int((await request.json())["calls"])
        return JSONResponse({"calls": state.mismatch_calls})

    async def control_lists(request: Request) -> Response:
        fault = await request.json()
        state.lists_to_pass = int(fault.get("pass", 0))
        state.lists_to_fail = int(fault.get("fail", 0))
        state.list_delay = float(fault.get("delay_seconds", 0))
        return JSONResponse(fault)

    return Starlette(
        routes=[
            Route("/control/state", control_state, methods=["GET"]),
            Route("/control/reset", control_reset, methods=["POST"]),
            Route("/control/mismatch", control_mismatch, methods=["POST"]),
            Route("/control/lists", control_lists, methods=["POST"]),
        ]
    )


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def _body(receive: Receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += bytes(message.get("body", b""))
        if not message.get("more_body"):
            return body


def _error(request_id: Any, code: int, message: str, status: int) -> Response:
    error = {"code": code, "message": message}
    return JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": error}, status_code=status)


def faulty(app: Asgi, state: State) -> Asgi:
    """``app`` with the faults the control surface sets: a ``tools/call`` refused with
    ``HEADER_MISMATCH``, a ``tools/list`` failed or delayed."""

    async def faulted(scope: Scope, receive: Receive, send: Send) -> None:
        armed = state.mismatch_calls or state.lists_to_fail or state.list_delay
        if scope["type"] != "http" or scope["method"] != "POST" or not armed:
            await app(scope, receive, send)
            return
        body = await _body(receive)
        try:
            message = json.loads(body)
        except ValueError:
            message = None
        method = message.get("method") if isinstance(message, dict) else None
        request_id = message.get("id") if isinstance(message, dict) else None
        if method == "tools/call" and state.mismatch_calls > 0:
            state.mismatch_calls -= 1
            state.mismatched += 1
            said = "Mcp-Name header does not match the request body's 'name' parameter"
            await _error(request_id, HEADER_MISMATCH, said, 400)(scope, receive, send)
            return
        if method == "tools/list":
            await asyncio.sleep(state.list_delay)
            if state.lists_to_pass > 0:
                state.lists_to_pass -= 1
            elif state.lists_to_fail > 0:
                state.lists_to_fail -= 1
                state.lists_failed += 1
                said = "tools/list failed (a fault set on the control surface)"
                await _error(request_id, INTERNAL_ERROR, said, 200)(scope, receive, send)
                return
        await app(scope, replaying(body, receive), send)

    return faulted


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
        body = await _body(receive)
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
    mcp = faulty(server.streamable_http_app(stateless_http=True), state)
    app = modern_only(mcp, control_app(state), state)
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
