"""A call whose own request fails its OAuth flow on a pooled SSE session fails at once.

The SDK's SSE transport POSTs each message from one writer task, which ends with the first
POST that raises (a token store failing the request's OAuth flow, a token refused): the
request is never answered and nothing more is sent on the session. Before: the call
waited until its timeout and then reported a call that may have run. Now the pool, told
of the failure (``ToldAuth``), fails that call with the failure's own error (the token
store's ``StoreUnavailable`` as it is), says it did not run when its request never left,
and lends the session no more; the calls other leases had already sent still get their
answers on the event stream.

Real MCP test servers in their own processes on loopback (``tests.mcp.server``, and
``tests.mcp.oauth_server`` with its authorization server).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Generator, Iterator
from pathlib import Path

import httpx2
import pytest
from mcp.client.auth import OAuthTokenError

from psych_runtime.activities import LocalTokenStore, McpSettings
from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.mcp import McpActivities
from psych_runtime.activities.mcp._pool import McpSessions, McpUnavailable, SessionBroke, SessionKey
from psych_runtime.specs import McpOAuth, McpServer, Scope, StoreUnavailable
from tests.activities.test_mcp import call, eventually
from tests.activities.test_mcp_answered_leases import lent_afresh, pooled_server, text_of
from tests.activities.test_mcp_ended_sessions import StoreDownFor, echo_round, loopback, pool
from tests.activities.test_mcp_oauth import SECRET, SECRETS
from tests.mcp.fixture import start_mcp_server
from tests.mcp.oauth_fixture import OAuthMcpServer, start_oauth_server

QUICK = 5.0
"""Bound on a call that must fail at once (the SDK left it waiting for 300 s before)."""


class RefusedFor(httpx2.Auth):
    """An OAuth provider whose flow fails, before sending it, for a request carrying
    ``marker`` (as one whose authorization server refused a new token)."""

    requires_request_body = True

    def __init__(self, marker: bytes) -> None:
        self.marker = marker

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if self.marker in request.content:
            raise OAuthTokenError("invalid_client")
        yield request


async def test_a_call_whose_token_store_failed_raises_it_at_once_and_others_keep_theirs() -> None:
    async with pooled_server("sse", "sse", "token") as (sessions, served, key):
        auth = StoreDownFor(b"needs-a-token")
        async with sessions.client(key, served.url, {}, auth) as client:
            slow = asyncio.create_task(client.call_tool("slow", {"seconds": 2}))
            await eventually(lambda: served.calls("slow") == 1, within=20)
            pooled = sessions._sessions[key]
            started = time.monotonic()
            with pytest.raises(StoreUnavailable, match="the token store did not answer"):
                await echo_round(sessions, key, served.url, auth, "needs-a-token")
            assert time.monotonic() - started < QUICK
            assert pooled.broken is not None  # lent no more
            assert key not in sessions.keys
            assert text_of(await slow).startswith("slept 2")  # its POST had left: answered
        await eventually(lambda: pooled.task is not None and pooled.task.done(), within=10)
        await lent_afresh(sessions, key, served)


async def test_a_call_whose_oauth_flow_failed_before_sending_says_so_and_did_not_run() -> None:
    async with pooled_server("sse", "sse", "token") as (sessions, served, key):
        auth = RefusedFor(b"refused-token")
        with pytest.raises(SessionBroke) as caught:
            await echo_round(sessions, key, served.url, auth, "refused-token")
        assert str(caught.value) == "getting an OAuth token failed: OAuthTokenError: invalid_client"
        assert caught.value.nothing_handed  # the flow failed before its request left
        assert served.calls("echo") == 0
        assert key not in sessions.keys
        await lent_afresh(sessions, key, served)


@pytest.fixture(scope="module")
def sse_oauth_server() -> Iterator[OAuthMcpServer]:
    server = start_oauth_server("sse", {"psych-worker": SECRET})
    yield server
    server.stop()


async def test_an_sse_call_whose_new_token_was_refused_fails_at_once(
    sse_oauth_server: OAuthMcpServer, tmp_path: Path
) -> None:
    # The server stops taking the token and the authorization server stops knowing the
    # client. Before: "no result within 15 s (the call was cancelled)", after 15 s.
    served = sse_oauth_server
    oauth = McpOAuth(preregistered_client_id="psych-worker", client_secret_credential="crm_secret")
    crm = McpServer(name="crm", url=served.url, transport="sse", oauth=oauth)
    mcp = McpActivities(
        blobs=LocalBlobStore(tmp_path / "blobs"),
        secrets=SECRETS,
        settings=McpSettings(oauth_issuers={"crm_secret": served.issuer}, call_timeout_seconds=15),
        tokens=LocalTokenStore(tmp_path / "tokens"),
    )
    try:
        assert (await call(mcp, crm, "whoami", {})).status == "ok"
        served.revoke_all()
        served.set_clients({})
        started = time.monotonic()
        refused = await call(mcp, crm, "whoami", {})
        assert time.monotonic() - started < QUICK
        assert refused.status == "error"
        assert refused.content.startswith(
            "MCP server 'crm', tool 'whoami': getting an OAuth token failed: "
        ), refused.content
        assert "invalid_client" in refused.content
        assert SECRET not in refused.content
        served.set_clients({"psych-worker": SECRET})
        assert (await call(mcp, crm, "whoami", {})).status == "ok"  # a fresh session
    finally:
        served.set_clients({"psych-worker": SECRET})
        await mcp.aclose()


class TokenEndpointDown(httpx2.Auth):
    """An OAuth provider whose flow, for a request carrying ``marker``, first asks a token
    endpoint nobody listens on (an authorization server down): httpx2 raises its
    ``ConnectError`` from the POST itself, never into the flow, so ``ToldAuth`` sees none."""

    requires_request_body = True

    def __init__(self, marker: bytes) -> None:
        self.marker = marker

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if self.marker in request.content:
            yield httpx2.Request("POST", "http://127.0.0.1:9/token", content=b"grant_type=x")
        yield request


async def test_an_sse_call_whose_token_endpoint_is_unreachable_fails_at_once() -> None:
    # Before: the SDK's writer ended with the POST's ConnectError, told to nobody: the call
    # waited out its timeout (then read as one that may have run) and the session, its
    # writer gone, stayed in the pool to be lent again.
    async with pooled_server("sse", "sse", "token") as (sessions, served, key):
        started = time.monotonic()
        with pytest.raises(SessionBroke) as caught:
            await echo_round(sessions, key, served.url, TokenEndpointDown(b"down"), "down")
        assert time.monotonic() - started < QUICK
        assert str(caught.value).startswith("sending an MCP message failed: ConnectError")
        assert served.calls("echo") == 0
        assert key not in sessions.keys  # lent no more
        await lent_afresh(sessions, key, served)


class BearerUnlessMarked(httpx2.Auth):
    """A bearer token on every request but one carrying ``marker`` (as a credential the
    server stopped taking)."""

    requires_request_body = True

    def __init__(self, marker: bytes) -> None:
        self.marker = marker

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response]:
        if self.marker not in request.content:
            request.headers["Authorization"] = "Bearer good"
        yield request


async def test_an_sse_call_whose_post_the_server_refused_fails_at_once() -> None:
    # The SDK's writer raises the 401 of the POST (raise_for_status) and ends: before, the
    # call waited out its timeout, and the session was lent again.
    egress = loopback()
    sessions = pool(egress)
    served = start_mcp_server("sse", require_bearer=True)
    key = SessionKey.of(Scope(tenant="acme"), served.url, "sse", "token")
    auth = BearerUnlessMarked(b"no-bearer")
    try:
        started = time.monotonic()
        with pytest.raises(SessionBroke, match="answered a message with HTTP 401"):
            await echo_round(sessions, key, served.url, auth, "no-bearer")
        assert time.monotonic() - started < QUICK
        assert key not in sessions.keys
        assert text_of(await echo_round(sessions, key, served.url, auth, "again")) == "again"
    finally:
        served.stop()
        await sessions.aclose()
        await egress.aclose()


async def test_an_sse_handshake_whose_post_the_server_refused_fails_at_once() -> None:
    # The SDK's writer ends with the initialize POST's 503 while the session connects, and
    # the handshake is never answered. Before: every lease waiting for the session waited
    # out connect_timeout and was told only that; now each fails with the POST's reason.
    egress = loopback()
    sessions = McpSessions(
        max_sessions=4,
        idle_seconds=60,
        connect_timeout=60,  # the wait before; the reason, not the clock, tells them apart
        on_tools_changed=lambda key: None,
        egress=egress,
    )
    served = start_mcp_server("sse")
    key = SessionKey.of(Scope(tenant="acme"), served.url, "sse", None)

    async def lease() -> None:
        async with sessions.client(key, served.url, {}):
            raise AssertionError("connected through a refused handshake")

    try:
        served.refuse("initialize")
        failed = await asyncio.gather(lease(), lease(), return_exceptions=True)
        for err in failed:
            assert isinstance(err, McpUnavailable), err
            assert str(err) == "the MCP server answered a message with HTTP 503", err
        assert key not in sessions.keys
        served.refuse()
        await lent_afresh(sessions, key, served)
    finally:
        served.stop()
        await sessions.aclose()
        await egress.aclose()


async def test_an_sse_handshake_whose_post_was_redirected_away_fails_at_once() -> None:
    # A 302 to a POST is a redirect the SDK does not follow (it would turn the POST into a
    # GET without the message): its writer ends raising for the status, as for a 503, and
    # the handshake is never answered. Before: told nothing (only statuses >= 400 were),
    # every lease waited out connect_timeout; now each fails naming the redirect.
    egress = loopback()
    sessions = McpSessions(
        max_sessions=4,
        idle_seconds=60,
        connect_timeout=60,  # the wait before; the reason, not the clock, tells them apart
        on_tools_changed=lambda key: None,
        egress=egress,
    )
    served = start_mcp_server("sse")
    key = SessionKey.of(Scope(tenant="acme"), served.url, "sse", None)

    async def lease() -> None:
        async with sessions.client(key, served.url, {}):
            raise AssertionError("connected through a redirected handshake")

    try:
        served.refuse("initialize", status=302, location="/moved")
        failed = await asyncio.gather(lease(), lease(), return_exceptions=True)
        for err in failed:
            assert isinstance(err, McpUnavailable), err
            assert str(err) == (
                "the MCP server answered a message with HTTP 302 (redirected to "
                f"{served.base_url}/moved; not followed)"
            ), err
        assert key not in sessions.keys
        served.refuse()
        await lent_afresh(sessions, key, served)
    finally:
        served.stop()
        await sessions.aclose()
        await egress.aclose()


async def test_an_sse_call_whose_post_was_redirected_away_fails_at_once() -> None:
    # The call's POST answered with a redirect the SDK does not follow: its writer ends, as
    # for an error status. Before: told nothing, the round waited out its bound (5 s here,
    # the call's timeout in an activity) with TimeoutError.
    egress = loopback()
    sessions = pool(egress)
    served = start_mcp_server("sse")
    key = SessionKey.of(Scope(tenant="acme"), served.url, "sse", None)
    auth = BearerUnlessMarked(b"never-marked")
    try:
        served.refuse("tools/call", status=302, location="/moved")
        with pytest.raises(SessionBroke) as caught:
            await echo_round(sessions, key, served.url, auth, "moved")
        assert str(caught.value) == (
            "the MCP server answered a message with HTTP 302 (redirected to "
            f"{served.base_url}/moved; not followed)"
        )
        assert key not in sessions.keys
        served.refuse()
        assert text_of(await echo_round(sessions, key, served.url, auth, "again")) == "again"
    finally:
        served.stop()
        await sessions.aclose()
        await egress.aclose()
