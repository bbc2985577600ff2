"""Every client a flow registered and no longer uses is deleted at the authorization server
eventually, or the log says why not (``mcp/_registration.py``, ``mcp/_retiring.py``): one
left unused (another worker's registration was stored first) and one the flow cannot use,
whose deletion failed for now, are kept in the registration's record and tried again by a
later flow, as a replaced client is; a client the probe said forgotten, which the
authorization server may still hold (its probe answers proved untrusted), is kept as
retiring and deleted once its grace has passed. Against the consent server on loopback,
the clock injected (``Registering.clock``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client.auth import OAuthRegistrationError
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from psych_runtime.activities import LocalTokenStore
from psych_runtime.activities.mcp._oauth import OAuthClients, StoredTokens
from psych_runtime.activities.mcp._registration import read_registration, still_known
from psych_runtime.activities.mcp._retiring import (
    RETIRE_ATTEMPTS,
    RETIRE_GRACE_SECONDS,
    retry_seconds,
)
from psych_runtime.activities.mcp._stored_registration import retire_due
from psych_runtime.activities.mcp._untrusted import probe_untrusted
from psych_runtime.specs import Scope
from tests.mcp.oauth_fixture import OAuthMcpServer, start_oauth_server

from .test_mcp_registration import SERVER, URL, grant_storage
from .test_mcp_registration_management import register, retiring_in
from .test_mcp_registration_untrusted import flow

LOGGER = "psych_runtime.activities.mcp._registering"
T0 = 1_000_000.0


def started(*extra: str) -> Iterator[OAuthMcpServer]:
    server = start_oauth_server(
        "streamable-http",
        {},
        module="tests.mcp.consent_server",
        extra=("--registration", "--registration-management", *extra),
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def managed() -> Iterator[OAuthMcpServer]:
    yield from started()


@pytest.fixture
def untrusted() -> Iterator[OAuthMcpServer]:
    yield from started("--unknown-code-invalid-client")


async def storage_at(tmp_path: Path, server: OAuthMcpServer, who: str, now: list[float]) -> Any:
    clients = OAuthClients({URL: server.issuer}, LocalTokenStore(tmp_path))
    storage = await grant_storage(clients, SERVER, Scope(tenant="acme", principal=who))
    assert storage.registering is not None
    storage.registering.clock = lambda: now[0]
    return storage


async def raced(
    tmp_path: Path, managed: OAuthMcpServer, now: list[float]
) -> tuple[StoredTokens, StoredTokens, OAuthClientInformationFull, OAuthClientInformationFull, str]:
    """Ann's and Bob's storages (their clock ``now``), Ann's client stored, and the client
    Bob's flow registered at the same time, left unused as Ann's stood (with its
    registration access token); the authorization server fails deletions for now."""
    ann: StoredTokens = await storage_at(tmp_path, managed, "ann", now)
    bob: StoredTokens = await storage_at(tmp_path, managed, "bob", now)
    first, _ = await register(managed, ann.registering, "crm.read")
    await ann.set_client_info(first)
    unused, token = await register(managed, bob.registering, "crm.read")
    managed.set_deletion_reply(503)
    return ann, bob, first, unused, token


async def test_an_unused_client_whose_deletion_failed_is_tried_again_by_a_later_flow(
    tmp_path: Path, managed: OAuthMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    now = [T0]
    # Bob's flow registered at the same time as Ann's; Ann's stood, so Bob's is left
    # unused, and the authorization server fails its deletion for now.
    ann, bob, first, unused, token = await raced(tmp_path, managed, now)
    caplog.set_level("INFO", logger=LOGGER)
    await bob.set_client_info(unused)
    assert bob.client is not None and bob.client.client_id == first.client_id
    assert managed.deletions() == [unused.client_id]
    assert (
        f"the unused client {unused.client_id} (another worker's registration for MCP server "
        f"'crm' was stored first) at the authorization server {managed.issuer} stays "
        f"registered for now: deleting it at {managed.issuer}/register/{unused.client_id} "
        f"failed: HTTP 503 unavailable; a later consent flow tries again "
        f"({RETIRE_ATTEMPTS - 1} tries left)"
    ) in caplog.text
    assert token not in caplog.text
    # Before the fix: tried once, then left registered for good, nobody using it.
    (kept,) = await retiring_in(ann)
    assert (kept["client_id"], kept["attempts"], kept["tried_at"]) == (unused.client_id, 1, T0)
    # No consent ever used it: no grace to wait, only the retry's.
    managed.set_deletion_reply(None)
    assert ann.store is not None and ann.registration is not None and ann.registering is not None
    now[0] += retry_seconds(1) - 1
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deletions() == [unused.client_id]
    now[0] += 1
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deleted() == [unused.client_id]
    assert await retiring_in(ann) == []
    stored = await read_registration(ann.store, ann.registration)
    assert stored is not None and stored.client_id == first.client_id


async def test_an_unusable_client_whose_deletion_failed_is_tried_again_by_a_later_flow(
    tmp_path: Path, managed: OAuthMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    now = [T0]
    ann: StoredTokens = await storage_at(tmp_path, managed, "ann", now)
    assert ann.registering is not None
    # The server registers a client the flow cannot use (private_key_jwt), offering its
    # management, and fails its deletion for now.
    reply = {
        "client_id": "c-unusable",
        "redirect_uris": ["https://psych.test/cb"],
        "token_endpoint_auth_method": "private_key_jwt",
    }
    managed.set_registration_reply(201, json.dumps(reply))
    managed.set_deletion_reply(503)
    caplog.set_level("INFO", logger=LOGGER)
    async with httpx2.AsyncClient() as http:
        answer = await http.post(f"{managed.issuer}/register", json={"redirect_uris": []})
    with pytest.raises(OAuthRegistrationError) as refused:
        await ann.registering.answered(answer)
    uri = f"{managed.issuer}/register/c-unusable"
    assert str(refused.value).endswith(
        f"it stays registered there for now: deleting it at {uri} failed: HTTP 503 "
        "unavailable; a later consent flow tries again"
    )
    assert (
        f"the unusable client c-unusable of MCP server 'crm' at the authorization server "
        f"{managed.issuer} stays registered for now: deleting it at {uri} failed"
    ) in caplog.text
    # Before the fix: tried once, then left registered for good. Kept in a record with no
    # client (none was ever stored), which the client registered next takes over.
    assert ann.store is not None and ann.registration is not None
    assert await read_registration(ann.store, ann.registration) is None
    (kept,) = await retiring_in(ann)
    assert (kept["client_id"], kept["attempts"]) == ("c-unusable", 1)
    managed.reset_registration_reply()
    managed.set_deletion_reply(None)
    usable, _ = await register(managed, ann.registering, "crm.read")
    await ann.set_client_info(usable)
    assert [r["client_id"] for r in await retiring_in(ann)] == ["c-unusable"]
    now[0] += retry_seconds(1)
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deleted() == ["c-unusable"]
    assert await retiring_in(ann) == []


async def test_a_client_the_untrusted_probe_said_forgotten_is_deleted_after_its_grace(
    tmp_path: Path, untrusted: OAuthMcpServer
) -> None:
    store = LocalTokenStore(tmp_path)
    clients = OAuthClients({untrusted.url: untrusted.issuer}, store)
    _, ann = await flow(clients, untrusted, "ann", T0)
    first, _ = await register(untrusted, ann.registering, "crm.read")
    await ann.set_client_info(first)
    # The server still knows it, but answers its probe invalid_client (as it does for any
    # code it never issued): the flow replaces it, and finds the answer untrusted.
    bob, bob_storage = await flow(clients, untrusted, "bob", T0)
    replaced = await still_known(bob, bob_storage)
    assert replaced is not None and replaced.client_id != first.client_id
    assert await probe_untrusted(store, "acme", untrusted.issuer, T0)
    # Before the fix: dropped from the record, never deleted, though still registered.
    (kept,) = await retiring_in(bob_storage)
    assert (kept["client_id"], kept["replaced_at"]) == (first.client_id, T0)
    # A consent link built with it may still be followed: not deleted within its grace.
    assert bob_storage.store is not None and bob_storage.registration is not None
    assert bob_storage.registering is not None
    later = [T0 + RETIRE_GRACE_SECONDS - 1]
    bob_storage.registering.clock = lambda: later[0]
    await retire_due(bob_storage.store, bob_storage.registration, bob_storage.registering)
    assert untrusted.deletions() == []
    later[0] += 1
    await retire_due(bob_storage.store, bob_storage.registration, bob_storage.registering)
    assert untrusted.deleted() == [first.client_id]
    stored = await read_registration(bob_storage.store, bob_storage.registration)
    assert stored is not None and stored.client_id == replaced.client_id
    assert await retiring_in(bob_storage) == []


async def test_a_client_really_forgotten_is_dropped_at_its_deletion_logged(
    tmp_path: Path, managed: OAuthMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    now = [T0]
    ann: StoredTokens = await storage_at(tmp_path, managed, "ann", now)
    first, _ = await register(managed, ann.registering, "crm.read")
    await ann.set_client_info(first)
    managed.forget_registrations()
    managed.set_deletion_reply(404)  # it is gone there
    response = httpx2.Response(400, json={"error": "invalid_client"})
    client: OAuthClientInformationFull = first
    assert await ann.forgot(client, response)
    assert ann.store is not None and ann.registration is not None and ann.registering is not None
    (kept,) = await retiring_in(ann)
    assert kept["client_id"] == first.client_id
    caplog.set_level("INFO", logger=LOGGER)
    now[0] += RETIRE_GRACE_SECONDS
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deletions() == [first.client_id]
    assert await retiring_in(ann) == []
    assert f"{first.client_id} of MCP server 'crm'" in caplog.text
    assert "is not tried again: the authorization server refused its deletion" in caplog.text


async def test_a_consent_is_never_asked_with_a_client_its_registration_retires(
    tmp_path: Path, managed: OAuthMcpServer
) -> None:
    clients = OAuthClients({managed.url: managed.issuer}, LocalTokenStore(tmp_path))
    _, ann = await flow(clients, managed, "ann", T0)
    first, _ = await register(managed, ann.registering, "crm.read")
    await ann.set_client_info(first)
    # Carol holds a token issued to it (her token record names the client, for refreshes).
    _, carol = await flow(clients, managed, "carol", T0)
    await carol.set_tokens(OAuthToken(access_token="tok-c", refresh_token="ref-c"))
    # Another Spec's flow asked more scope: replaced, retiring from T0 (so is a client the
    # probe said forgotten, ``forget_registration``).
    _, bob = await flow(clients, managed, "bob", T0)
    second, _ = await register(managed, bob.registering, "crm.read crm.write")
    await bob.set_client_info(second, replacing=first.client_id)
    assert [r["client_id"] for r in await retiring_in(bob)] == [first.client_id]
    # Near the end of its grace Carol's refresh is refused (invalid_grant: her grant
    # expired), so she consents again: her token record still names the retiring client.
    late = T0 + RETIRE_GRACE_SECONDS - 60
    again, carol = await flow(clients, managed, "carol", late)
    assert await carol.get_tokens() is not None
    again.context.client_info = await carol.get_client_info()
    assert again.context.client_info is not None
    assert again.context.client_info.client_id == first.client_id
    asked = await still_known(again, carol)
    # Before the fix: the link was built with it, and a flow deleted it a minute later
    # while Carol's consent waited (her person would meet the server's error page).
    assert asked is not None and asked.client_id == second.client_id
    assert carol.client is not None and carol.client.client_id == second.client_id
    assert len(managed.registered()) == 2  # the current one taken, none registered


async def test_a_consent_after_a_forgotten_registration_registers_anew(
    tmp_path: Path, managed: OAuthMcpServer
) -> None:
    clients = OAuthClients({managed.url: managed.issuer}, LocalTokenStore(tmp_path))
    _, ann = await flow(clients, managed, "ann", T0)
    first, _ = await register(managed, ann.registering, "crm.read")
    await ann.set_client_info(first)
    _, carol = await flow(clients, managed, "carol", T0)
    await carol.set_tokens(OAuthToken(access_token="tok-c", refresh_token="ref-c"))
    # Ann's refresh was answered invalid_client (wrongly: the server still knows it): the
    # registration is forgotten, the client retiring from T0 in a record with no client.
    refused = httpx2.Response(400, json={"error": "invalid_client"})
    assert await ann.forgot(first, refused)
    assert clients.store is not None and ann.registration is not None
    assert await read_registration(clients.store, ann.registration) is None
    again, carol = await flow(clients, managed, "carol", T0 + RETIRE_GRACE_SECONDS - 60)
    assert await carol.get_tokens() is not None
    again.context.client_info = await carol.get_client_info()
    assert again.context.client_info is not None
    assert again.context.client_info.client_id == first.client_id
    asked = await still_known(again, carol)
    # Before the fix: asked with the retiring client (its probe answered as known).
    assert asked is not None and asked.client_id != first.client_id
    stored = await read_registration(clients.store, ann.registration)
    assert stored is not None and stored.client_id == asked.client_id
    assert [r["client_id"] for r in await retiring_in(carol)] == [first.client_id]
