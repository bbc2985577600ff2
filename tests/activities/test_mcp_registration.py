"""A dynamically registered ``authorization_code`` client (``mcp/_registration.py``): the
keys its registration and tokens live under, the registration kept in and read from a real
local token store (the first stored standing), its secret redacted, how a refused
registration is told, and the RFC 7592 deletion of one left unused against the consent
server on loopback. The flow against a real authorization server is
``tests/e2e/test_mcp_consent_registration.py``'s (and ``..._registration_race.py``'s)."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import httpx2
import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import (
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
)

from psych_runtime.activities import LocalTokenStore
from psych_runtime.activities.egress import Egress, EgressRules, EgressSettings
from psych_runtime.activities.mcp._consent import ConsentProvider
from psych_runtime.activities.mcp._held import HeldRedactor, TokensHeld
from psych_runtime.activities.mcp._oauth import OAuthClients, OAuthUnavailable, StoredTokens
from psych_runtime.activities.mcp._registering import (
    Registering,
    client_refused,
    registration_refused,
)
from psych_runtime.activities.mcp._registration import (
    asked_before,
    forget_registration,
    read_registration,
)
from psych_runtime.activities.mcp._told import ForServer
from psych_runtime.activities.tokens import TokenKey
from psych_runtime.specs import McpOAuth, McpServer, Scope
from tests.mcp.oauth_fixture import start_oauth_server

URL = "https://crm.test/mcp"
ISSUER = "https://auth.test"
OAUTH = McpOAuth(grant="authorization_code", redirect_uris=("https://psych.test/cb",))
SERVER = McpServer(name="crm", url=URL, oauth=OAUTH)


def registered(client_id: str, secret: str | None = None) -> OAuthClientInformationFull:
    return OAuthClientInformationFull(
        client_id=client_id,
        client_secret=secret,
        redirect_uris=None,
        token_endpoint_auth_method="none" if secret is None else "client_secret_post",
    )


async def grant_storage(clients: OAuthClients, server: McpServer, scope: Scope) -> StoredTokens:
    """The ``StoredTokens`` inside the grant's provider (``ForServer`` -> the SDK's)."""
    grant = await clients.grant(server, scope, None)
    assert isinstance(grant.auth, ForServer) and isinstance(grant.auth.inner, ConsentProvider)
    storage = grant.auth.inner.context.storage
    assert isinstance(storage, StoredTokens)
    return storage


async def test_one_registration_per_tenant_reused_by_its_principals(tmp_path: Path) -> None:
    store = LocalTokenStore(tmp_path)
    clients = OAuthClients({URL: ISSUER}, store)
    ann = await grant_storage(clients, SERVER, Scope(tenant="acme", principal="ann"))
    bob = await grant_storage(clients, SERVER, Scope(tenant="acme", principal="bob"))
    globex = await grant_storage(clients, SERVER, Scope(tenant="globex"))
    # The tokens' key names the client by the metadata's digest, the issuer the operator's.
    assert ann.key.client_id.startswith("psych:dcr:") and ann.key.issuer == ISSUER
    assert ann.key.client_id == bob.key.client_id == globex.key.client_id
    assert ann.registration == bob.registration != globex.registration
    assert await ann.get_client_info() is None  # nothing registered yet: the SDK registers
    await ann.set_client_info(registered("client-acme"))
    bob_client = await bob.get_client_info()
    assert bob_client is not None and bob_client.client_id == "client-acme"
    assert await globex.get_client_info() is None
    # Other client metadata: another registration.
    named = OAUTH.model_copy(update={"client_name": "other"})
    other = await grant_storage(
        clients, SERVER.model_copy(update={"oauth": named}), Scope(tenant="acme")
    )
    assert other.registration != ann.registration and other.key.client_id != ann.key.client_id
    assert await other.get_client_info() is None


async def test_a_token_keeps_the_client_it_was_issued_to(tmp_path: Path) -> None:
    store = LocalTokenStore(tmp_path)
    clients = OAuthClients({URL: ISSUER}, store)
    scope = Scope(tenant="acme")
    first = await grant_storage(clients, SERVER, scope)
    await first.set_client_info(registered("client-1"))
    await first.set_tokens(OAuthToken(access_token="tok-1", refresh_token="ref-1"))
    # The registration was replaced meanwhile (the server forgot client-1, another worker
    # registered client-2).
    other = await grant_storage(clients, SERVER, scope)
    assert other.registration is not None
    await forget_registration(store, other.registration, "client-1", time.time())
    await other.set_client_info(registered("client-2"))
    later = await grant_storage(clients, SERVER, scope)
    token = await later.get_tokens()
    client = await later.get_client_info()
    assert token is not None and token.refresh_token == "ref-1"
    assert client is not None and client.client_id == "client-1"


async def test_the_registration_stored_first_stands_for_a_later_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two workers that registered at once: the second to store its registration takes
    the first's (its answer offered no management: its own stays at the server, logged)."""
    store = LocalTokenStore(tmp_path)
    clients = OAuthClients({URL: ISSUER}, store)
    ann = await grant_storage(clients, SERVER, Scope(tenant="acme", principal="ann"))
    bob = await grant_storage(clients, SERVER, Scope(tenant="acme", principal="bob"))
    assert await ann.get_client_info() is None and await bob.get_client_info() is None
    await ann.set_client_info(registered("client-1"))
    caplog.set_level("INFO", logger="psych_runtime.activities.mcp._registering")
    await bob.set_client_info(registered("client-2", "minted-secret-2"))
    # Before the fix: the later registration replaced the earlier one in the store.
    assert bob.client is not None and bob.client.client_id == "client-1"
    assert ann.registration is not None
    stored = await read_registration(store, ann.registration)
    assert stored is not None and stored.client_id == "client-1"
    assert (
        f"the unused client client-2 (another worker's registration for MCP server 'crm' was "
        f"stored first) at the authorization server {ISSUER} stays registered: its "
        "registration offered no management"
    ) in caplog.text
    assert "minted-secret-2" not in caplog.text


async def test_a_registration_keeps_the_scope_it_asked_and_replaces_only_its_own(
    tmp_path: Path,
) -> None:
    """``still_known``'s bound: a client whose registration asked for a scope is not
    registered again for it (the server registered less); a replacement stands only in
    place of the client it replaces (another worker's, stored since, stands)."""
    store = LocalTokenStore(tmp_path)
    clients = OAuthClients({URL: ISSUER}, store)
    ann = await grant_storage(clients, SERVER, Scope(tenant="acme", principal="ann"))
    assert ann.registration is not None and ann.registering is not None
    key = ann.registration
    ann.registering.asked = "crm.read crm.write"
    await ann.set_client_info(registered("client-1"))
    assert await asked_before(store, key, "client-1", "crm.write")
    assert not await asked_before(store, key, "client-1", "crm.write crm.admin")
    assert not await asked_before(store, key, "client-2", "crm.write")
    ann.registering.asked = "crm.admin"
    await ann.set_client_info(registered("client-2"), replacing="client-1")
    assert ann.client is not None and ann.client.client_id == "client-2"
    await ann.set_client_info(registered("client-3"), replacing="client-1")
    assert ann.client is not None and ann.client.client_id == "client-2"
    assert await asked_before(store, key, "client-2", "crm.admin")


async def test_a_registration_under_another_key_is_ignored(tmp_path: Path) -> None:
    store = LocalTokenStore(tmp_path)
    clients = OAuthClients({URL: ISSUER}, store)
    acme = await grant_storage(clients, SERVER, Scope(tenant="acme"))
    globex = await grant_storage(clients, SERVER, Scope(tenant="globex"))
    await acme.set_client_info(registered("client-acme"))
    assert acme.registration is not None and globex.registration is not None
    moved = await store.get(acme.registration)
    assert moved is not None
    await store.put(globex.registration, moved)
    assert await globex.get_client_info() is None


async def test_a_registered_client_secret_is_redacted(tmp_path: Path) -> None:
    clients = OAuthClients({URL: ISSUER}, LocalTokenStore(tmp_path))
    scope = Scope(tenant="acme")
    grant = await clients.grant(SERVER, scope, None)
    storage = await grant_storage(clients, SERVER, scope)
    await storage.set_client_info(registered("client-acme", "minted-secret-0123"))
    assert isinstance(grant.redact, HeldRedactor)
    said = grant.redact("the server echoed minted-secret-0123")
    assert "minted-secret-0123" not in said and "REDACTED" in said


async def test_what_is_refused_before_anything_is_registered() -> None:
    clients = OAuthClients({}, None)
    scope = Scope(tenant="acme")
    with pytest.raises(
        OAuthUnavailable, match=f"no authorization server is configured for MCP server '{URL}'"
    ):
        await clients.grant(SERVER, scope, None)
    clients = OAuthClients({URL: ISSUER}, None)
    off = SERVER.model_copy(
        update={"oauth": OAUTH.model_copy(update={"allow_dynamic_registration": False})}
    )
    with pytest.raises(OAuthUnavailable, match="allow_dynamic_registration is false"):
        await clients.grant(off, scope, None)
    secret = SERVER.model_copy(
        update={"oauth": OAUTH.model_copy(update={"client_secret_credential": "crm_secret"})}
    )
    with pytest.raises(OAuthUnavailable, match="gets its own from the registration"):
        await clients.grant(secret, scope, None)


def answer(status: int, body: bytes) -> httpx2.Response:
    request = httpx2.Request("POST", f"{ISSUER}/register")
    return httpx2.Response(status, content=body, request=request)


async def test_a_refused_registration_names_the_server_and_its_error() -> None:
    assert await registration_refused(answer(201, b'{"client_id": "c-1"}'), ISSUER) is None
    body = json.dumps({"error": "invalid_client_metadata", "error_description": "bad\nname"})
    refused = await registration_refused(answer(400, body.encode()), ISSUER)
    assert str(refused) == (
        f"the authorization server {ISSUER} refused the dynamic client registration at "
        f"{ISSUER}/register: HTTP 400 invalid_client_metadata: bad name"
    )
    # Not an OAuth error answer: only the status (the body is not repeated).
    refused = await registration_refused(answer(503, b"<html>down</html>"), ISSUER)
    assert str(refused).endswith("/register: HTTP 503")


async def test_a_session_adopting_a_stored_token_takes_the_client_it_was_issued_to(
    tmp_path: Path,
) -> None:
    store = LocalTokenStore(tmp_path)
    clients = OAuthClients({URL: ISSUER}, store)
    scope = Scope(tenant="acme", principal="ann")
    grant = await clients.grant(SERVER, scope, None)
    assert isinstance(grant.auth, ForServer) and isinstance(grant.auth.inner, ConsentProvider)
    provider = grant.auth.inner
    storage = provider.context.storage
    assert isinstance(storage, StoredTokens)
    await storage.set_client_info(registered("client-1"))
    await storage.set_tokens(OAuthToken(access_token="tok-1", refresh_token="ref-1"))
    await provider._initialize()  # the session holds tok-1, issued to client-1
    # Meanwhile another worker registered client-2 (the two registered at once, or the
    # server forgot client-1) and the person consented with it: tok-2 is client-2's.
    other = clients.tokens(storage.key, registered("client-2"))
    await other.set_tokens(OAuthToken(access_token="tok-2", refresh_token="ref-2"))
    # The session's token expired: it takes the stored one, and refreshes it as the
    # client it was issued to (before the fix: as client-1, which the server refuses).
    provider.context.token_expiry_time = 1.0
    assert await provider._adopt_stored()
    refresh = await provider._refresh_token()
    assert b"refresh_token=ref-2" in refresh.content
    assert b"client_id=client-2" in refresh.content
    client = provider.context.client_info
    assert client is not None and client.client_id == "client-2"


async def test_a_registration_answer_with_no_usable_client_is_told_without_its_values() -> None:
    secret = b'{"client_secret": "minted-9f8e7d", "redirect_uris": ["no url"]}'
    refused = await registration_refused(answer(201, secret), ISSUER)
    assert str(refused) == (
        f"the authorization server {ISSUER} answered the dynamic client registration at "
        f"{ISSUER}/register with no usable client: redirect_uris.0: Input should be a valid "
        "URL, relative URL without a base; client_id: Field required"
    )
    refused = await registration_refused(answer(200, b"[1]"), ISSUER)
    assert str(refused).endswith("with no usable client: the answer is not a JSON object")


async def test_an_answer_nested_past_the_parsers_depth_is_told_as_any_unreadable_one() -> None:
    # The SDK reads such an answer as no JSON (a ValueError it tells); read here first, it
    # raised RecursionError out of the flow: a registration, a refresh or a code exchange.
    deep = b"[" * 100_000 + b"]" * 100_000
    refused = await registration_refused(answer(201, deep), ISSUER)
    assert str(refused).endswith("with no usable client: the answer is not a JSON object")
    refused = await registration_refused(answer(400, deep), ISSUER)
    assert str(refused).endswith("/register: HTTP 400")
    assert not await client_refused(answer(401, deep))
    nested = b'{"error": "invalid_client", "more": ' + deep + b"}"
    assert not await client_refused(answer(400, nested))


async def test_an_unused_registration_is_deleted_with_its_management_token(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = start_oauth_server(
        "streamable-http",
        {},
        module="tests.mcp.consent_server",
        extra=("--registration", "--registration-management"),
    )
    try:
        registering = Registering(Egress(), "acme", "crm", server.issuer)
        metadata = {"redirect_uris": ["http://127.0.0.1/cb"], "token_endpoint_auth_method": "none"}
        async with httpx2.AsyncClient() as http:
            answer = await http.post(f"{server.issuer}/register", json=metadata)
        await registering.answered(answer)
        offered = registering.offered
        assert offered is not None and offered.client_id == answer.json()["client_id"]
        assert offered.token not in repr(offered)
        caplog.set_level("INFO", logger="psych_runtime.activities.mcp._registering")
        # A token the server does not take: logged naming the client, nothing raised.
        registering.offered = dataclasses.replace(offered, token="not-it")
        await registering.discard(offered.client_id)
        assert (
            f"the unused client {offered.client_id} (another worker's registration for MCP "
            f"server 'crm' was stored first) at the authorization server {server.issuer} "
            f"is not tried again: the authorization server refused its deletion at "
            f"{offered.uri}: HTTP 401 invalid_token"
        ) in caplog.text
        assert server.deleted() == []
        registering.offered = offered
        await registering.discard(offered.client_id)
        assert server.deleted() == [offered.client_id]
        assert f"deleted the unused client {offered.client_id}" in caplog.text
        assert offered.token not in caplog.text
    finally:
        server.stop()


async def test_a_stored_client_is_probed_at_the_token_endpoint_through_the_egress(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``Registering.probe``: ``invalid_grant`` for a client the server knows,
    ``invalid_client`` once it forgot it; through the tenant's egress (refused there: no
    telling, logged naming the client), the client's secret never in what is logged."""
    server = start_oauth_server(
        "streamable-http", {}, module="tests.mcp.consent_server", extra=("--registration",)
    )
    try:
        sent = {
            "redirect_uris": ["http://127.0.0.1/cb"],
            "token_endpoint_auth_method": "client_secret_post",
        }
        async with httpx2.AsyncClient() as http:
            answer = await http.post(f"{server.issuer}/register", json=sent)
            found = await http.get(f"{server.issuer}/.well-known/oauth-authorization-server")
        client = OAuthClientInformationFull.model_validate(answer.json())
        assert client.client_secret
        key = TokenKey("acme", None, server.issuer, client.client_id, server.url)
        storage = StoredTokens(None, key, TokensHeld(), client)
        provider = OAuthClientProvider(
            server.url, OAuthClientMetadata.model_validate(sent), storage
        )
        provider.context.client_info = client
        provider.context.oauth_metadata = OAuthMetadata.model_validate(found.json())
        registering = Registering(Egress(), "acme", "crm", server.issuer)
        known = await registering.probe(provider)
        assert known is not None and known.json()["error"] == "invalid_grant", known
        server.forget_registrations()
        forgotten = await registering.probe(provider)
        assert forgotten is not None and await client_refused(forgotten), forgotten
        caplog.set_level("WARNING", logger="psych_runtime.activities.mcp._registering")
        denied = EgressSettings(
            rules=EgressRules.parse("127.0.0.1/32"),
            tenants={"acme": EgressRules.parse(deny="127.0.0.1/32")},
        )
        refused = Registering(Egress(denied), "acme", "crm", server.issuer)
        assert await refused.probe(provider) is None
        assert (
            f"could not tell whether the authorization server {server.issuer} still knows "
            f"the client {client.client_id} of MCP server 'crm'"
        ) in caplog.text
        assert "egress refused" in caplog.text
        assert client.client_secret not in caplog.text
    finally:
        server.stop()
