"""An MCP server behind OAuth 2.1 for tests: a resource server and its authorization
server, one process on two loopback ports.

    python -m tests.mcp.oauth_server --transport streamable-http|sse --client ID=SECRET ...

The resource server is the official SDK's ``MCPServer`` with its own server-side auth
(``AuthSettings``, a ``TokenVerifier``: the SDK's bearer middleware answers 401 with
``WWW-Authenticate: resource_metadata=...`` and serves the protected-resource metadata,
RFC 9728, naming the authorization server; tokens issued for another resource are refused,
RFC 8707). The authorization server serves the SDK's own metadata document
(``build_metadata``, RFC 8414) and a token endpoint for the ``client_credentials`` grant,
which the SDK's server does not implement: that endpoint is this fixture's (client
authentication by HTTP Basic, RFC 6749 section 2.3.1, each client's secret compared in
constant time; opaque random tokens bound to the requested resource).

It prints ``ports <resource server> <authorization server>`` once both listen. MCP is at
``/mcp`` (streamable HTTP) or ``/sse``. Tools: ``whoami()`` returns the client id of the
token the call carried; ``leak()`` returns that token itself (a server echoing a
credential, which the worker must redact); ``slow(seconds)`` sleeps that long, then
returns ``done`` (a write not safe to repeat: ``calls`` counts each start, ``finished``
each end).

Control surface (plain JSON, no auth) on the resource server's port:

- ``GET /control/state``: ``{"issued": [{"token", "client_id", "resource"}],
  "token_requests": [{"client_id", "ok"}], "bearers": [token, ...] (every bearer an MCP
  request carried, in order), "calls": {tool: n}, "finished": {tool: n}}``.
- ``POST /control/revoke``: every token issued so far stops being accepted (the next MCP
  request answers 401).
- ``POST /control/lifetime`` ``{"seconds": n}``: the ``expires_in`` of tokens issued next.
- ``POST /control/token-reply`` ``{"status": n, "body": "...", "type": "..."}``: the token
  endpoint answers an authenticated client with that instead of a token (``{}``: issues
  tokens again).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import hmac
import json
import secrets
import socket
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import uvicorn
from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import build_metadata
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import Context, MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.mcp.server import Asgi, Receive, Scope, Send, _bearer


@dataclass
class Issued:
    client_id: str
    resource: str | None
    expires_at: float
    revoked: bool = False


@dataclass
class State:
    clients: dict[str, str]
    """client id -> secret."""
    lifetime: int = 3600
    issued: dict[str, Issued] = field(default_factory=dict)
    token_requests: list[dict[str, Any]] = field(default_factory=list)
    bearers: list[str] = field(default_factory=list)
    calls: Counter[str] = field(default_factory=Counter)
    finished: Counter[str] = field(default_factory=Counter)
    """Calls of slow tools that ran to their end."""
    reply: dict[str, Any] | None = None
    """What the token endpoint answers in place of a token (``/control/token-reply``)."""


class Verifier:
    """The resource server's ``TokenVerifier``: tokens this authorization server issued,
    not revoked, not expired."""

    def __init__(self, state: State) -> None:
        self.state = state

    async def verify_token(self, token: str) -> AccessToken | None:
        issued = self.state.issued.get(token)
        if issued is None or issued.revoked or issued.expires_at <= time.time():
            return None
        return AccessToken(
            token=token,
            client_id=issued.client_id,
            scopes=[],
            expires_at=int(issued.expires_at),
            resource=issued.resource,
        )


def _token_error(error: str, description: str, status: int = 400) -> Response:
    return JSONResponse(
        {"error": error, "error_description": description},
        status_code=status,
        headers={"Cache-Control": "no-store"},
    )


def _basic_client(request: Request) -> tuple[str, str] | None:
    header = request.headers.get("authorization", "")
    if not header.startswith("Basic "):
        return None
    try:
        decoded = base64.b64decode(header[6:], validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    client_id, sep, secret = decoded.partition(":")
    return (unquote(client_id), unquote(secret)) if sep else None


def authorization_server(state: State, issuer: AuthSettings) -> Starlette:
    """The SDK's metadata document plus a client_credentials token endpoint."""
    metadata = build_metadata(
        issuer.issuer_url,
        None,
        ClientRegistrationOptions(enabled=False),
        RevocationOptions(enabled=False),
    )
    metadata = metadata.model_copy(update={"grant_types_supported": ["client_credentials"]})

    async def token(request: Request) -> Response:
        form = await request.form()
        presented = _basic_client(request)
        client_id = None if presented is None else presented[0]
        known = state.clients.get(client_id or "")
        ok = (
            presented is not None
            and known is not None
            and hmac.compare_digest(known.encode(), presented[1].encode())
        )
        state.token_requests.append({"client_id": client_id, "ok": ok})
        if not ok or client_id is None:
            return _token_error("invalid_client", "client authentication failed", 401)
        if form.get("grant_type") != "client_credentials":
            return _token_error("unsupported_grant_type", "only client_credentials")
        resource = form.get("resource")
        if state.reply is not None:
            return Response(
                state.reply["body"],
                status_code=int(state.reply["status"]),
                media_type=state.reply.get("type", "application/json"),
            )
        value = "tok-" + secrets.token_urlsafe(24)
        state.issued[value] = Issued(
            client_id=client_id,
            resource=str(resource) if resource is not None else None,
            expires_at=time.time() + state.lifetime,
        )
        return JSONResponse(
            {"access_token": value, "token_type": "Bearer", "expires_in": state.lifetime},
            headers={"Cache-Control": "no-store"},
        )

    return Starlette(
        routes=[
            Route(
                "/.well-known/oauth-authorization-server",
                MetadataHandler(metadata).handle,
                methods=["GET"],
            ),
            Route("/token", token, methods=["POST"]),
        ]
    )


def resource_server(
    state: State, auth: AuthSettings, on_dropped: Callable[[], None] | None = None
) -> MCPServer:
    """The resource server's tools; with ``on_dropped`` also ``dropped(seconds)``, which
    calls it, closes its call's event stream, sleeps, then returns ``resumed after
    <seconds>``, and ``unheard(seconds)``, which calls it, closes the session's standalone
    event stream, sleeps, then returns ``unheard for <seconds>`` (served with an event
    store: ``tests.mcp.consent_server --resumable``)."""
    server = MCPServer("psych-oauth-test-mcp", auth=auth, token_verifier=Verifier(state))

    @server.tool()
    def whoami() -> str:
        """The client id of the token this call carried."""
        state.calls["whoami"] += 1
        token = get_access_token()
        return "nobody" if token is None else token.client_id

    @server.tool()
    def leak() -> str:
        """The bearer token this call carried (a server echoing a credential)."""
        state.calls["leak"] += 1
        token = get_access_token()
        return "none" if token is None else f"your token is {token.token}"

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleeps ``seconds``, then answers (a slow write, not safe to repeat)."""
        state.calls["slow"] += 1
        await asyncio.sleep(seconds)
        state.finished["slow"] += 1
        return "done"

    if on_dropped is not None:
        dropping = on_dropped

        @server.tool()
        async def dropped(seconds: float, ctx: Context) -> str:
            """Calls ``on_dropped``, closes this call's event stream, sleeps, returns."""
            state.calls["dropped"] += 1
            dropping()
            await ctx.close_sse_stream()
            await asyncio.sleep(seconds)
            state.finished["dropped"] += 1
            return f"resumed after {seconds:g}"

        @server.tool()
        async def unheard(seconds: float, ctx: Context) -> str:
            """Calls ``on_dropped``, closes the session's standalone event stream (which the
            client opens again), sleeps, returns."""
            state.calls["unheard"] += 1
            dropping()
            await ctx.close_standalone_sse_stream()
            await asyncio.sleep(seconds)
            return f"unheard for {seconds:g}"

    return server


def control(state: State) -> Starlette:
    async def read(request: Request) -> Response:
        issued = [
            {"token": token, "client_id": item.client_id, "resource": item.resource}
            for token, item in state.issued.items()
        ]
        return JSONResponse(
            {
                "issued": issued,
                "token_requests": state.token_requests,
                "bearers": state.bearers,
                "calls": dict(state.calls),
                "finished": dict(state.finished),
            }
        )

    async def revoke(request: Request) -> Response:
        for item in state.issued.values():
            item.revoked = True
        return JSONResponse({"revoked": len(state.issued)})

    async def lifetime(request: Request) -> Response:
        state.lifetime = int(json.loads(await request.body())["seconds"])
        return JSONResponse({"lifetime": state.lifetime})

    async def clients(request: Request) -> Response:
        state.clients = dict(json.loads(await request.body()))
        return JSONResponse({"clients": len(state.clients)})

    async def token_reply(request: Request) -> Response:
        state.reply = json.loads(await request.body()) or None
        return JSONResponse({"reply": state.reply is not None})

    return Starlette(
        routes=[
            Route("/control/token-reply", token_reply, methods=["POST"]),
            Route("/control/state", read, methods=["GET"]),
            Route("/control/revoke", revoke, methods=["POST"]),
            Route("/control/lifetime", lifetime, methods=["POST"]),
            Route("/control/clients", clients, methods=["POST"]),
        ]
    )


def observed(app: Asgi, controls: Asgi, state: State) -> Asgi:
    """``/control/*`` to the control surface; every other request's bearer noted."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if str(scope.get("path", "")).startswith("/control/"):
                await controls(scope, receive, send)
                return
            token = _bearer(scope)
            if token is not None:
                state.bearers.append(token)
        await app(scope, receive, send)

    return wrapped


def _listening() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


async def _start(app: Asgi, sock: socket.socket) -> tuple[uvicorn.Server, asyncio.Task[None]]:
    web = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    serving = asyncio.create_task(web.serve(sockets=[sock]))
    while not web.started:
        if serving.done():
            await serving
            raise RuntimeError("a server stopped while starting")
        await asyncio.sleep(0.01)
    return web, serving


async def serve(transport: str, clients: dict[str, str], as_host: str = "127.0.0.1") -> None:
    """Serve until killed; print ``ports <rs> <as>`` once both listen. The authorization
    server's issuer names ``as_host`` (it listens on 127.0.0.1 whatever the name: a test
    gives ``localhost`` to tell it apart from the resource server in egress rules)."""
    state = State(clients=clients)
    rs_sock, as_sock = _listening(), _listening()
    rs_port, as_port = rs_sock.getsockname()[1], as_sock.getsockname()[1]
    path = "/sse" if transport == "sse" else "/mcp"
    auth = AuthSettings(
        issuer_url=f"http://{as_host}:{as_port}",
        resource_server_url=f"http://127.0.0.1:{rs_port}{path}",
        validate_token_resource=True,
    )
    mcp = resource_server(state, auth)
    app = mcp.sse_app() if transport == "sse" else mcp.streamable_http_app()
    _, rs_task = await _start(observed(app, control(state), state), rs_sock)
    _, as_task = await _start(authorization_server(state, auth), as_sock)
    print(f"ports {rs_port} {as_port}", flush=True)
    await asyncio.gather(rs_task, as_task)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["streamable-http", "sse"], required=True)
    parser.add_argument("--client", action="append", default=[], help="ID=SECRET")
    parser.add_argument("--as-host", default="127.0.0.1", help="the issuer's host name")
    args = parser.parse_args()
    clients = dict(item.split("=", 1) for item in args.client)
    asyncio.run(serve(args.transport, clients, args.as_host))


if __name__ == "__main__":
    main()
