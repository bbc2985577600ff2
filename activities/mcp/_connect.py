"""Reaching an MCP server: its credential resolved for a Scope, the pool key and headers of
a connection, why a server is unavailable (never naming a secret), and the publish-time
check of a Spec's servers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass

import httpx2
from mcp.client import Client

from psych_runtime.activities.egress import Attempt, Egress
from psych_runtime.activities.mcp._client import describe_error, open_client
from psych_runtime.activities.mcp._consent_check import ReadOnlyTokens, oauth_line
from psych_runtime.activities.mcp._oauth import OAuthClients, OAuthUnavailable
from psych_runtime.activities.mcp._pool import McpUnavailable, SessionKey
from psych_runtime.activities.mcp._settings import McpSettings
from psych_runtime.activities.mcp._streams import StreamWatch
from psych_runtime.activities.mcp._until import until_set
from psych_runtime.activities.secrets import Redactor, SecretResolver, resolve_secret
from psych_runtime.activities.tokens import TokenKey, TokenStore
from psych_runtime.specs import McpServer, NotFound, Scope


class Unavailable(Exception):
    """A server cannot be used for this Scope (the message names why, never a secret)."""


@dataclass(frozen=True)
class Connection:
    """What a session with a server needs for one Scope: its pool key, its headers, the
    OAuth provider of a server behind OAuth, and a redactor holding the credential sent."""

    key: SessionKey
    headers: dict[str, str]
    redact: Redactor
    auth: httpx2.Auth | None = None
    token: TokenKey | None = None
    """The key of a server's OAuth token."""
    consent: TokenKey | None = None
    """The same key, for a grant a person consents to (``OAuthClients.consents``)."""


async def connect(
    server: McpServer,
    scope: Scope,
    secrets: SecretResolver | None,
    oauth: OAuthClients | None = None,
) -> Connection:
    """The pool key, headers, OAuth provider and redactor for ``server`` under ``scope``.

    Raises:
        Unavailable: a credential that cannot be resolved, or OAuth that cannot be used
            (no ``oauth`` clients on this worker, or ``OAuthClients.grant``'s reasons).
    """
    if server.oauth is not None:
        if oauth is None:
            raise Unavailable(
                f"{server.name}: this worker keeps no OAuth tokens (McpActivities(tokens=...), "
                "WorkerSettings.tokens)"
            )
        try:
            grant = await oauth.grant(server, scope, secrets)
        except OAuthUnavailable as err:
            raise Unavailable(f"{server.name}: {err}") from err
        key = SessionKey.of(scope, server.url, server.transport, grant.identity)
        consents = server.oauth.grant == "authorization_code"
        return Connection(
            key=key,
            headers={},
            redact=grant.redact,
            auth=grant.auth,
            token=grant.key,
            consent=grant.key if consents else None,
        )
    secret = await resolve_credential(server, scope, secrets)
    headers = {} if secret is None else {"Authorization": f"Bearer {secret}"}
    redact = Redactor()
    if secret is not None and server.credential is not None:
        redact.add(server.credential, secret)
    key = SessionKey.of(scope, server.url, server.transport, secret)
    return Connection(key=key, headers=headers, redact=redact)


async def resolve_credential(
    server: McpServer, scope: Scope, secrets: SecretResolver | None
) -> str | None:
    """The secret ``server.credential`` names for ``scope`` (None when it names none).

    Raises:
        Unavailable: there is no resolver or no such secret (the message names the
            credential, never a value).
    """
    if server.credential is None:
        return None
    if secrets is None:
        raise Unavailable(
            f"credential {server.credential!r} cannot be resolved: this worker has no "
            "SecretResolver"
        )
    try:
        return await resolve_secret(secrets, scope, server.credential)
    except NotFound as err:
        raise Unavailable(f"credential {server.credential!r} is not available") from err


def never_called(tried: Sequence[Attempt], tool: str) -> bool:
    """Whether a call of ``tool`` provably never reached its server: each ``tools/call``
    of it ``tried`` holds (there is one at least) never left (``attempts``). A request that
    may have left, or none seen at all, says it may have run."""
    calls = [attempt for attempt in tried if _calls(attempt, tool)]
    return bool(calls) and all(attempt.unsent for attempt in calls)


def _calls(attempt: Attempt, tool: str) -> bool:
    try:
        message = json.loads(attempt.body or b"")
    except ValueError:
        return False
    params = message.get("params") if isinstance(message, dict) else None
    named = isinstance(params, dict) and params.get("name") == tool
    return attempt.method == "POST" and message.get("method") == "tools/call" and named


def failure_reason(err: BaseException) -> str:
    """Why a server failed, as the model and the logs may read it."""
    if isinstance(err, Unavailable | McpUnavailable):
        return str(err)
    return describe_error(err)


async def check_servers(
    servers: Sequence[McpServer],
    scope: Scope,
    secrets: SecretResolver | None,
    settings: McpSettings | None = None,
    egress: Egress | None = None,
    tokens: TokenStore | None = None,
    oauth: dict[str, str] | None = None,
    tools: dict[str, tuple[str, ...]] | None = None,
) -> dict[str, str | None]:
    """Connect to each server (``initialize`` and ``tools/list``, every page up to
    ``settings.max_list_pages``), as publish-time ``--check-connections`` does; server
    name -> why it failed, or None when it answered. ``tools`` is filled with server name
    -> the names of the tools it offers, sorted, for each server that listed them.

    A server behind OAuth uses the token ``tokens`` (the workers' store, read only) holds
    for ``scope``; one whose authorization server asks for a person's consent answered
    (a Run would suspend for it, not fail). ``oauth`` is filled with server name -> what
    ``oauth_line`` says of its token for ``scope``.

    Each server gets a fresh connection, closed before returning (nothing is pooled), and
    the servers are tried concurrently, each bounded by the connect and list timeouts; an
    SSE server's check fails at once when a POST of it failed (never answered: ``_posts``).
    A server behind OAuth gets a token as a Run would (``settings.oauth_issuers``), kept
    only for the check. Messages name credentials, never their values. Connections go
    through ``egress`` (default: the environment's policy, ``EgressSettings.from_env``).
    """
    chosen = settings if settings is not None else McpSettings()
    port = egress if egress is not None else Egress()

    # A check keeps an OAuth token in its session only: nothing is stored by publishing,
    # and no client is registered (a Run registers it, then asks for consent).
    store = ReadOnlyTokens(tokens)
    clients = OAuthClients(chosen.oauth_issuers, store, registers=False)
    unregistered = clients.unregistered
    assert unregistered is not None

    async def check(server: McpServer) -> str | None:
        redact = Redactor()
        connection: Connection | None = None
        consent = False
        refused: list[Exception] = []
        unanswered = asyncio.Event()
        offered: tuple[str, ...] = ()

        def told(err: Exception) -> None:
            refused.append(err)
            if server.transport == "sse":
                # The SDK's SSE writer ended with the POST that failed: its request is never
                # answered (12-07: the check waited out its bound, then said "timed out").
                unanswered.set()

        async def listed(connection: Connection) -> tuple[str, ...]:
            async with open_client(
                server.url,
                server.transport,
                connection.headers,
                connect_timeout=chosen.connect_timeout_seconds,
                egress=port,
                tenant=scope.tenant,
                auth=connection.auth,
                on_refused=told,
                watch=StreamWatch(on_end=lambda: None),  # its POSTs' faults told (_posts)
            ) as client:
                return await _tool_names(client, chosen.max_list_pages)

        try:
            connection = await connect(server, scope, secrets, clients)
            redact = connection.redact
            bound = chosen.connect_timeout_seconds + chosen.list_timeout_seconds
            async with asyncio.timeout(bound):
                listing = await until_set(listed(connection), unanswered)
            if listing.cancelled():
                raise McpUnavailable(str(refused[-1]))
            offered = listing.result()
        except Exception as err:
            consent = connection is not None and (
                clients.consents.take(connection.consent) is not None
                or connection.consent in unregistered
            )
            if not consent:
                return redact(str(refused[-1]) if refused else failure_reason(err))
        finally:
            if oauth is not None and connection is not None and connection.token is not None:
                key = connection.token
                held, unread = await store.held(key)
                oauth[server.name] = oauth_line(
                    server,
                    scope,
                    held=held,
                    sealed=key in store.sealed,
                    consent=consent,
                    unread=unread,
                )
        if tools is not None and not consent:
            tools[server.name] = offered
        return None

    try:
        answers = await asyncio.gather(*(check(server) for server in servers))
    finally:
        if egress is None:
            await port.aclose()
    return {server.name: answer for server, answer in zip(servers, answers, strict=True)}


async def _tool_names(client: Client, max_pages: int) -> tuple[str, ...]:
    """The names of every tool ``client``'s server lists, sorted.

    Raises:
        Unavailable: the listing did not end within ``max_pages`` pages.
    """
    names: set[str] = set()
    cursor: str | None = None
    for _ in range(max_pages):
        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        names.update(tool.name for tool in page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tuple(sorted(names))
    raise Unavailable(f"tools/list did not end within {max_pages} pages")
