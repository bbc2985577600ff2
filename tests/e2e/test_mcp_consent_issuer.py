"""The ``authorization_code`` grant against an MCP server of the 2025-03-26 kind: one that
publishes no protected-resource metadata (RFC 9728), so the SDK's legacy path takes the
server's own origin for its authorization server. The operator named another issuer for
the client: the Run fails naming both, before any authorization URL is made, and nothing
is asked of the server's own authorization server. Real Runs on the dev server against
``tests.mcp.consent_server --own-issuer`` on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from psych_runtime.activities import McpSettings
from psych_runtime.specs import AgentBuilder, McpOAuth, RunFailed
from psych_runtime.testing import Reply
from tests.mcp.consent_fixture import CLIENT
from tests.mcp.oauth_fixture import OAuthMcpServer, start_oauth_server

from .conftest import Harness

pytestmark = pytest.mark.e2e

WAIT = 60.0
"""Wall seconds the Run gets to fail (the machine is shared)."""

REDIRECT = "http://127.0.0.1:9/oauth/callback"
"""Where the consent would land (never reached: nothing is asked)."""


@pytest.fixture
def own_issuer() -> Iterator[OAuthMcpServer]:
    server = start_oauth_server(
        "streamable-http",
        {CLIENT: REDIRECT},
        module="tests.mcp.consent_server",
        extra=("--own-issuer",),
    )
    yield server
    server.stop()


async def test_a_server_whose_origin_would_be_its_own_issuer_is_refused(
    harness: Harness, own_issuer: OAuthMcpServer
) -> None:
    # The operator's issuer for the client is the authorization server's; the MCP server
    # names none and serves an authorization server of its own at its origin.
    harness.settings.mcp = McpSettings(oauth_issuers={CLIENT: own_issuer.issuer})
    origin = own_issuer.url.removesuffix("/mcp")
    oauth = McpOAuth(
        grant="authorization_code", preregistered_client_id=CLIENT, redirect_uris=(REDIRECT,)
    )
    spec = (
        AgentBuilder("consent-own-issuer")
        .instructions("Use the CRM.")
        .model("fake-model")
        .mcp_server("crm", own_issuer.url, oauth=oauth)
        .build()
    )
    harness.fake.enqueue(Reply.text("never"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        with pytest.raises(RunFailed) as failed:
            # Within a bound: before the fix the Run suspended for consent instead.
            await asyncio.wait_for(harness.client.result(run, scope=harness.scope), WAIT)
    reason = str(failed.value)
    assert "MCP server 'crm' is unreachable" in reason
    assert origin in reason and own_issuer.issuer in reason, reason
    assert "issuer configured for this client" in reason
    # No authorization URL led to the server's own authorization server, and no model
    # call was made.
    assert own_issuer.consents()["authorized"] == []
    assert harness.fake.requests == []
