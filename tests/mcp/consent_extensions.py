"""RFC 9207's ``iss`` and RFC 7592's client management around the SDK's authorization
server, which offers neither (``tests.mcp.consent_server --iss`` and
``--registration-management``).

- ``--iss``: the metadata sets ``authorization_response_iss_parameter_supported``, and
  each redirect of ``/authorize`` (a code, or an ``error``) carries ``iss``, the issuer as
  the metadata names it. ``POST /control/authorize-iss`` ``{"iss": text}`` makes the
  redirects carry that ``iss`` instead, ``{"iss": null}`` none, and ``{}`` the default
  again (none without ``--iss``).
- ``--registration-management``: a registration's answer also names a
  ``registration_client_uri`` (``http://<host>:<port>/register/<client id>``, the host
  ``--management-host`` when given, else the issuer's) and a ``registration_access_token``;
  a ``DELETE`` there with that bearer deletes the client (204, RFC 7592 2.3: the
  authorization server forgets it), anything else is answered 401 ``invalid_token``.
  ``GET /control/consents`` lists each ``DELETE`` received (``deletions``: the client id
  of its path) and the clients deleted (``deleted``). ``POST /control/deletion-reply``
  ``{"status": s}`` makes each ``DELETE`` answer ``s`` instead (an ``error`` named by the
  status; nothing deleted), as a server down behind its proxy (503) or one that lost the
  client (404) does; ``{"status": null}`` deletes again.
- ``POST /control/scopes`` ``{"scopes": [...]}`` makes the resource server's
  protected-resource metadata name those ``scopes_supported`` (the scope a client asks,
  as the SDK chooses it), ``{"scopes": null}`` none (the default). The SDK's
  authorization server registers a client for the scope its registration asks, and
  refuses an authorization asking a scope its client was not registered for
  (``invalid_scope``). ``GET /control/consents``' ``registered`` names each one's scope.
- ``--unknown-code-invalid-client``: ``/token`` answers an ``authorization_code`` request
  whose code it never issued (or spent) 400 ``invalid_client``, whatever the client, as
  some servers do, not RFC 6749's ``invalid_grant``; other requests as the SDK answers
  them.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit, urlunsplit

from mcp.shared.auth import OAuthClientInformationFull
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

METADATA = "/.well-known/oauth-authorization-server"

CONTROLS = ("/control/authorize-iss", "/control/scopes", "/control/deletion-reply")
"""The control paths ``iss_control`` answers."""


@dataclass
class Extensions:
    """What the authorization server adds to the SDK's, and what it saw of it."""

    issuer: str
    """The issuer as the metadata names it."""
    clients: dict[str, OAuthClientInformationFull]
    """The provider's clients (a deleted one is forgotten there)."""
    advertise_iss: bool = False
    management_base: str | None = None
    """``http://<host>:<port>``, where registrations are managed (None: not offered)."""
    iss: str | None = None
    """What ``/authorize``'s redirects carry (``reset_iss``)."""
    tokens: dict[str, str] = field(default_factory=dict)
    """Client id -> its registration access token."""
    deletions: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    codes: dict[str, Any] | None = None
    """The provider's issued codes, when an unknown one is answered ``invalid_client``."""
    scopes: list[str] | None = None
    """The resource server's ``scopes_supported`` (``/control/scopes``)."""
    deletion_reply: int | None = None
    """The status each ``DELETE`` answers instead (``/control/deletion-reply``)."""

    def __post_init__(self) -> None:
        self.reset_iss()

    def reset_iss(self) -> None:
        self.iss = self.issuer if self.advertise_iss else None

    def listing(self) -> dict[str, list[str]]:
        return {"deletions": self.deletions, "deleted": self.deleted}


def iss_control(ext: Extensions) -> Starlette:
    """``POST /control/authorize-iss``, ``POST /control/scopes`` and ``POST
    /control/deletion-reply``."""

    async def deletion_reply(request: Request) -> Response:
        ext.deletion_reply = (await request.json())["status"]
        return JSONResponse({"status": ext.deletion_reply})

    async def scopes(request: Request) -> Response:
        ext.scopes = (await request.json())["scopes"]
        return JSONResponse({"scopes": ext.scopes})

    async def authorize_iss(request: Request) -> Response:
        body = await request.json()
        if "iss" in body:
            ext.iss = body["iss"]
        else:
            ext.reset_iss()
        return JSONResponse({"iss": ext.iss})

    return Starlette(
        routes=[
            Route("/control/authorize-iss", authorize_iss, methods=["POST"]),
            Route("/control/scopes", scopes, methods=["POST"]),
            Route("/control/deletion-reply", deletion_reply, methods=["POST"]),
        ]
    )


def scoped(app: Any, ext: Extensions) -> Any:
    """The resource server ``app``, its protected-resource metadata naming ``ext.scopes``
    as ``scopes_supported`` when set."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        path = str(scope.get("path", ""))
        metadata = path.startswith("/.well-known/oauth-protected-resource")
        named = ext.scopes
        if scope["type"] != "http" or not metadata or named is None:
            await app(scope, receive, send)
            return

        def edit(status: int, body: dict[str, Any]) -> dict[str, Any]:
            return {**body, "scopes_supported": named}

        await _edited(app, scope, receive, send, edit)

    return wrapped


def extended(app: Any, ext: Extensions) -> Any:
    """The authorization server ``app`` with ``ext``'s additions."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        path, method = str(scope.get("path", "")), scope.get("method")
        if scope["type"] != "http":
            await app(scope, receive, send)
        elif path == METADATA and ext.advertise_iss:
            await _edited(app, scope, receive, send, _advertising)
        elif path == "/authorize":
            await app(scope, receive, _iss_added(send, ext.iss))
        elif path == "/register" and method == "POST" and ext.management_base is not None:
            await _edited(app, scope, receive, send, lambda status, body: _managed(ext, body))
        elif path == "/token" and method == "POST" and ext.codes is not None:
            await _unknown_code_refused(app, ext.codes, scope, receive, send)
        elif path.startswith("/register/") and method == "DELETE":
            await _delete(ext, path.removeprefix("/register/"), scope)(scope, receive, send)
        else:
            await app(scope, receive, send)

    return wrapped


async def _unknown_code_refused(
    app: Any, codes: dict[str, Any], scope: Any, receive: Any, send: Any
) -> None:
    """``/token``: an ``authorization_code`` request naming a code not in ``codes``
    answered 400 ``invalid_client``; any other passed to ``app`` (its body replayed)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = b"".join(chunks)
    form = parse_qs(body.decode())
    if form.get("grant_type") == ["authorization_code"] and form.get("code", [""])[0] not in codes:
        refused = {"error": "invalid_client", "error_description": "no such code"}
        await JSONResponse(refused, status_code=400)(scope, receive, send)
        return
    sent = False

    async def replay() -> Any:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    await app(scope, replay, send)


def _advertising(status: int, body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "authorization_response_iss_parameter_supported": True}


def _managed(ext: Extensions, body: dict[str, Any]) -> dict[str, Any]:
    client_id = body.get("client_id")
    if not isinstance(client_id, str):
        return body
    token = ext.tokens[client_id] = "rat-" + secrets.token_urlsafe(16)
    return {
        **body,
        "registration_client_uri": f"{ext.management_base}/register/{client_id}",
        "registration_access_token": token,
    }


def _delete(ext: Extensions, client_id: str, scope: Any) -> Response:
    ext.deletions.append(client_id)
    if ext.deletion_reply is not None:
        error = {404: "not_found", 401: "invalid_token"}.get(ext.deletion_reply, "unavailable")
        return JSONResponse({"error": error}, status_code=ext.deletion_reply)
    headers = dict(Request(scope).headers)
    expected = ext.tokens.get(client_id)
    if expected is None or headers.get("authorization") != f"Bearer {expected}":
        return JSONResponse({"error": "invalid_token"}, status_code=401)
    del ext.tokens[client_id]
    ext.clients.pop(client_id, None)
    ext.deleted.append(client_id)
    return Response(status_code=204)


def _iss_added(send: Any, iss: str | None) -> Any:
    """``send`` with the redirect's ``location`` carrying ``iss`` (none when None)."""

    async def sending(message: Any) -> None:
        if message["type"] == "http.response.start":
            headers = [
                (name, _with_iss(value.decode(), iss).encode() if name == b"location" else value)
                for name, value in message.get("headers", [])
            ]
            message = {**message, "headers": headers}
        await send(message)

    return sending


def _with_iss(location: str, iss: str | None) -> str:
    parts = urlsplit(location)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "iss"]
    if iss is not None:
        query.append(("iss", iss))
    return urlunsplit(parts._replace(query=urlencode(query)))


async def _edited(
    app: Any,
    scope: Any,
    receive: Any,
    send: Any,
    edit: Callable[[int, dict[str, Any]], dict[str, Any]],
) -> None:
    """``app``'s answer, its JSON object body changed by ``edit`` (on a 2xx answer)."""
    start: dict[str, Any] = {}
    chunks: list[bytes] = []

    async def capture(message: Any) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, capture)
    body, status = b"".join(chunks), int(start["status"])
    answer = json.loads(body) if body.startswith(b"{") else None
    if isinstance(answer, dict) and 200 <= status < 300:
        body = json.dumps(edit(status, answer)).encode()
    headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
