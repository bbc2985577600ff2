"""The mark a tenant keeps of an authorization server whose answer to the pre-consent probe
cannot be trusted (``mcp/_untrusted.py``) expires after ``UNTRUSTED_SECONDS``: a fixed
server's stored clients are probed again, and one it forgot is replaced before a consent
is asked with it. A mark of an earlier build (no time in it) counts as expired. The clock
is injected (``Registering.clock``); the authorization server is the consent server on
loopback. The marking itself, in a real Run, is
``tests/e2e/test_mcp_consent_registration_probe.py``'s."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from mcp.shared.auth import OAuthClientInformationFull, OAuthMetadata

from psych_runtime.activities import LocalTokenStore
from psych_runtime.activities.mcp._consent import ConsentProvider
from psych_runtime.activities.mcp._oauth import OAuthClients, StoredTokens
from psych_runtime.activities.mcp._registration import still_known
from psych_runtime.activities.mcp._told import ForServer
from psych_runtime.activities.mcp._untrusted import (
    UNTRUSTED,
    UNTRUSTED_SECONDS,
    probe_untrusted,
    untrusted_key,
)
from psych_runtime.specs import McpServer, Scope
from tests.mcp.oauth_fixture import OAuthMcpServer, start_oauth_server

from .test_mcp_registration import OAUTH

T0 = 1_800_000_000.0
"""When the mark was set, in the injected clock's seconds."""


@pytest.fixture
def server() -> Iterator[OAuthMcpServer]:
    started = start_oauth_server(
        "streamable-http", {}, module="tests.mcp.consent_server", extra=("--registration",)
    )
    try:
        yield started
    finally:
        started.stop()


async def flow(
    clients: OAuthClients, server: OAuthMcpServer, principal: str, now: float
) -> tuple[ConsentProvider, StoredTokens]:
    """A consent flow of ``principal`` (tenant acme) that discovered the authorization
    server and read the stored client, its clock at ``now``."""
    spec = McpServer(name="crm", url=server.url, oauth=OAUTH)
    grant = await clients.grant(spec, Scope(tenant="acme", principal=principal), None)
    assert isinstance(grant.auth, ForServer) and isinstance(grant.auth.inner, ConsentProvider)
    provider = grant.auth.inner
    storage = provider.context.storage
    assert isinstance(storage, StoredTokens) and storage.registering is not None
    storage.registering.clock = lambda: now
    async with httpx2.AsyncClient() as http:
        found = await http.get(f"{server.issuer}/.well-known/oauth-authorization-server")
    provider.context.oauth_metadata = OAuthMetadata.model_validate(found.json())
    provider.context.auth_server_url = server.issuer  # as its resource metadata names it
    provider.context.client_info = await storage.get_client_info()
    return provider, storage


async def test_an_untrusted_mark_expires_and_a_fixed_server_is_probed_again(
    tmp_path: Path, server: OAuthMcpServer
) -> None:
    store = LocalTokenStore(tmp_path)
    clients = OAuthClients({server.url: server.issuer}, store)
    _, ann = await flow(clients, server, "ann", T0)
    sent = {"redirect_uris": list(OAUTH.redirect_uris), "token_endpoint_auth_method": "none"}
    async with httpx2.AsyncClient() as http:
        answer = await http.post(f"{server.issuer}/register", json=sent)
    first = OAuthClientInformationFull.model_validate(answer.json())
    await ann.set_client_info(first)
    key = untrusted_key("acme", server.issuer)
    record = {"key": ["acme", None, server.issuer, UNTRUSTED, server.issuer], "client_id": "c0"}
    await store.put(key, json.dumps({**record, "at": T0}).encode())
    # The server forgets the client; it answers the probe as RFC 6749 says (fixed).
    server.forget_registrations()
    bob, bob_storage = await flow(clients, server, "bob", T0 + UNTRUSTED_SECONDS - 1)
    kept = await still_known(bob, bob_storage)
    # Within the bound: not probed, the consent would be asked with the forgotten client.
    assert kept is not None and kept.client_id == first.client_id
    assert len(server.registered()) == 1
    carol, carol_storage = await flow(clients, server, "carol", T0 + UNTRUSTED_SECONDS)
    replaced = await still_known(carol, carol_storage)
    # Before the fix: the mark never expired, the forgotten client was used again.
    assert replaced is not None and replaced.client_id != first.client_id
    assert [item["client_id"] for item in server.registered()][1:] == [replaced.client_id]
    # Its own probe said invalid_grant: the server is not marked again.
    assert not await probe_untrusted(store, "acme", server.issuer, T0 + UNTRUSTED_SECONDS)
    # A mark of an earlier build holds no time: expired; one set now is not.
    await store.put(key, json.dumps(record).encode())
    assert not await probe_untrusted(store, "acme", server.issuer, T0)
    await store.put(key, json.dumps({**record, "at": T0}).encode())
    assert await probe_untrusted(store, "acme", server.issuer, T0)


async def test_a_mark_dated_far_ahead_of_the_clock_counts_as_expired(tmp_path: Path) -> None:
    store, issuer = LocalTokenStore(tmp_path), "https://as.test"
    key = untrusted_key("acme", issuer)
    record = {"key": ["acme", None, issuer, UNTRUSTED, issuer], "client_id": "c0"}
    # Set by a worker whose clock ran a day ahead: it holds (for at most two bounds).
    await store.put(key, json.dumps({**record, "at": T0 + 24 * 3600}).encode())
    assert await probe_untrusted(store, "acme", issuer, T0)
    # Set by one whose clock ran years ahead: before the fix it held for those years.
    await store.put(key, json.dumps({**record, "at": T0 + 10 * 365 * 24 * 3600}).encode())
    assert not await probe_untrusted(store, "acme", issuer, T0)
    assert not await probe_untrusted(store, "acme", issuer, T0 + UNTRUSTED_SECONDS)
