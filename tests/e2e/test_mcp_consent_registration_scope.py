"""A dynamically registered client and the scope the flow asks (RFC 7591 2: ``scope`` is
client metadata, the values the client may ask for): the scope is the MCP server's (the
SDK asks what its protected-resource metadata names), known only after the registration
was read, so a stored client registered for less than the flow asks now is replaced by
one registered for both; one that covers it is kept. The replaced client is deleted at the
authorization server when its registration answer offered RFC 7592 management (stored
with the registration): a person whose token was issued to it consents again, to the
client that replaced it, once its refresh is refused. Real Runs on the dev server against
``tests.mcp.consent_server --registration`` (whose authorization server refuses an
authorization asking a scope the client was not registered for), psych's worker and
callback on loopback."""

from __future__ import annotations

import pytest

from psych_runtime.specs import Scope
from psych_runtime.testing import Reply, ToolCall

from .conftest import Harness
from .test_mcp_consent_registration import (
    agent,
    consented_run,
    expire_tokens,
    pair_with,
    stored,
)

pytestmark = pytest.mark.e2e


async def test_a_client_registered_for_less_than_the_scope_asked_is_replaced(
    harness: Harness,
) -> None:
    ann, bob = Scope(tenant="acme", principal="ann"), Scope(tenant="acme", principal="bob")
    carol = Scope(tenant="acme", principal="carol")
    for _ in range(3):
        harness.fake.enqueue(Reply.tool_calls(ToolCall("crm__whoami", {})), Reply.text("done"))
    async with pair_with(harness, "--registration") as pair:
        server = pair.server
        spec = agent(server, pair.callback_url).build()
        server.set_scopes(["crm.read"])
        async with harness.worker():
            await consented_run(harness, spec, ann)
            # The MCP server asks more from now on (a new release of it).
            server.set_scopes(["crm.read", "crm.write"])
            # Before the fix: Bob's consent was asked with the client registered for
            # crm.read, which the authorization server refuses (invalid_scope).
            bob_run = await consented_run(harness, spec, bob)
            bob_calls = (await harness.client.report(bob_run, scope=bob)).tool_calls
            # Carol's is asked with the client that covers it: none registered for her.
            carol_run = await consented_run(harness, spec, carol)
            carol_calls = (await harness.client.report(carol_run, scope=carol)).tool_calls
        registered = server.registered()
        authorized = server.consents()["authorized"]
    assert [item["scope"] for item in registered] == ["crm.read", "crm.read crm.write"]
    first, second = (item["client_id"] for item in registered)
    assert authorized == [first, second, second]
    assert [call.result for call in bob_calls + carol_calls] == [second, second]
    registrations = [r for r in stored(harness) if "token" not in r and "client" in r]
    assert [(r["client"]["client_id"], r["asked"]) for r in registrations] == [
        (second, "crm.read crm.write")
    ]


async def test_a_replaced_client_is_deleted_at_the_server_with_its_stored_management(
    harness: Harness,
) -> None:
    ann, bob = Scope(tenant="acme", principal="ann"), Scope(tenant="acme", principal="bob")
    for _ in range(3):
        harness.fake.enqueue(Reply.tool_calls(ToolCall("crm__whoami", {})), Reply.text("done"))
    async with pair_with(harness, "--registration", "--registration-management") as pair:
        server = pair.server
        spec = agent(server, pair.callback_url).build()
        server.set_scopes(["crm.read"])
        async with harness.worker():
            await consented_run(harness, spec, ann)
            (first,) = (item["client_id"] for item in server.registered())
            (managed,) = [r for r in stored(harness) if "token" not in r and "client" in r]
            assert managed["management"]["uri"] == f"{server.issuer}/register/{first}"
            server.set_scopes(["crm.read", "crm.write"])
            await consented_run(harness, spec, bob)
            (_, second) = (item["client_id"] for item in server.registered())
        # Before the fix: the replaced client stayed registered there, unused.
        assert server.deleted() == [first]
        # Ann's token was issued to it: her refresh is refused (invalid_client), and she
        # consents again, to the client that replaced it.
        expire_tokens(harness, ann)
        async with harness.worker():
            again = await consented_run(harness, spec, ann)
            calls = (await harness.client.report(again, scope=ann)).tool_calls
        authorized = server.consents()["authorized"]
        registered = [item["client_id"] for item in server.registered()]
    assert authorized == [first, second, second]
    assert [call.result for call in calls] == [second]
    assert registered == [first, second]
