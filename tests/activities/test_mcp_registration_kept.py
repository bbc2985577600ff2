"""Keeping a client a flow registered and dropped, whose deletion failed for now, for a
later flow (``Registering.keep``, ``_stored_registration.put_back``): a token store that
cannot keep it never fails the flow, and the log says a later flow tries again only once
it was kept; an unusable client whose answer named no ``client_id`` is kept by the
management its deletion uses, each of them. Against the consent server on loopback; the
token store's disk refuses for real (the tests run as root: a permission bit would refuse
nothing)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from mcp.client.auth import OAuthRegistrationError

from psych_runtime.activities.mcp._oauth import StoredTokens
from psych_runtime.activities.mcp._retiring import RETIRE_GRACE_SECONDS, retry_seconds
from psych_runtime.activities.mcp._stored_registration import retire_due
from psych_runtime.activities.tokens import Change, TokenKey, TokenStore
from tests.mcp.oauth_fixture import OAuthMcpServer

from .test_mcp_registration_management import replaced, retiring_in
from .test_mcp_registration_unused import LOGGER, T0, raced, started, storage_at


@pytest.fixture
def managed() -> Iterator[OAuthMcpServer]:
    yield from started()


def writes_refused(root: Path, key: TokenKey) -> None:
    """The disk refuses every write of ``key``'s shard in the ``LocalTokenStore`` at
    ``root``, not its reads: a stale temporary left as a directory, which the sweep before
    each write cannot remove (``EISDIR``: ``LocalStoreFailed``, a ``StoreUnavailable``)."""
    shard = (root / key.location()).parent
    shard.mkdir(parents=True, exist_ok=True, mode=0o700)
    stuck = shard / ".put-stuck"
    stuck.mkdir()
    os.utime(stuck, (0, 0))


async def test_an_unused_client_the_store_cannot_keep_leaves_the_flow_going(
    tmp_path: Path, managed: OAuthMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    now = [T0]
    ann, bob, first, unused, token = await raced(tmp_path, managed, now)
    assert bob.registration is not None
    writes_refused(tmp_path, bob.registration)
    caplog.set_level("INFO", logger=LOGGER)
    # Before the fix: LocalStoreFailed out of discard, the consent flow failed although
    # the stored registration (Ann's) is fine, and the log had said a later flow tries.
    await bob.set_client_info(unused)
    assert bob.client is not None and bob.client.client_id == first.client_id
    assert managed.deletions() == [unused.client_id]
    assert (
        f"the unused client {unused.client_id} (another worker's registration for MCP server "
        f"'crm' was stored first) at the authorization server {managed.issuer} stays "
        f"registered: deleting it at {managed.issuer}/register/{unused.client_id} failed: "
        "HTTP 503 unavailable, and the token store could not keep it for a later try "
        "(LocalStoreFailed: "
    ) in caplog.text
    assert "a later consent flow tries again" not in caplog.text
    assert token not in caplog.text
    ours = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert ours and all(str(tmp_path) not in said for said in ours)  # the store logs it
    assert await retiring_in(ann) == []


async def test_an_unusable_client_the_store_cannot_keep_is_told_in_the_error(
    tmp_path: Path, managed: OAuthMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    ann: StoredTokens = await storage_at(tmp_path, managed, "ann", [T0])
    assert ann.registering is not None and ann.registration is not None
    reply = {
        "client_id": "c-unusable",
        "redirect_uris": ["https://psych.test/cb"],
        "token_endpoint_auth_method": "private_key_jwt",
    }
    managed.set_registration_reply(201, json.dumps(reply))
    managed.set_deletion_reply(503)
    writes_refused(tmp_path, ann.registration)
    caplog.set_level("INFO", logger=LOGGER)
    async with httpx2.AsyncClient() as http:
        answer = await http.post(f"{managed.issuer}/register", json={"redirect_uris": []})
    # Before the fix: LocalStoreFailed in place of the registration's error.
    with pytest.raises(OAuthRegistrationError) as refused:
        await ann.registering.answered(answer)
    uri = f"{managed.issuer}/register/c-unusable"
    said = str(refused.value)
    assert "no usable client" in said
    assert said.endswith(
        f"it stays registered there: deleting it at {uri} failed: HTTP 503 unavailable"
    )
    assert (
        f"the unusable client c-unusable of MCP server 'crm' at the authorization server "
        f"{managed.issuer} stays registered: deleting it at {uri} failed: HTTP 503 "
        "unavailable, and the token store could not keep it for a later try"
    ) in caplog.text
    assert "a later consent flow tries again" not in caplog.text
    assert managed.deletions() == ["c-unusable"]


async def test_unusable_clients_with_no_client_id_are_each_kept_by_their_management(
    tmp_path: Path, managed: OAuthMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    now = [T0]
    ann: StoredTokens = await storage_at(tmp_path, managed, "ann", now)
    assert ann.registering is not None
    assert ann.store is not None and ann.registration is not None
    managed.set_deletion_reply(503)
    for name in ("anon-1", "anon-2"):
        # The answer names no client_id (RFC 7591 requires one: unusable), but offers the
        # management its deletion uses (RFC 7592 2.3: its URI and access token).
        reply = {
            "redirect_uris": ["https://psych.test/cb"],
            "token_endpoint_auth_method": "none",
            "registration_client_uri": f"{managed.issuer}/register/{name}",
            "registration_access_token": f"rat-{name}",
        }
        managed.set_registration_reply(201, json.dumps(reply))
        async with httpx2.AsyncClient() as http:
            answer = await http.post(f"{managed.issuer}/register", json={"redirect_uris": []})
        with pytest.raises(OAuthRegistrationError, match="a later consent flow tries again"):
            await ann.registering.answered(answer)
    assert managed.deletions() == ["anon-1", "anon-2"]
    # Before the fix: both kept under "", the second taken for the first and dropped
    # (though its error and the log said a later flow tries again).
    kept = await retiring_in(ann)
    uris = [r["management"]["uri"] for r in kept]
    assert uris == [f"{managed.issuer}/register/{name}" for name in ("anon-1", "anon-2")]
    assert [r["client_id"] for r in kept] == ["", ""]
    # A later flow tries each again, at its own management.
    managed.set_deletion_reply(500)
    caplog.set_level("INFO", logger=LOGGER)
    now[0] += retry_seconds(1)
    await retire_due(ann.store, ann.registration, ann.registering)
    assert managed.deletions() == ["anon-1", "anon-2", "anon-1", "anon-2"]
    assert "the replaced client (no client_id) of MCP server 'crm'" in caplog.text
    assert "rat-anon" not in caplog.text
    assert [r["attempts"] for r in await retiring_in(ann)] == [2, 2]


class RefusingPutBack:
    """``store``, whose disk refuses writes from its second ``update`` on (``writes_refused``):
    ``retire_due`` takes the due clients out, and cannot put back one that failed."""

    def __init__(self, store: TokenStore, root: Path) -> None:
        self.store, self.root, self.updates = store, root, 0

    async def get(self, key: TokenKey) -> bytes | None:
        return await self.store.get(key)

    async def put(self, key: TokenKey, record: bytes) -> None:
        await self.store.put(key, record)

    async def delete(self, key: TokenKey) -> None:
        await self.store.delete(key)

    async def update(self, key: TokenKey, change: Change) -> None:
        self.updates += 1
        if self.updates == 2:
            writes_refused(self.root, key)
        await self.store.update(key, change)


async def test_a_retiring_client_the_store_cannot_put_back_is_named_and_the_flow_goes_on(
    tmp_path: Path, managed: OAuthMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1_000_000.0]
    ann, first, _ = await replaced(tmp_path, managed, now)
    assert ann.store is not None and ann.registration is not None and ann.registering is not None
    managed.set_deletion_reply(503)
    caplog.set_level("INFO", logger=LOGGER)
    now[0] += RETIRE_GRACE_SECONDS
    # Before the fix: LocalStoreFailed out of retire_due (the consent flow failed), the
    # client taken out of the record and its loss said nowhere.
    await retire_due(RefusingPutBack(ann.store, tmp_path), ann.registration, ann.registering)
    assert managed.deletions() == [first.client_id]
    assert (
        f"the client {first.client_id} of MCP server 'crm' stays registered at the "
        f"authorization server {managed.issuer}: its deletion failed, and the token store "
        "could not put it back in the registration's record for a later try "
        "(LocalStoreFailed: "
    ) in caplog.text
    # The deletion's own line (a later flow tries again) came first; this one, after it,
    # says what became of that.
    assert caplog.text.index("a later consent flow tries again") < caplog.text.index(
        "could not put it back"
    )
    assert await retiring_in(ann) == []


async def test_unusable_clients_with_no_client_id_at_one_management_uri_are_each_kept(
    tmp_path: Path, managed: OAuthMcpServer
) -> None:
    """RFC 7592 only recommends a management URI per client: a server may give every
    client one URI, its registration access token telling them apart (what a deletion
    sends). Two unusable clients naming no client_id there are two clients, each kept.
    Before: told apart by the URI alone, the second was taken for the first and dropped
    (its error said a later consent flow tries again)."""
    now = [T0]
    ann: StoredTokens = await storage_at(tmp_path, managed, "ann", now)
    assert ann.registering is not None
    managed.set_deletion_reply(503)
    for name in ("anon-1", "anon-2"):
        reply = {
            "redirect_uris": ["https://psych.test/cb"],
            "token_endpoint_auth_method": "none",
            "registration_client_uri": f"{managed.issuer}/register/shared",
            "registration_access_token": f"rat-{name}",
        }
        managed.set_registration_reply(201, json.dumps(reply))
        async with httpx2.AsyncClient() as http:
            answer = await http.post(f"{managed.issuer}/register", json={"redirect_uris": []})
        with pytest.raises(OAuthRegistrationError, match="a later consent flow tries again"):
            await ann.registering.answered(answer)
    kept = await retiring_in(ann)
    assert [r["management"]["token"] for r in kept] == ["rat-anon-1", "rat-anon-2"]
