"""A scriptable MCP server for tests, run as its own process on loopback.

    python -m tests.mcp.server --transport streamable-http|sse [--filler N] [--require-bearer]
        [--resumable]

Built with the official ``mcp`` SDK's ``MCPServer``, so any stock MCP client can use it with
the ``initialize`` handshake. It binds 127.0.0.1 on a free port and prints one line
``port <N>`` once it accepts connections; MCP is served at ``/mcp`` (streamable HTTP) or
``/sse`` + ``/messages/`` (SSE). ``tests.mcp.fixture`` starts and stops it.

Tools (the names, arguments and annotations tests rely on):

- ``echo(text)`` read-only: returns ``text``.
- ``lookup(id)`` read-only: a record as text and as ``structuredContent`` (with an output
  schema).
- ``fail(reason)``: a result with ``isError: true`` carrying ``reason``.
- ``charge(amount, sleep_seconds=0)``: no annotations (a write that is not idempotent).
- ``tally(sleep_seconds=0)`` read-only: returns how often it was called so far.
- ``wipe()`` destructive.
- ``slow(seconds)``: sleeps; a cancellation of the call is logged.
- ``progress(steps, note='')``: sends ``steps`` progress notifications (their messages
  end with ``note``), then returns.
- ``image()``: one PNG image block; ``resource()``: one embedded text resource;
  ``big(size)``: ``size`` characters of text.
- ``filler_000`` ... with ``--filler N``: N tools with long descriptions.
- ``dropped(seconds)``, only with ``--resumable`` (streamable HTTP): closes its call's event
  stream, sleeps, then returns ``resumed after <seconds>``: the client resumes the stream
  with a GET carrying ``Last-Event-ID`` (events kept in ``tests.mcp.events``; retry 100 ms).
- ``unheard()``, only with ``--resumable``: closes the session's standalone event stream
  (its GET), which the client opens again (with ``Last-Event-ID`` once it had an event).

A plain-HTTP JSON control surface on the same port lets a test observe and steer it:

- ``GET /control/state``: ``{"calls": {tool: n}, "bearers": {session id: [token, ...]},
  "cancellations": [{"request_id", "reason", "tool"}], "interrupted": [tool, ...],
  "tools": [name, ...], "meta": {method: [key of its params' ``_meta``, ...]}}``.
- ``POST /control/add_tool`` ``{"name": ...}``: registers a tool ``name`` (it echoes
  ``text``) and sends ``notifications/tools/list_changed`` to every open session.
- ``POST /control/reset``: forgets calls, bearers, cancellations, ``_meta`` keys and added
  tools.
- ``POST /control/refuse`` ``{"methods": [...], "status": n, "location": "..."}``: answers
  503 (or ``status``, with ``location`` as its ``Location`` when given) to every MCP POST
  carrying one of those JSON-RPC methods (``[]`` ends it; reset too).
- ``POST /control/garble``: writes an event whose data is not JSON-RPC (``GARBLED``) on
  every open event stream of a GET (SSE's ``/sse``): a server message a client cannot read.

With ``--require-bearer`` every MCP request without ``Authorization: Bearer <token>`` is
answered 401; the control surface never asks for one.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import socket
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import anyio
import uvicorn
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.session import ServerSession
from mcp.types import EmbeddedResource, TextResourceContents, ToolAnnotations
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.mcp.events import MemoryEvents
from tests.mcp.refusals import refused

READ_ONLY = ToolAnnotations(read_only_hint=True)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True)

# A 1x1 transparent PNG: the smallest image a client can decode as a real one.
PIXEL_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
RETRY_MS = 100
"""The retry interval a ``--resumable`` server gives its clients (SSE ``retry``)."""
RESOURCE_URI = "test://resource/readme"
RESOURCE_TEXT = "The embedded resource's text."
FILLER_DESCRIPTION_CHARS = 1000
"""Each filler tool's description length: 40 of them make a catalogue of about 40 000
characters, past any sensible per-server preload budget."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


class Record(BaseModel):
    """What ``lookup`` finds: its fields are the tool's output schema."""

    id: str
    name: str
    status: str


@dataclass
class State:
    """What the control surface reports; reset between tests by ``/control/reset``."""

    calls: Counter[str] = field(default_factory=Counter)
    bearers: dict[str, list[str]] = field(default_factory=dict)
    cancellations: list[dict[str, str | None]] = field(default_factory=list)
    interrupted: list[str] = field(default_factory=list)
    # (session id, request id) -> tool of every call: a cancellation names its request
    # only, and the SDK cancels the handler before the notification reaches the middleware.
    requested: dict[tuple[str, str], str] = field(default_factory=dict)
    added: list[str] = field(default_factory=list)
    # Per JSON-RPC method, the keys its requests' ``_meta`` carried (what a client sent
    # the server beside the arguments: a trace context, baggage, a progress token).
    meta: dict[str, set[str]] = field(default_factory=dict)
    # Per MCP session id, the latest request's session proxy (the SDK builds one per
    # request): list_changed goes out on each one's standalone channel.
    sessions: dict[str, ServerSession] = field(default_factory=dict)
    # The send of every GET's event stream open now (``/control/garble`` writes on them).
    event_streams: list[Send] = field(default_factory=list)
    # JSON-RPC methods whose POSTs are answered 503 (``/control/refuse``), or this status
    # with this Location.
    refused: set[str] = field(default_factory=set)
    refused_status: int = 503
    refused_location: str | None = None

    def saw_bearer(self, session_id: str, token: str) -> None:
        seen = self.bearers.setdefault(session_id, [])
        if token not in seen:
            seen.append(token)

    def reset(self) -> None:
        self.calls.clear()
        self.bearers.clear()
        self.cancellations.clear()
        self.interrupted.clear()
        self.requested.clear()
        self.meta.clear()
        self.refused.clear()
        self.refused_status, self.refused_location = 503, None


GARBLED = b"event: message\ndata: {not json-rpc\n\n"
"""What ``/control/garble`` writes on an event stream."""


def _filler_description(index: int) -> str:
    head = f"Filler tool number {index:03d}: it returns its argument and exists to make the "
    head += "catalogue large. "
    body = "It has no effect on anything. " * (FILLER_DESCRIPTION_CHARS // 30 + 1)
    return (head + body)[:FILLER_DESCRIPTION_CHARS]


def build_server(state: State, filler: int, resumable: bool = False) -> MCPServer:
    """The MCP server with every test tool registered, observing into ``state``
    (``dropped`` and ``unheard`` only when ``resumable``)."""

    async def observe(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        session_id = _session_id(ctx)
        if session_id is not None:
            state.sessions[session_id] = ctx.session
        params = ctx.params or {}
        meta = params.get("_meta")
        state.meta.setdefault(ctx.method, set()).update(meta if isinstance(meta, dict) else ())
        if ctx.method == "tools/call":
            name = str(params.get("name"))
            state.calls[name] += 1
            state.requested[(str(session_id), str(ctx.request_id))] = name
        elif ctx.method == "notifications/cancelled":
            request_id = str(params.get("requestId"))
            reason = params.get("reason")
            state.cancellations.append(
                {
                    "request_id": request_id,
                    "reason": None if reason is None else str(reason),
                    "tool": state.requested.get((str(session_id), request_id)),
                }
            )
        return await call_next(ctx)

    server = MCPServer("psych-test-mcp", middleware=[observe])

    @server.tool(annotations=READ_ONLY)
    def echo(text: str) -> str:
        """Return the text given."""
        return text

    @server.tool(annotations=READ_ONLY)
    def lookup(id: str) -> Record:
        """Look a record up by its id."""
        return Record(id=id, name=f"record {id}", status="active")

    @server.tool()
    def fail(reason: str) -> str:
        """Always fail, with the reason given."""
        raise ToolError(reason)

    @server.tool()
    async def charge(amount: float, sleep_seconds: float = 0) -> str:
        """Charge an amount (a write that is not safe to repeat)."""
        await anyio.sleep(sleep_seconds)
        return f"charged {amount}"

    @server.tool(annotations=READ_ONLY)
    async def tally(sleep_seconds: float = 0) -> str:
        """Say how many times this tool was called."""
        await anyio.sleep(sleep_seconds)
        return f"tally {state.calls['tally']}"

    @server.tool(annotations=DESTRUCTIVE)
    def wipe() -> str:
        """Delete everything."""
        return "wiped"

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep for the seconds given, then return."""
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            state.interrupted.append("slow")
            raise
        return f"slept {seconds}"

    @server.tool()
    async def progress(steps: int, ctx: Context, note: str = "") -> str:
        """Report progress ``steps`` times (each message ending with ``note``), then
        return."""
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step} of {steps}{note}")
            await anyio.sleep(0.05)
        return f"done {steps}"

    @server.tool()
    def image() -> Image:
        """Return a one-pixel PNG."""
        return Image(data=PIXEL_PNG, format="png")

    @server.tool()
    def resource() -> EmbeddedResource:
        """Return an embedded text resource."""
        contents = TextResourceContents(
            uri=RESOURCE_URI, mime_type="text/plain", text=RESOURCE_TEXT
        )
        return EmbeddedResource(type="resource", resource=contents)

    @server.tool(annotations=READ_ONLY)
    def big(size: int) -> str:
        """Return ``size`` characters of text."""
        pattern = "0123456789abcdef"
        return (pattern * (size // len(pattern) + 1))[:size]

    for index in range(filler):
        _add_echo_tool(server, f"filler_{index:03d}", _filler_description(index))

    if resumable:

        @server.tool()
        async def dropped(seconds: float, ctx: Context) -> str:
            """Close this call's event stream, sleep, then return."""
            await ctx.close_sse_stream()
            await anyio.sleep(seconds)
            return f"resumed after {seconds:g}"

        @server.tool()
        async def unheard(ctx: Context) -> str:
            """Close the session's standalone event stream (its GET), which the client
            opens again with ``Last-Event-ID`` once it had an event."""
            await ctx.close_standalone_sse_stream()
            return "closed"

    return server


def _add_echo_tool(server: MCPServer, name: str, description: str) -> None:
    def tool(text: str) -> str:
        return f"{name}: {text}"

    server.add_tool(tool, name=name, description=description, annotations=READ_ONLY)


def control_app(server: MCPServer, state: State) -> Starlette:
    """The ``/control/*`` surface (plain JSON over HTTP, no MCP, no bearer)."""

    async def control_state(request: Request) -> Response:
        tools = [tool.name for tool in await server.list_tools()]
        return JSONResponse(
            {
                "calls": dict(state.calls),
                "bearers": state.bearers,
                "cancellations": state.cancellations,
                "interrupted": state.interrupted,
                "tools": tools,
                "meta": {method: sorted(keys) for method, keys in state.meta.items()},
            }
        )

    async def control_add_tool(request: Request) -> Response:
        body = json.loads(await request.body())
        name = body["name"]
        if not isinstance(name, str) or not name:
            return JSONResponse({"error": "name must be a non-empty string"}, status_code=400)
        _add_echo_tool(server, name, f"Echo the text given (added at run time as {name}).")
        state.added.append(name)
        notified = 0
        for session_id, session in list(state.sessions.items()):
            try:
                await session.send_tool_list_changed()
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                # The client went away: nobody is left to tell.
                del state.sessions[session_id]
            else:
                notified += 1
        return JSONResponse({"notified": notified})

    async def control_reset(request: Request) -> Response:
        for name in state.added:
            server.remove_tool(name)
        state.added.clear()
        state.reset()
        return JSONResponse({"ok": True})

    async def control_refuse(request: Request) -> Response:
        asked = json.loads(await request.body())
        state.refused = {str(method) for method in asked["methods"]}
        state.refused_status = int(asked.get("status", 503))
        location = asked.get("location")
        state.refused_location = None if location is None else str(location)
        return JSONResponse({"refused": sorted(state.refused)})

    async def control_garble(request: Request) -> Response:
        for stream in list(state.event_streams):
            await stream({"type": "http.response.body", "body": GARBLED, "more_body": True})
        return JSONResponse({"garbled": len(state.event_streams)})

    return Starlette(
        routes=[
            Route("/control/state", control_state, methods=["GET"]),
            Route("/control/garble", control_garble, methods=["POST"]),
            Route("/control/add_tool", control_add_tool, methods=["POST"]),
            Route("/control/reset", control_reset, methods=["POST"]),
            Route("/control/refuse", control_refuse, methods=["POST"]),
        ]
    )


def _session_id(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The MCP session id of a request: streamable HTTP's header or SSE's query parameter
    (``None`` on streamable HTTP's ``initialize``, which has none yet)."""
    request = ctx.request
    if not isinstance(request, Request):
        return None
    return request.headers.get("mcp-session-id") or request.query_params.get("session_id")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _bearer(scope: Scope) -> str | None:
    authorization = _header(scope, b"authorization")
    if authorization is None or not authorization.lower().startswith("bearer "):
        return None
    token = authorization[len("bearer ") :].strip()
    return token or None


def guard(app: Asgi, control: Asgi, state: State, *, require_bearer: bool) -> Asgi:
    """Wrap the MCP app: refuse requests without a bearer, note the bearer per session,
    and hand ``/control/*`` to ``control``.

    The session id comes from the ``mcp-session-id`` header (streamable HTTP; on the
    ``initialize`` answer it is a response header) or the ``session_id`` query parameter
    (SSE's message endpoint), so both transports report bearers the same way.
    """

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        if str(scope.get("path", "")).startswith("/control/"):
            await control(scope, receive, send)
            return
        token = _bearer(scope)
        if require_bearer and token is None:
            refusal = JSONResponse({"error": "a bearer token is required"}, status_code=401)
            await refusal(scope, receive, send)
            return
        session_id = _header(scope, b"mcp-session-id")
        if session_id is None:
            query = parse_qs(bytes(scope.get("query_string", b"")).decode())
            session_id = query["session_id"][0] if query.get("session_id") else None
        if token is not None and session_id is not None:
            state.saw_bearer(session_id, token)
        if scope.get("method") == "POST" and state.refused:
            replay = await refused(
                scope,
                receive,
                send,
                state.refused,
                state.refused_status,
                state.refused_location,
            )
            if replay is None:
                return
            receive = replay

        async def send_noting_session(message: Message) -> None:
            if token is not None and message["type"] == "http.response.start":
                for key, value in message.get("headers", []):
                    if bytes(key).lower() == b"mcp-session-id":
                        state.saw_bearer(bytes(value).decode("latin-1"), token)
            await send(message)
            if message["type"] == "http.response.start" and scope.get("method") == "GET":
                state.event_streams.append(send)

        try:
            await app(scope, receive, send_noting_session)
        finally:
            if send in state.event_streams:
                state.event_streams.remove(send)

    return wrapped


async def serve(
    transport: str, filler: int, require_bearer: bool, json_response: bool, resumable: bool
) -> None:
    """Serve until killed; print ``port <N>`` once listening."""
    state = State()
    server = build_server(state, filler, resumable)
    if transport == "sse":
        app = server.sse_app()
    elif resumable:
        events = MemoryEvents()
        app = server.streamable_http_app(
            json_response=json_response, event_store=events, retry_interval=RETRY_MS
        )
    else:
        app = server.streamable_http_app(json_response=json_response)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        guard(app, control_app(server, state), state, require_bearer=require_bearer),
        log_level="warning",
        lifespan="on",
    )
    web = uvicorn.Server(config)
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
    parser.add_argument("--transport", choices=["streamable-http", "sse"], required=True)
    parser.add_argument("--filler", type=int, default=0, help="extra tools with long descriptions")
    parser.add_argument("--require-bearer", action="store_true", help="401 without a bearer")
    parser.add_argument(
        "--json-response", action="store_true", help="answer POSTs with JSON, not event streams"
    )
    parser.add_argument(
        "--resumable", action="store_true", help="keep events: a client resumes a dropped stream"
    )
    args = parser.parse_args()
    asyncio.run(
        serve(args.transport, args.filler, args.require_bearer, args.json_response, args.resumable)
    )


if __name__ == "__main__":
    main()
