"""A person's consent is asked by the call whose own request needed it, and only by it
(``Consents``): a call of the same principal and server already with the server (a slow
write, not safe to repeat) goes on waiting for its own answer, and is never reported as a
call that did not run (after the consent the Run would run it again: twice). Against the
consent server on loopback, both transports."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities import LocalTokenStore, McpSettings
from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.contract import ErrorType, McpAuthorizeInput, McpConsent
from psych_runtime.activities.mcp import McpActivities, deliver_authorization
from psych_runtime.activities.mcp._consent import ConsentProvider
from psych_runtime.activities.tokens import TokenStore
from psych_runtime.specs import McpOAuth, McpServer
from tests.activities.test_mcp import SCOPE, call, eventually
from tests.mcp.oauth_fixture import OAuthMcpServer, start_oauth_server

CLIENT = "psych-agent"
REDIRECT = "http://127.0.0.1:9/oauth/callback"
"""Never opened: the test reads the code from the authorization server's redirect."""


@pytest.fixture(params=["streamable-http", "sse"])
def consent_server(request: pytest.FixtureRequest) -> Iterator[OAuthMcpServer]:
    server = start_oauth_server(
        request.param, {CLIENT: REDIRECT}, module="tests.mcp.consent_server"
    )
    yield server
    server.stop()


def crm(server: OAuthMcpServer) -> McpServer:
    oauth = McpOAuth(
        grant="authorization_code", preregistered_client_id=CLIENT, redirect_uris=(REDIRECT,)
    )
    transport = "sse" if server.transport == "sse" else "http"
    return McpServer(name="crm", url=server.url, transport=transport, oauth=oauth)


def asked(err: ApplicationError) -> McpConsent:
    """The consent an activity's failure asks for."""
    assert err.type == ErrorType.MCP_CONSENT_REQUIRED, err
    return McpConsent.model_validate(err.details[0])


async def consent(mcp: McpActivities, store: TokenStore, consent: McpConsent) -> None:
    """A person consents (the authorization server redirects at once) and the Run's
    ``psych.mcp.authorize`` exchanges the code."""
    async with httpx.AsyncClient() as browser:
        answer = await browser.get(consent.url)
    query = parse_qs(urlsplit(answer.headers["location"]).query)
    iss = query.get("iss", [None])[0]
    await deliver_authorization(store, query["code"][0], query["state"][0], iss)
    given = McpAuthorizeInput(run_id="r1", id=consent.id, scope=SCOPE)
    done = await ActivityEnvironment().run(mcp.authorize, given)
    assert done.ok, done.reason


async def test_a_call_already_sent_is_not_taken_for_another_calls_consent(
    consent_server: OAuthMcpServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A refused refresh waits this long for another worker's token before it asks.
    monkeypatch.setattr(ConsentProvider, "refresh_settle_seconds", 0.1)
    store = LocalTokenStore(tmp_path / "tokens")
    mcp = McpActivities(
        blobs=LocalBlobStore(tmp_path / "blobs"),
        settings=McpSettings(oauth_issuers={CLIENT: consent_server.issuer}),
        tokens=store,
    )
    server = crm(consent_server)
    try:
        with pytest.raises(ApplicationError) as first:
            await call(mcp, server, "whoami", {})
        await consent(mcp, store, asked(first.value))
        assert (await call(mcp, server, "whoami", {})).content == CLIENT
        # B: a slow write, sent and running on the pooled session.
        slow = asyncio.ensure_future(call(mcp, server, "slow", {"seconds": 3}))
        await eventually(lambda: consent_server.state()["calls"].get("slow") == 1, 20)
        # The tokens are revoked: A, the same principal's next call on that server, meets
        # a 401, its refresh is refused, and its own flow asks for a person's consent.
        consent_server.revoke_everything()
        with pytest.raises(ApplicationError) as second:
            await call(mcp, server, "whoami", {})
        assert asked(second.value).server == "crm"
        # B is not the call that needed it: it is never told "did not run, run again",
        # and keeps waiting for its own answer.
        outcome = await slow
        state = consent_server.state()
        assert state["calls"]["slow"] == 1
        # Its answer: A's refused request failed alone (the session lent no more).
        assert (outcome.status, outcome.content) == ("ok", "done"), outcome.content
        assert state["finished"]["slow"] == 1
    finally:
        await mcp.aclose()
