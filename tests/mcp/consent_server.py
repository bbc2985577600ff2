"""An MCP server behind OAuth 2.1 whose tokens need a person's consent (the
``authorization_code`` grant), for tests: a resource server and its authorization server,
one process on two loopback ports.

    python -m tests.mcp.consent_server --transport streamable-http|sse \\
        --client ID=REDIRECT_URI ...

The authorization server is the official SDK's own (``mcp.server.auth.routes.
create_auth_routes``: metadata, ``/authorize``, ``/token`` with PKCE and refresh) over this
fixture's ``OAuthAuthorizationServerProvider``, which keeps everything in memory and
consents at once: ``/authorize`` answers with the redirect to the client's ``redirect_uri``
carrying the code and ``state``, as a person clicking "allow" would. The resource server is
``tests.mcp.oauth_server``'s (``whoami``, ``leak``, the control surface: ``state``,
``revoke``, ``lifetime``), verifying the access tokens this provider issued. Clients are
public (``token_endpoint_auth_method: none``) and pre-registered with one redirect URI.

``POST /control/refuse`` ``{"error": code, "description": text}`` makes ``/authorize``
refuse from now on, as a person clicking "deny" does: the redirect carries ``error``,
``error_description`` and ``state`` (RFC 6749 4.1.2.1, the SDK's ``AuthorizeError``);
``{}`` consents again. ``GET /control/consents`` lists ``authorized`` (client ids, one per
consent given), ``refreshed`` (how many refresh grants were answered) and ``refused``
(refresh grants naming a refresh token that is not, or no longer, valid: each is good once).
``POST /control/refresh-delay`` ``{"seconds": s}`` holds each answered refresh that long
after its refresh token is spent, as a slow server's reply does. ``POST
/control/token-reply`` (``tests.mcp.oauth_server``'s) makes ``/token`` answer with it.

``--registration`` opens dynamic client registration (RFC 7591, the SDK's ``/register``,
named ``registration_endpoint`` in the metadata); without it the metadata names none.
``GET /control/consents`` then also lists ``registered`` (each registration's client
metadata and the client id it got). ``POST /control/refuse-registration`` ``{"error":
code, "description": text}`` makes ``/register`` answer 400 with them from now on; ``{}``
registers again. ``POST /control/registration-reply`` ``{"status": s, "body": text}``
makes ``/register`` answer with them instead (``{}``: it registers again). ``POST
/control/forget-registrations`` forgets every client registered so
far, as an authorization server that lost or expired them does (its token endpoint then
answers their requests 401 ``invalid_client``, its ``/authorize`` refuses them).

``--iss`` and ``--registration-management`` (``--management-host``) add RFC 9207's ``iss``
and RFC 7592's client management to the SDK's authorization server, and
``--unknown-code-invalid-client`` answers a code it never issued ``invalid_client``
(``tests.mcp.consent_extensions``).

``--resumable`` (streamable HTTP) keeps every event (``tests.mcp.events``), tells clients
to retry after 100 ms, and adds ``dropped(seconds)``: it revokes every access and refresh
token, closes its call's event stream, sleeps, then returns ``resumed after <seconds>``, so
the client's GET resuming that stream (``Last-Event-ID``) meets a 401 and needs consent;
and ``unheard(seconds)``: it revokes them too and closes the session's standalone event
stream instead (the client's GET opening it again meets a 401), then sleeps and returns.

It prints ``ports <resource server> <authorization server>`` once both listen.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import time
from typing import Any

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationErrorCode,
    AuthorizationParams,
    AuthorizeError,
    RefreshToken,
    RegistrationError,
    RegistrationErrorCode,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl, AnyUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.mcp.consent_extensions import CONTROLS, Extensions, extended, iss_control, scoped
from tests.mcp.events import MemoryEvents
from tests.mcp.oauth_server import (
    Issued,
    State,
    _listening,
    _start,
    control,
    observed,
    resource_server,
)
from tests.mcp.server import RETRY_MS


class Provider:
    """The authorization server's provider: in-memory clients, codes and tokens."""

    def __init__(self, state: State, clients: dict[str, str]) -> None:
        self.state = state
        self.clients = {
            client_id: OAuthClientInformationFull(
                client_id=client_id,
                redirect_uris=[AnyUrl(redirect)],
                token_endpoint_auth_method="none",
                grant_types=["authorization_code", "refresh_token"],
            )
            for client_id, redirect in clients.items()
        }
        self.codes: dict[str, AuthorizationCode] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.authorized: list[str] = []
        self.refreshed = 0
        self.refused = 0
        self.refresh_delay = 0.0
        self.refusal: AuthorizeError | None = None
        """What ``/authorize`` answers in place of a consent (``/control/refuse``)."""
        self.registered: list[dict[str, Any]] = []
        """Each dynamic registration: the client's metadata and id."""
        self.registration_refusal: RegistrationError | None = None
        """What ``/register`` answers (``/control/refuse-registration``)."""
        self.registration_reply: dict[str, Any] | None = None
        """What ``/register`` answers instead (``/control/registration-reply``)."""

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        if self.registration_refusal is not None:
            raise self.registration_refusal
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info
        self.registered.append(client_info.model_dump(mode="json", exclude_none=True))

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        if self.refusal is not None:
            raise self.refusal
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id or "",
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        self.authorized.append(client.client_id or "")
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access = "tok-" + secrets.token_urlsafe(24)
        refresh = "ref-" + secrets.token_urlsafe(24)
        lifetime = self.state.lifetime
        self.state.issued[access] = Issued(
            client_id=client_id, resource=resource, expires_at=time.time() + lifetime
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=lifetime,
            refresh_token=refresh,
            scope=" ".join(scopes) or None,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        return self._issue(
            authorization_code.client_id, authorization_code.scopes, authorization_code.resource
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        found = self.refresh.get(refresh_token)
        if found is None:
            self.refused += 1
        return found

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)
        self.refreshed += 1
        await asyncio.sleep(self.refresh_delay)
        return self._issue(refresh_token.client_id, scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        return None

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        return None

    def revoke_all(self) -> None:
        """Every access and refresh token issued so far stops working."""
        for item in self.state.issued.values():
            item.revoked = True
        self.refresh.clear()

    async def exchange_identity_assertion(self, *args: Any, **kwargs: Any) -> OAuthToken:
        raise TokenError("unsupported_grant_type", "identity assertions are not supported")


def revocations(provider: Provider, ext: Extensions) -> Starlette:
    """``POST /control/revoke-all``: access and refresh tokens alike stop working."""

    async def revoke_all(request: Request) -> Response:
        provider.revoke_all()
        return JSONResponse({"revoked": len(provider.state.issued)})

    async def consents(request: Request) -> Response:
        counts = {"refreshed": provider.refreshed, "refused": provider.refused}
        registered = {"registered": provider.registered, **ext.listing()}
        return JSONResponse({"authorized": provider.authorized, **counts, **registered})

    async def refresh_delay(request: Request) -> Response:
        provider.refresh_delay = float((await request.json())["seconds"])
        return JSONResponse({"seconds": provider.refresh_delay})

    async def refuse(request: Request) -> Response:
        body = await request.json()
        error: AuthorizationErrorCode | None = body.get("error")
        provider.refusal = None if error is None else AuthorizeError(error, body.get("description"))
        return JSONResponse({"refusing": error})

    async def registration_reply(request: Request) -> Response:
        body = await request.json()
        provider.registration_reply = body or None
        return JSONResponse({"replying": bool(body)})

    async def forget_registrations(request: Request) -> Response:
        for item in provider.registered:
            provider.clients.pop(item["client_id"], None)
        return JSONResponse({"forgotten": len(provider.registered)})

    async def refuse_registration(request: Request) -> Response:
        body = await request.json()
        error: RegistrationErrorCode | None = body.get("error")
        refusal = None if error is None else RegistrationError(error, body.get("description"))
        provider.registration_refusal = refusal
        return JSONResponse({"refusing": error})

    return Starlette(
        routes=[
            Route("/control/refuse", refuse, methods=["POST"]),
            Route("/control/refuse-registration", refuse_registration, methods=["POST"]),
            Route("/control/forget-registrations", forget_registrations, methods=["POST"]),
            Route("/control/registration-reply", registration_reply, methods=["POST"]),
            Route("/control/revoke-all", revoke_all, methods=["POST"]),
            Route("/control/consents", consents, methods=["GET"]),
            Route("/control/refresh-delay", refresh_delay, methods=["POST"]),
        ]
    )


def without_resource_metadata(app: Any, own: Any) -> Any:
    """The resource server as a 2025-03-26 server (the SDK's legacy path) whose origin is
    its own authorization server (``own``): no protected-resource metadata (404), a 401
    naming none, and the origin serving authorization-server metadata, ``/authorize`` and
    ``/token`` (``--own-issuer``)."""
    owned = ("/.well-known/oauth-authorization-server", "/authorize", "/token")

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] == "http" and path.startswith("/.well-known/oauth-protected-resource"):
            await Response(status_code=404)(scope, receive, send)
            return
        if scope["type"] == "http" and path in owned:
            await own(scope, receive, send)
            return

        async def plain(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (name, b'Bearer error="invalid_token"' if name == b"www-authenticate" else v)
                    for name, v in message.get("headers", [])
                ]
                message = {**message, "headers": headers}
            await send(message)

        await app(scope, receive, plain)

    return wrapped


def replying(app: Any, state: State, provider: Provider) -> Any:
    """The authorization server, whose ``/token`` answers what ``/control/token-reply``
    set (``State.reply``) in place of a token, as ``tests.mcp.oauth_server``'s does, and
    whose ``/register`` answers what ``/control/registration-reply`` set."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        registration = provider.registration_reply
        if scope["type"] == "http" and scope.get("path") == "/register" and registration:
            answer = Response(
                registration["body"],
                status_code=int(registration["status"]),
                media_type="application/json",
            )
            await answer(scope, receive, send)
            return
        reply = state.reply
        if scope["type"] == "http" and scope.get("path") == "/token" and reply is not None:
            answer = Response(
                reply["body"],
                status_code=int(reply["status"]),
                media_type=reply.get("type", "application/json"),
            )
            await answer(scope, receive, send)
            return
        await app(scope, receive, send)

    return wrapped


async def serve(
    transport: str,
    clients: dict[str, str],
    as_host: str = "127.0.0.1",
    own_issuer: bool = False,
    registration: bool = False,
    advertise_iss: bool = False,
    management_host: str | None = None,
    unknown_code_invalid_client: bool = False,
    resumable: bool = False,
) -> None:
    """Serve until killed; print ``ports <rs> <as>`` once both listen. The issuer names
    ``as_host`` (it listens on 127.0.0.1 whatever the name). ``own_issuer``: the resource
    server publishes no protected-resource metadata and its origin is an authorization
    server of its own (``without_resource_metadata``), over the same provider.
    ``registration``: the authorization server takes dynamic client registrations;
    ``advertise_iss`` and ``management_host`` (where registrations are managed; None:
    they are not), ``unknown_code_invalid_client``: ``tests.mcp.consent_extensions``'s
    ``--iss``, ``--registration-management`` and ``--unknown-code-invalid-client``.
    ``resumable`` (streamable HTTP): ``--resumable``."""
    state = State(clients={})
    provider = Provider(state, clients)
    rs_sock, as_sock = _listening(), _listening()
    rs_port, as_port = rs_sock.getsockname()[1], as_sock.getsockname()[1]
    path = "/sse" if transport == "sse" else "/mcp"
    issuer = f"http://{as_host}:{as_port}"
    auth = AuthSettings(
        issuer_url=AnyHttpUrl(issuer),
        resource_server_url=AnyHttpUrl(f"http://127.0.0.1:{rs_port}{path}"),
        validate_token_resource=True,
    )
    mcp = resource_server(state, auth, provider.revoke_all if resumable else None)
    if transport == "sse":
        app = mcp.sse_app()
    elif resumable:
        app = mcp.streamable_http_app(event_store=MemoryEvents(), retry_interval=RETRY_MS)
    else:
        app = mcp.streamable_http_app()
    ext = Extensions(
        issuer=str(AnyHttpUrl(issuer)),
        clients=provider.clients,
        advertise_iss=advertise_iss,
        management_base=None if management_host is None else f"http://{management_host}:{as_port}",
        codes=provider.codes if unknown_code_invalid_client else None,
    )
    extra = revocations(provider, ext)
    more = iss_control(ext)
    base = control(state)

    async def controls(scope: Any, receive: Any, send: Any) -> None:
        if scope.get("path") in (
            "/control/refuse",
            "/control/refuse-registration",
            "/control/forget-registrations",
            "/control/registration-reply",
            "/control/revoke-all",
            "/control/consents",
            "/control/refresh-delay",
        ):
            await extra(scope, receive, send)
        elif scope.get("path") in CONTROLS:
            await more(scope, receive, send)
        else:
            await base(scope, receive, send)

    authorization = Starlette(
        routes=create_auth_routes(
            provider,
            AnyHttpUrl(issuer),
            client_registration_options=ClientRegistrationOptions(enabled=registration),
            revocation_options=RevocationOptions(enabled=False),
        )
    )
    served = observed(scoped(app, ext), controls, state)
    authorization = extended(replying(authorization, state, provider), ext)
    if own_issuer:
        origin = f"http://127.0.0.1:{rs_port}"
        own = Starlette(
            routes=create_auth_routes(
                provider,
                AnyHttpUrl(origin),
                client_registration_options=ClientRegistrationOptions(enabled=False),
                revocation_options=RevocationOptions(enabled=False),
            )
        )
        served = without_resource_metadata(served, own)
    _, rs_task = await _start(served, rs_sock)
    _, as_task = await _start(authorization, as_sock)
    print(f"ports {rs_port} {as_port}", flush=True)
    await asyncio.gather(rs_task, as_task)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["streamable-http", "sse"], required=True)
    parser.add_argument("--client", action="append", default=[], help="ID=REDIRECT_URI")
    parser.add_argument("--as-host", default="127.0.0.1", help="the issuer's host name")
    parser.add_argument(
        "--own-issuer",
        action="store_true",
        help="no protected-resource metadata; the resource server's origin is its own issuer",
    )
    parser.add_argument(
        "--registration", action="store_true", help="take dynamic client registrations"
    )
    parser.add_argument("--iss", action="store_true", help="RFC 9207 iss in every redirect")
    parser.add_argument(
        "--registration-management", action="store_true", help="RFC 7592 client deletion"
    )
    parser.add_argument("--management-host", help="the registration_client_uri's host name")
    parser.add_argument(
        "--unknown-code-invalid-client",
        action="store_true",
        help="answer a code never issued invalid_client, not invalid_grant",
    )
    parser.add_argument(
        "--resumable", action="store_true", help="keep events; a dropped() that revokes"
    )
    args = parser.parse_args()
    clients = dict(item.split("=", 1) for item in args.client)
    managed = args.management_host or args.as_host if args.registration_management else None
    asyncio.run(
        serve(
            args.transport,
            clients,
            args.as_host,
            args.own_issuer,
            args.registration,
            advertise_iss=args.iss,
            management_host=managed,
            unknown_code_invalid_client=args.unknown_code_invalid_client,
            resumable=args.resumable,
        )
    )


if __name__ == "__main__":
    main()
