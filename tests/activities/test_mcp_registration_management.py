"""RFC 7592 management of a dynamically registered client kept with its registration
(``mcp/_registration.py``): the stored client a registration for a wider scope replaces is
kept in the record as retiring and deleted at the authorization server, with the
management stored with it (sealed with the record, as the client's secret is), by a flow
that reads the record once its grace has passed (``mcp/_retiring.py``), not before; a
record of an earlier build, which stored none, still loads, and its client stays
registered there (logged); a failed deletion is logged naming the client and is no
failure of the flow: tried again by a later flow when it failed for now (unreachable, a
5xx), a bounded number of times, not when the server refused it for good (404, 401);
and a registration forgotten (its client unknown to the server) keeps its retiring
clients for the one registered next. Against the consent server on loopback; the
whole flow is ``tests/e2e/test_mcp_consent_registration_scope.py``'s."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.shared.auth import OAuthClientInformationFull

from psych_runtime.activities import LocalTokenStore
from psych_runtime.activities.mcp._oauth import OAuthClients, StoredTokens
from psych_runtime.activities.mcp._registering import Registering
from psych_runtime.activities.mcp._registration import forget_registration, read_registration
from psych_runtime.activities.mcp._retiring import (
    RETIRE_ATTEMPTS,
    RETIRE_GRACE_SECONDS,
    retry_seconds,
)
from psych_runtime.activities.mcp._stored_registration import retire_due
from psych_runtime.specs import Scope
from tests.mcp.oauth_fixture import OAuthMcpServer, start_oauth_server

from .test_mcp_registration import SERVER, URL, grant_storage

pytestmark = pytest.mark.long

LOGGER = "psych_runtime.activities.mcp._registering"


@pytest.fixture
def managed() -> Iterator[OAuthMcpServer]:
    server = start_oauth_server(
        "streamable-http",
        {},
        module="tests.mcp.consent_server",
        extra=("--registration", "--registration-management"),
    )
    try:
        yield server
    finally:
        server.stop()


async def register(
    server: OAuthMcpServer, registering: Registering | None, scope: str
) -> tuple[OAuthClientInformationFull, str]:
    """A client registered at ``server`` for ``scope``, its answer read by the flow's
    ``registering``; and the answer's registration access token."""
    assert registering is not None
    sent = {
        "redirect_uris": ["https://psych.test/cb"],
        "token_endpoint_auth_method": "none",
        "scope": scope,
    }
    async with httpx2.AsyncClient() as http:
        answer = await http.post(f"{server.issuer}/register", json=sent)
    await registering.answered(answer)
    body = answer.json()
    return OAuthClientInformationFull.model_validate(body), body["registration_access_token"]


async def storages(tmp_path: Path, server: OAuthMcpServer) -> tuple[StoredTokens, StoredTokens]:
    clients = OAuthClients({URL: server.issuer}, LocalTokenStore(tmp_path))
    ann = await grant_storage(clients, SERVER, Scope(tenant="acme", principal="ann"))
    bob = await grant_storage(clients, SERVER, Scope(tenant="acme", principal="bob"))
    return ann, bob


async def edit_record(storage: StoredTokens, edit: Any) -> None:
    """Rewrite the stored registration record's JSON with ``edit`` (a store not sealed)."""
    assert storage.store is not None and storage.registration is not None
    data = await storage.store.get(storage.registration)
    assert data is not None
    record = json.loads(data)
    edit(record)
    await storage.store.put(storage.registration, json.dumps(record).encode())


async def test_a_replaced_client_is_deleted_once_its_grace_has_passed(
    tmp_path: Path, managed: OAuthMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    ann, bob = await storages(tmp_path, managed)
    now = [1_000_000.0]
    for storage in (ann, bob):
        assert storage.registering is not None
        storage.registering.clock = lambda: now[0]
    first, token = await register(managed, ann.registering, "crm.read")
    await ann.set_client_info(first)
    assert ann.store is not None and ann.registration is not None
    data = await ann.store.get(ann.registration)
    assert data is not None and token in data.decode()  # kept with it (the store seals it)
    caplog.set_level("INFO", logger=LOGGER)
    # Another flow asks more: its client, registered for both, replaces the stored one.
    second, _ = await register(managed, bob.registering, "crm.read crm.write")
    await bob.set_client_info(second, replacing=first.client_id)
    assert bob.client is not None and bob.client.client_id == second.client_id
    # Before the fix: the replaced client was deleted at once, and a consent link built
    # with it led to the authorization server's error page.
    assert managed.deletions() == []
    data = await ann.store.get(ann.registration)
    assert data is not None
    (retiring,) = json.loads(data)["retiring"]
    assert (retiring["client_id"], retiring["replaced_at"]) == (first.client_id, now[0])
    # A flow that reads the record before the grace has passed leaves it registered.
    assert ann.registering is not None
    now[0] += RETIRE_GRACE_SECONDS - 1
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deletions() == []
    # One after it deletes it, and takes it out of the record: no flow deletes it again.
    now[0] += 1
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deleted() == [first.client_id]
    assert (
        f"deleted the replaced client {first.client_id} of MCP server 'crm' at the "
        f"authorization server {managed.issuer}"
    ) in caplog.text
    assert token not in caplog.text
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deletions() == [first.client_id]
    data = await ann.store.get(ann.registration)
    assert data is not None and json.loads(data)["retiring"] == []
    stored = await read_registration(ann.store, ann.registration)
    assert stored is not None and stored.client_id == second.client_id


async def test_a_replaced_client_without_stored_management_or_deletable_stays_logged(
    tmp_path: Path, managed: OAuthMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    ann, bob = await storages(tmp_path, managed)
    first, _ = await register(managed, ann.registering, "crm.read")
    await ann.set_client_info(first)
    # A record an earlier build stored: no management, no retiring in it. It still loads.
    await edit_record(ann, lambda record: [record.pop(f) for f in ("management", "retiring")])
    assert ann.store is not None and ann.registration is not None
    earlier = await read_registration(ann.store, ann.registration)
    assert earlier is not None and earlier.client_id == first.client_id
    caplog.set_level("INFO", logger=LOGGER)
    second, token = await register(managed, bob.registering, "crm.read crm.write")
    await bob.set_client_info(second, replacing=first.client_id)
    assert bob.client is not None and bob.client.client_id == second.client_id
    assert managed.deletions() == []
    assert (
        f"the replaced client {first.client_id} of MCP server 'crm' at the authorization "
        f"server {managed.issuer} stays registered: no RFC 7592 management was stored "
        "with it"
    ) in caplog.text
    # A deletion the server refuses (a token it does not take): logged naming the
    # client, no failure of the flow, the new client stands; not tried again.
    await edit_record(bob, lambda record: record["management"].update(token="not-it"))
    third, _ = await register(managed, ann.registering, "crm.read crm.write crm.admin")
    await ann.set_client_info(third, replacing=second.client_id)
    assert ann.client is not None and ann.client.client_id == third.client_id
    assert ann.registering is not None
    later = time.time() + RETIRE_GRACE_SECONDS
    ann.registering.clock = lambda: later
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deletions() == [second.client_id]
    assert managed.deleted() == []
    assert (
        f"the replaced client {second.client_id} of MCP server 'crm' at the authorization "
        f"server {managed.issuer} is not tried again: the authorization server refused its "
        f"deletion at {managed.issuer}/register/{second.client_id}: HTTP 401 invalid_token"
    ) in caplog.text
    assert token not in caplog.text
    data = await ann.store.get(ann.registration)
    assert data is not None and json.loads(data)["retiring"] == []


async def replaced(
    tmp_path: Path, server: OAuthMcpServer, now: list[float]
) -> tuple[StoredTokens, OAuthClientInformationFull, OAuthClientInformationFull]:
    """Ann's storage (its clock ``now``), the client first stored, and the one registered
    for more scope by another flow that replaced it (kept as retiring since ``now``)."""
    ann, bob = await storages(tmp_path, server)
    for storage in (ann, bob):
        assert storage.registering is not None
        storage.registering.clock = lambda: now[0]
    first, _ = await register(server, ann.registering, "crm.read")
    await ann.set_client_info(first)
    second, _ = await register(server, bob.registering, "crm.read crm.write")
    await bob.set_client_info(second, replacing=first.client_id)
    return ann, first, second


async def retiring_in(storage: StoredTokens) -> list[dict[str, Any]]:
    assert storage.store is not None and storage.registration is not None
    data = await storage.store.get(storage.registration)
    assert data is not None
    retiring: list[dict[str, Any]] = json.loads(data)["retiring"]
    return retiring


async def test_a_forgotten_registration_hands_its_retiring_clients_to_the_next(
    tmp_path: Path, managed: OAuthMcpServer
) -> None:
    now = [1_000_000.0]
    ann, first, second = await replaced(tmp_path, managed, now)
    assert ann.store is not None and ann.registration is not None
    # The authorization server forgot the current client: its registration is forgotten,
    # but the client it replaced is still registered there and must still be deleted.
    # Before the fix: the whole record went, and with it the retiring client, for good.
    # The forgotten one is kept too: the server's answer may have been wrong (it is still
    # registered here: forgotten in the store only).
    await forget_registration(ann.store, ann.registration, second.client_id, now[0])
    assert await read_registration(ann.store, ann.registration) is None
    both = [first.client_id, second.client_id]
    assert [r["client_id"] for r in await retiring_in(ann)] == both
    # A flow whose clock is past the grace, with no current client, deletes them...
    later = [now[0] + RETIRE_GRACE_SECONDS]
    assert ann.registering is not None
    ann.registering.clock = lambda: later[0]
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deleted() == both
    # ...and so does the record of the client registered next, which carries them on.
    ann, first, second = await replaced(tmp_path / "again", managed, now)
    assert ann.store is not None and ann.registration is not None
    await forget_registration(ann.store, ann.registration, second.client_id, now[0])
    third, _ = await register(managed, ann.registering, "crm.read crm.write")
    await ann.set_client_info(third)
    stored = await read_registration(ann.store, ann.registration)
    assert stored is not None and stored.client_id == third.client_id
    both = [first.client_id, second.client_id]
    assert [r["client_id"] for r in await retiring_in(ann)] == both
    assert ann.registering is not None
    ann.registering.clock = lambda: later[0]
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deleted()[2:] == both
    assert await retiring_in(ann) == []


async def test_a_failed_deletion_is_tried_again_by_a_later_flow(
    tmp_path: Path, managed: OAuthMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1_000_000.0]
    ann, first, _ = await replaced(tmp_path, managed, now)
    assert ann.store is not None and ann.registration is not None and ann.registering is not None
    caplog.set_level("INFO", logger=LOGGER)
    uri = f"{managed.issuer}/register/{first.client_id}"
    # The authorization server is down (nothing listens where its management is).
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{closed.getsockname()[1]}/register/{first.client_id}"
    await edit_record(ann, lambda record: record["retiring"][0]["management"].update(uri=down))
    now[0] += RETIRE_GRACE_SECONDS
    await retire_due(ann.store, ann.registration, ann.registering)
    # Before the fix: taken out of the record before its DELETE, never tried again.
    (kept,) = await retiring_in(ann)
    assert (kept["client_id"], kept["attempts"], kept["tried_at"]) == (first.client_id, 1, now[0])
    assert (
        f"the replaced client {first.client_id} of MCP server 'crm' at the authorization "
        f"server {managed.issuer} stays registered for now: deleting it at {down} failed: "
        f"ConnectError"
    ) in caplog.text
    assert f"a later consent flow tries again ({RETIRE_ATTEMPTS - 1} tries left)" in caplog.text
    # Back, but answering 503: a flow before the next try is due sends nothing.
    await edit_record(ann, lambda record: record["retiring"][0]["management"].update(uri=uri))
    managed.set_deletion_reply(503)
    now[0] += retry_seconds(1) - 1
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deletions() == []
    now[0] += 1
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deletions() == [first.client_id]
    (kept,) = await retiring_in(ann)
    assert (kept["attempts"], kept["tried_at"]) == (2, now[0])
    assert f"deleting it at {uri} failed: HTTP 503 unavailable" in caplog.text
    # Up again: the next try deletes it, and it leaves the record.
    managed.set_deletion_reply(None)
    now[0] += retry_seconds(2)
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deleted() == [first.client_id]
    assert await retiring_in(ann) == []


async def test_a_deletion_failing_every_try_is_given_up_naming_the_client(
    tmp_path: Path, managed: OAuthMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1_000_000.0]
    ann, first, _ = await replaced(tmp_path, managed, now)
    assert ann.store is not None and ann.registration is not None and ann.registering is not None
    caplog.set_level("INFO", logger=LOGGER)
    managed.set_deletion_reply(500)
    now[0] += RETIRE_GRACE_SECONDS
    for attempt in range(1, RETIRE_ATTEMPTS + 1):
        await retire_due(ann.store, ann.registration, ann.registering)
        assert managed.deletions() == [first.client_id] * attempt
        now[0] += retry_seconds(attempt)
    assert await retiring_in(ann) == []
    assert (
        f"the replaced client {first.client_id} of MCP server 'crm' at the authorization "
        f"server {managed.issuer} stays registered: deleting it at {managed.issuer}/register/"
        f"{first.client_id} failed: HTTP 500 unavailable, and no try is left"
    ) in caplog.text
    await retire_due(ann.store, ann.registration, ann.registering)
    assert len(managed.deletions()) == RETIRE_ATTEMPTS


async def test_a_deletion_refused_for_good_is_not_tried_again(
    tmp_path: Path, managed: OAuthMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1_000_000.0]
    ann, first, _ = await replaced(tmp_path, managed, now)
    assert ann.store is not None and ann.registration is not None and ann.registering is not None
    caplog.set_level("INFO", logger=LOGGER)
    managed.set_deletion_reply(404)  # the authorization server no longer has it
    now[0] += RETIRE_GRACE_SECONDS
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deletions() == [first.client_id]
    assert await retiring_in(ann) == []
    assert (
        f"the replaced client {first.client_id} of MCP server 'crm' at the authorization "
        f"server {managed.issuer} is not tried again: the authorization server refused its "
        f"deletion at {managed.issuer}/register/{first.client_id}: HTTP 404 not_found"
    ) in caplog.text
    now[0] += retry_seconds(RETIRE_ATTEMPTS)
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deletions() == [first.client_id]


async def test_a_failed_deletion_is_put_back_beside_what_another_flow_wrote_meanwhile(
    tmp_path: Path, managed: OAuthMcpServer
) -> None:
    now = [1_000_000.0]
    ann, first, second = await replaced(tmp_path, managed, now)
    assert ann.store is not None and ann.registration is not None and ann.registering is not None
    other = await grant_storage(
        OAuthClients({URL: managed.issuer}, LocalTokenStore(tmp_path)),
        SERVER,
        Scope(tenant="acme", principal="cy"),
    )
    managed.set_deletion_reply(503)
    now[0] += RETIRE_GRACE_SECONDS
    sending, third = ann.registering.send, list[str]()

    async def send(request: httpx2.Request) -> httpx2.Response:
        # While this flow's DELETE is under way, another flow replaces the current client.
        if request.method == "DELETE" and not third:
            fresh, _ = await register(managed, other.registering, "crm.read crm.write crm.x")
            await other.set_client_info(fresh, replacing=second.client_id)
            third.append(fresh.client_id)
        return await sending(request)

    ann.registering.send = send  # type: ignore[method-assign]
    await retire_due(ann.store, ann.registration, ann.registering)
    stored = await read_registration(ann.store, ann.registration)
    assert stored is not None and [stored.client_id] == third
    kept = {r["client_id"]: r["attempts"] for r in await retiring_in(ann)}
    assert kept == {second.client_id: 0, first.client_id: 1}


async def test_two_flows_past_the_grace_at_once_delete_the_replaced_client_once(
    tmp_path: Path, managed: OAuthMcpServer
) -> None:
    # Both read the record and find the client due; only the one whose update took it out
    # of the record deletes it (the other's update finds none due).
    ann, bob = await storages(tmp_path, managed)
    now = [1_000_000.0]
    for storage in (ann, bob):
        assert storage.registering is not None
        storage.registering.clock = lambda: now[0]
    first, _ = await register(managed, ann.registering, "crm.read")
    await ann.set_client_info(first)
    second, _ = await register(managed, bob.registering, "crm.read crm.write")
    await bob.set_client_info(second, replacing=first.client_id)
    now[0] += RETIRE_GRACE_SECONDS
    assert ann.store is not None and ann.registration is not None
    assert ann.registering is not None and bob.registering is not None
    await asyncio.gather(
        retire_due(ann.store, ann.registration, ann.registering),
        retire_due(ann.store, ann.registration, bob.registering),
    )
    assert managed.deletions() == [first.client_id]


async def test_a_replaced_client_dated_far_ahead_of_the_clock_is_deleted_a_grace_after_seen(
    tmp_path: Path, managed: OAuthMcpServer
) -> None:
    # Replaced by a worker whose clock ran ten years ahead. Before: it waited those ten
    # years (a client left registered, its grants alive). Now its grace runs from the
    # first flow that reads it with a clock not that far behind.
    ann, bob = await storages(tmp_path, managed)
    now = [1_000_000.0]
    ahead = 10 * 365 * 24 * 3600.0
    assert ann.registering is not None and bob.registering is not None
    ann.registering.clock = lambda: now[0]
    bob.registering.clock = lambda: now[0] + ahead
    first, _ = await register(managed, ann.registering, "crm.read")
    await ann.set_client_info(first)
    second, _ = await register(managed, bob.registering, "crm.read crm.write")
    await bob.set_client_info(second, replacing=first.client_id)
    assert ann.store is not None and ann.registration is not None
    await retire_due(ann.store, ann.registration, ann.registering)  # seen now: not due
    assert managed.deletions() == []
    data = await ann.store.get(ann.registration)
    assert data is not None
    assert [r["replaced_at"] for r in json.loads(data)["retiring"]] == [now[0]]
    now[0] += RETIRE_GRACE_SECONDS - 1
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deletions() == []
    now[0] += 1
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deleted() == [first.client_id]


async def test_a_failed_deletion_dated_far_ahead_of_the_clock_is_tried_again_after_seen(
    tmp_path: Path, managed: OAuthMcpServer
) -> None:
    # Its deletion failed at a flow whose clock ran ten years ahead, which counted its try
    # then. Before: every flow with a sane clock waited those ten years to try it again
    # (never given up either: a client left registered, its grants alive). Now its next
    # try is due retry_seconds after the first flow that reads it so.
    now = [1_000_000.0]
    ann, first, _ = await replaced(tmp_path, managed, now)
    assert ann.store is not None and ann.registration is not None and ann.registering is not None
    ahead = 10 * 365 * 24 * 3600.0
    managed.set_deletion_reply(503)
    now[0] += RETIRE_GRACE_SECONDS
    ann.registering.clock = lambda: now[0] + ahead
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deletions() == [first.client_id]
    (kept,) = await retiring_in(ann)
    assert (kept["attempts"], kept["tried_at"]) == (1, now[0] + ahead)
    ann.registering.clock = lambda: now[0]
    await retire_due(ann.store, ann.registration, ann.registering)  # seen now: not due
    (kept,) = await retiring_in(ann)
    assert (kept["attempts"], kept["tried_at"]) == (1, now[0])
    managed.set_deletion_reply(None)
    now[0] += retry_seconds(1) - 1
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deletions() == [first.client_id]
    now[0] += 1
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deleted() == [first.client_id]
    assert await retiring_in(ann) == []
