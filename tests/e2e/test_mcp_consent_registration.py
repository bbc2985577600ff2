"""Dynamic client registration (RFC 7591) of an ``authorization_code`` client whose Spec
names neither ``preregistered_client_id`` nor ``cimd_url``: real Runs on the dev server
against ``tests.mcp.consent_server --registration`` (the SDK's own authorization server,
its ``/register`` open), psych's worker and OAuth callback on loopback.

The first Run of a tenant registers the client (the Spec's client metadata, a public
client) and suspends for consent with it; the callback's exchange and later refreshes use
that client; every other Run, worker and principal of the tenant reuses the registration
from the token store; another tenant registers its own. An authorization server that
offers no registration, or refuses it, fails the Run naming the server and the refusal
(an optional server is left out, as one unreachable is).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from psych_runtime.activities import McpSettings
from psych_runtime.activities.egress import EgressRules, EgressSettings
from psych_runtime.activities.tokens import LocalTokenStore
from psych_runtime.specs import AgentBuilder, McpOAuth, RunFailed, Scope
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunHandle, RunState, RunStatus
from tests.mcp.consent_fixture import Consenting, consenting, record_files
from tests.mcp.oauth_fixture import OAuthMcpServer

from ._waiting import is_waiting, only_pending, state_when
from .conftest import Harness
from .test_mcp_consent import consent, consent_asked

pytestmark = pytest.mark.e2e

WAIT = 60.0
"""Wall seconds a Run gets to settle (the machine is shared)."""


def registering(callback: str) -> McpOAuth:
    return McpOAuth(
        grant="authorization_code",
        redirect_uris=(callback,),
        client_name="crm agent",
        application_type="web",
    )


def agent(server: OAuthMcpServer, callback: str, *, optional: bool = False) -> AgentBuilder:
    return (
        AgentBuilder("consent-registered")
        .instructions("Use the CRM.")
        .model("fake-model")
        .mcp_server("crm", server.url, oauth=registering(callback), optional=optional)
    )


@asynccontextmanager
async def pair_with(harness: Harness, *extra: str) -> AsyncIterator[Consenting]:
    store = LocalTokenStore(harness.home / "tokens")
    async with consenting("streamable-http", harness.client, store, extra=extra) as pair:
        # A registered client's issuer is the one the operator names for the MCP server.
        harness.settings.mcp = McpSettings(oauth_issuers={pair.server.url: pair.server.issuer})
        yield pair


@pytest.fixture
async def open_pair(harness: Harness) -> AsyncIterator[Consenting]:
    async with pair_with(harness, "--registration") as pair:
        yield pair


@pytest.fixture
async def closed_pair(harness: Harness) -> AsyncIterator[Consenting]:
    async with pair_with(harness) as pair:
        yield pair


def stored(harness: Harness) -> list[dict[str, Any]]:
    """Every record of the worker's token store (not sealed here), as JSON."""
    return [json.loads(path.read_bytes()) for path in record_files(harness.home / "tokens")]


async def consented_run(harness: Harness, spec: Any, scope: Scope) -> RunHandle:
    """A Run under ``scope`` that asks for consent, is given it, and completes."""
    run = await harness.client.dispatch(spec, "who am I?", scope=scope)
    page = await consent(await consent_asked(harness, run, scope))
    assert page.status_code == 200, page.text
    result = await asyncio.wait_for(harness.client.result(run, scope=scope), WAIT)
    assert result.status is RunStatus.COMPLETED, result.reason
    return run


async def failed_unreachable(harness: Harness, pair: Consenting) -> str:
    """Run the agent of ``pair``'s server (required) to its failure: the reason, which
    names the server unreachable."""
    harness.fake.enqueue(Reply.text("never"))
    async with harness.worker():
        run = await harness.client.dispatch(
            agent(pair.server, pair.callback_url).build(), "go", scope=harness.scope
        )
        with pytest.raises(RunFailed) as failed:
            await asyncio.wait_for(harness.client.result(run, scope=harness.scope), WAIT)
    reason = str(failed.value)
    assert "MCP server 'crm' is unreachable" in reason, reason
    return reason


async def test_a_client_is_registered_once_per_tenant_and_reused_for_consent_and_refresh(
    harness: Harness, open_pair: Consenting
) -> None:
    server = open_pair.server
    spec = agent(server, open_pair.callback_url).build()
    ann, bob = Scope(tenant="acme", principal="ann"), Scope(tenant="acme", principal="bob")
    globex = Scope(tenant="globex")
    for _ in range(4):
        harness.fake.enqueue(Reply.tool_calls(ToolCall("crm__whoami", {})), Reply.text("done"))
    async with harness.worker():
        first = await consented_run(harness, spec, ann)
        # Another person of the tenant: a consent of their own, the tenant's client.
        await consented_run(harness, spec, bob)
        # Another tenant registers a client of its own.
        await consented_run(harness, spec, globex)
        report = await harness.client.report(first, scope=ann)
    registered = server.registered()
    # Before the fix: no Run got this far (the worker refused to register a client).
    assert len(registered) == 2, registered
    acme_client, globex_client = (item["client_id"] for item in registered)
    assert acme_client != globex_client
    for item in registered:
        assert item["client_name"] == "crm agent"
        assert item["redirect_uris"] == [open_pair.callback_url]
        assert item["application_type"] == "web"
        assert item["grant_types"] == ["authorization_code", "refresh_token"]
        assert item["token_endpoint_auth_method"] == "none"
        assert "client_secret" not in item
    # Each consent (its URL, then the callback's code exchange) used the tenant's client.
    assert server.consents()["authorized"] == [acme_client, acme_client, globex_client]
    assert [call.result for call in report.tool_calls] == [acme_client]
    records = stored(harness)
    registrations = sorted(
        r["client"]["client_id"] for r in records if "client" in r and "token" not in r
    )
    assert registrations == sorted([acme_client, globex_client])
    tokens = [r for r in records if "token" in r]
    assert {(r["key"][0], r["key"][1]): r["client"]["client_id"] for r in tokens} == {
        ("acme", "ann"): acme_client,
        ("acme", "bob"): acme_client,
        ("globex", None): globex_client,
    }
    # A token past its lifetime, read by a worker started afresh: refreshed with the
    # registered client (no new registration, nobody asked again).
    for path in record_files(harness.home / "tokens"):
        record = json.loads(path.read_bytes())
        if "token" in record and record["key"][:2] == ["acme", "ann"]:
            path.write_text(json.dumps({**record, "expires_at": 1.0}))
    async with harness.worker():
        again = await harness.client.dispatch(spec, "again", scope=ann)
        result = await asyncio.wait_for(harness.client.result(again, scope=ann), WAIT)
    assert result.status is RunStatus.COMPLETED, result.reason
    consents = server.consents()
    assert consents["refreshed"] == 1 and len(consents["authorized"]) == 3
    assert len(server.registered()) == 2


async def test_a_server_offering_no_registration_fails_the_run_naming_it(
    harness: Harness, closed_pair: Consenting
) -> None:
    server = closed_pair.server
    reason = await failed_unreachable(harness, closed_pair)
    # The server optional: left out as one unreachable is, the Run goes on.
    async with harness.worker():
        optional = agent(server, closed_pair.callback_url, optional=True).build()
        run = await harness.client.dispatch(optional, "go", scope=harness.scope)
        result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), WAIT)
    assert f"the authorization server {server.issuer} offers no dynamic client registration" in (
        reason
    )
    assert "registration_endpoint" in reason
    assert result.status is RunStatus.COMPLETED, result.reason
    (asked,) = harness.fake.requests
    assert not any(t["function"]["name"].startswith("crm__") for t in asked.get("tools", []))
    assert "offers no dynamic client registration" in json.dumps(asked)
    # Nothing was posted anywhere in its place, and nobody was asked.
    assert server.consents()["authorized"] == []
    assert record_files(harness.home / "tokens") == []


async def test_a_registration_the_server_refuses_fails_the_run_naming_the_refusal(
    harness: Harness, open_pair: Consenting
) -> None:
    server = open_pair.server
    server.refuse_registration("invalid_client_metadata", "client_name 'crm agent' is taken")
    reason = await failed_unreachable(harness, open_pair)
    assert (
        f"the authorization server {server.issuer} refused the dynamic client registration "
        f"at {server.issuer}/register: HTTP 400 invalid_client_metadata: client_name 'crm "
        "agent' is taken"
    ) in reason
    assert server.registered() == [] and server.consents()["authorized"] == []
    assert harness.fake.requests == []
    assert record_files(harness.home / "tokens") == []


def expire_tokens(harness: Harness, scope: Scope) -> None:
    """Make the stored token of ``scope`` past its lifetime (a refresh comes first)."""
    for path in record_files(harness.home / "tokens"):
        record = json.loads(path.read_bytes())
        if "token" in record and record["key"][:2] == [scope.tenant, scope.principal]:
            path.write_text(json.dumps({**record, "expires_at": 1.0}))


async def test_a_client_the_authorization_server_forgot_is_registered_again(
    harness: Harness, open_pair: Consenting
) -> None:
    server = open_pair.server
    spec = agent(server, open_pair.callback_url).build()
    ann, bob = Scope(tenant="acme", principal="ann"), Scope(tenant="acme", principal="bob")
    for _ in range(4):
        harness.fake.enqueue(Reply.tool_calls(ToolCall("crm__whoami", {})), Reply.text("done"))
    async with harness.worker():
        await consented_run(harness, spec, ann)
        await consented_run(harness, spec, bob)
    (first,) = (item["client_id"] for item in server.registered())
    # The authorization server loses its registrations (a restart of one that keeps them in
    # memory, an expiry): the stored tokens' refreshes are refused, invalid_client.
    server.forget_registrations()
    expire_tokens(harness, ann)
    expire_tokens(harness, bob)
    async with harness.worker():
        # Before the fix: the consent was asked with the forgotten client, which the
        # authorization server refuses to show a person (HTTP 400), for ever after.
        again = await consented_run(harness, spec, ann)
        report = await harness.client.report(again, scope=ann)
        # Bob's refresh is refused too: he consents to the client registered for Ann's
        # Run, none is registered for him.
        await consented_run(harness, spec, bob)
    registered = [item["client_id"] for item in server.registered()]
    assert len(registered) == 2 and registered[0] == first, registered
    second = registered[1]
    assert second != first
    assert server.consents()["authorized"] == [first, first, second, second]
    assert [call.result for call in report.tool_calls] == [second]
    records = stored(harness)
    assert [r["client"]["client_id"] for r in records if "token" not in r] == [second]
    assert [r["client"]["client_id"] for r in records if "token" in r] == [second, second]


async def test_a_registration_answer_without_a_client_id_fails_the_run_without_its_secret(
    harness: Harness, open_pair: Consenting
) -> None:
    server = open_pair.server
    minted = "minted-9f8e7d"
    server.set_registration_reply(201, json.dumps({"client_secret": minted}))
    reason = await failed_unreachable(harness, open_pair)
    # Before the fix: the SDK's message quoted the answer, the minted secret with it.
    assert minted not in reason
    assert (
        f"the authorization server {server.issuer} answered the dynamic client registration "
        f"at {server.issuer}/register with no usable client: client_id: Field required"
    ) in reason
    assert server.consents()["authorized"] == []
    assert record_files(harness.home / "tokens") == []


async def test_a_client_forgotten_before_the_code_exchange_is_registered_again(
    harness: Harness, open_pair: Consenting
) -> None:
    server = open_pair.server
    spec = agent(server, open_pair.callback_url).build()
    scope = harness.scope
    harness.fake.enqueue(Reply.tool_calls(ToolCall("crm__whoami", {})), Reply.text("done"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "who am I?", scope=scope)
        asked = await consent_asked(harness, run, scope)
        assert asked.question is not None
        async with httpx.AsyncClient(timeout=60) as browser:
            redirect = await browser.get(asked.question)  # the person allows
            assert redirect.is_redirect, redirect.text
            # The authorization server forgets the client before psych exchanges the code:
            # the exchange is refused, invalid_client.
            server.forget_registrations()
            await browser.get(redirect.headers["location"])

        def asked_again(state: RunState) -> bool:
            return is_waiting(state) and only_pending(state).id != asked.id

        again = only_pending(
            await state_when(
                harness.client, run, scope, asked_again, what="a new consent", within=WAIT
            )
        )
        # Before the fix: asked again with the forgotten client (HTTP 400, for ever after).
        page = await consent(again)
        assert page.status_code == 200, page.text
        result = await asyncio.wait_for(harness.client.result(run, scope=scope), WAIT)
    assert result.status is RunStatus.COMPLETED, result.reason
    first, second = (item["client_id"] for item in server.registered())
    assert server.consents()["authorized"] == [first, second]
    assert [r["client"]["client_id"] for r in stored(harness) if "token" not in r] == [second]


async def test_a_person_with_no_token_consents_after_the_server_forgot_the_client(
    harness: Harness, open_pair: Consenting
) -> None:
    server = open_pair.server
    spec = agent(server, open_pair.callback_url).build()
    ann, bob = Scope(tenant="acme", principal="ann"), Scope(tenant="acme", principal="bob")
    for _ in range(2):
        harness.fake.enqueue(Reply.tool_calls(ToolCall("crm__whoami", {})), Reply.text("done"))
    async with harness.worker():
        await consented_run(harness, spec, ann)
        (first,) = (item["client_id"] for item in server.registered())
        # The authorization server loses its registrations; Bob holds no token, so no
        # refused refresh or exchange tells the tenant before his consent is asked.
        server.forget_registrations()
        # Before the fix: his consent page was the authorization server's 400 (an unknown
        # client, never redirected back), and nothing replaced the registration.
        run = await consented_run(harness, spec, bob)
        report = await harness.client.report(run, scope=bob)
    registered = [item["client_id"] for item in server.registered()]
    assert len(registered) == 2 and registered[0] == first, registered
    second = registered[1]
    assert server.consents()["authorized"] == [first, second]
    assert [call.result for call in report.tool_calls] == [second]
    records = stored(harness)
    assert [r["client"]["client_id"] for r in records if "token" not in r] == [second]


@pytest.fixture
async def managed_pair(harness: Harness) -> AsyncIterator[Consenting]:
    async with pair_with(harness, "--registration", "--registration-management") as pair:
        yield pair


async def test_a_client_registered_unusable_is_deleted_at_the_server_and_named(
    harness: Harness, managed_pair: Consenting
) -> None:
    server = managed_pair.server
    # The server registers the client, but for private_key_jwt, which this client cannot
    # apply (it signs no assertion); its answer offers RFC 7592 management.
    reply = {
        "client_id": "c-unusable",
        "redirect_uris": [managed_pair.callback_url],
        "token_endpoint_auth_method": "private_key_jwt",
    }
    server.set_registration_reply(201, json.dumps(reply))
    reason = await failed_unreachable(harness, managed_pair)
    assert (
        f"the authorization server {server.issuer} answered the dynamic client registration "
        f"at {server.issuer}/register with no usable client: Authorization server registered "
        "the client with unsupported token_endpoint_auth_method 'private_key_jwt'; it was "
        "deleted there (RFC 7592)"
    ) in reason
    # Before the fix: nothing was deleted, the unusable client stayed registered there.
    assert server.deleted() == ["c-unusable"]
    assert server.consents()["authorized"] == []
    assert record_files(harness.home / "tokens") == []


async def test_an_unusable_client_whose_deletion_fails_is_logged_and_named(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    # The registration is managed at localhost, which the tenant's egress refuses: the
    # deletion goes through the egress policy, as the registration did, and fails.
    harness.settings = dataclasses.replace(
        harness.settings,
        egress=EgressSettings(
            rules=EgressRules.parse("127.0.0.1/32"),
            tenants={harness.scope.tenant: EgressRules.parse(deny="localhost")},
        ),
    )
    caplog.set_level("INFO", logger="psych_runtime.activities.mcp._registering")
    extra = ("--registration", "--registration-management", "--management-host", "localhost")
    async with pair_with(harness, *extra) as pair:
        server = pair.server
        # A secret method, but no secret minted.
        reply = {
            "client_id": "c-secretless",
            "redirect_uris": [pair.callback_url],
            "token_endpoint_auth_method": "client_secret_post",
        }
        server.set_registration_reply(201, json.dumps(reply))
        reason = await failed_unreachable(harness, pair)
        assert server.deletions() == []
    uri = f"http://localhost:{urlsplit(server.issuer).port}/register/c-secretless"
    refused = "the authorization server of MCP server 'crm': egress refused: localhost"
    assert (
        "with no usable client: Authorization server registered the client for "
        "'client_secret_post' but issued no client_secret; it stays registered there for "
        f"now: deleting it at {uri} failed: EgressDenied: {refused}"
    ) in reason
    assert reason.endswith("; a later consent flow tries again")
    # Before the fix: no deletion was tried, nothing logged.
    assert (
        "the unusable client c-secretless of MCP server 'crm' at the authorization server "
        f"{server.issuer} stays registered for now: deleting it at {uri} failed: EgressDenied"
    ) in caplog.text
    assert "rat-" not in caplog.text and "rat-" not in reason
