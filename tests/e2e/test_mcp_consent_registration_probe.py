"""The check that a stored registration is still known (``_registration.still_known``)
against an authorization server whose token endpoint answers ``invalid_client`` for a code
it never issued, also to a client it knows (not RFC 6749's ``invalid_grant``): the probe
would take every stored client for forgotten and register one at every consent. The
client registered in place of one the probe said forgotten is probed too: the server
cannot have forgotten it a moment after registering it, so the tenant remembers the
server's probe answers as untrusted (a warning) and stops replacing. Real Runs on the dev
server against ``tests.mcp.consent_server --registration --unknown-code-invalid-client``,
psych's worker and callback on loopback."""

from __future__ import annotations

import pytest

from psych_runtime.activities.mcp._untrusted import UNTRUSTED
from psych_runtime.specs import Scope
from psych_runtime.testing import Reply, ToolCall

from .conftest import Harness
from .test_mcp_consent_registration import agent, consented_run, pair_with, stored

pytestmark = pytest.mark.e2e


async def test_a_server_answering_invalid_client_to_the_probe_gets_one_client_more_at_most(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="psych_runtime.activities.mcp._registration")
    ann, bob = Scope(tenant="acme", principal="ann"), Scope(tenant="acme", principal="bob")
    carol, dan = Scope(tenant="acme", principal="carol"), Scope(tenant="acme", principal="dan")
    for _ in range(4):
        harness.fake.enqueue(Reply.tool_calls(ToolCall("crm__whoami", {})), Reply.text("done"))
    async with pair_with(harness, "--registration", "--unknown-code-invalid-client") as pair:
        server = pair.server
        spec = agent(server, pair.callback_url).build()
        async with harness.worker():
            # Ann's Run registers the client (not probed: her flow registered it).
            await consented_run(harness, spec, ann)
            # Bob's probe of it is answered invalid_client: replaced, and the new one,
            # probed too, answered invalid_client again: the server's answer is untrusted.
            await consented_run(harness, spec, bob)
        # Remembered in the store: a worker started afresh probes no more either.
        async with harness.worker():
            await consented_run(harness, spec, carol)
            await consented_run(harness, spec, dan)
        registered = [item["client_id"] for item in server.registered()]
        authorized = server.consents()["authorized"]
    # Before the fix: Carol's and Dan's consents each registered one more (four in all).
    assert len(registered) == 2, registered
    first, second = registered
    assert authorized == [first, second, second, second]
    registrations = [r for r in stored(harness) if "token" not in r and "client" in r]
    assert [r["client"]["client_id"] for r in registrations] == [second]
    marks = [r for r in stored(harness) if r.get("key", [None] * 4)[3] == UNTRUSTED]
    assert [(m["key"][0], m["client_id"]) for m in marks] == [("acme", second)]
    assert (
        f"the authorization server {server.issuer} answers invalid_client for a code it "
        f"never issued, also to the client {second} it registered a moment ago for MCP "
        "server 'crm' (not RFC 6749's invalid_grant): tenant 'acme' no longer probes its "
        "stored clients before a consent"
    ) in caplog.text
