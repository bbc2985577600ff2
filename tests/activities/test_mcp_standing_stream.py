"""The event stream a streamable-HTTP session keeps open of its own (its standing GET) is
no call's request.

The SDK opens it once the session is initialized, in the context that sent
``notifications/initialized`` (the pool's owner task, which keeps its opener's context),
and opens it again with ``Last-Event-ID`` when the server closes it. Before 12-07, a token
store failing that GET's OAuth flow was told to the session as a resumed request's ("its
request had been sent"), and kept as a reason the session might end for: a later lease
whose own request the server refused as "Session terminated", told nothing itself, was
told the store's stale failure instead; likewise the server refusing the token that GET's
flow had just obtained (``TokenRefused``). Now either is logged, never told.

Real MCP test servers in their own processes on loopback (``tests.mcp.server
--resumable``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

import httpx2
import pytest

from psych_runtime.activities.mcp._pool import SessionBroke, SessionKey
from psych_runtime.specs import Scope, StoreUnavailable
from tests.activities.test_mcp import eventually
from tests.activities.test_mcp_answered_leases import lent_afresh, text_of
from tests.activities.test_mcp_ended_sessions import loopback, pool
from tests.mcp.fixture import start_mcp_server


class StoreDownOnReopening(httpx2.Auth):
    """An OAuth provider whose token store fails for every GET carrying ``Last-Event-ID``
    (an event stream opened again); it notes the MCP session id it sees."""

    def __init__(self) -> None:
        self.reopened = 0
        self.session: str | None = None

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        self.session = request.headers.get("mcp-session-id", self.session)
        if request.method == "GET" and "last-event-id" in request.headers:
            self.reopened += 1
            raise StoreUnavailable("the token store did not answer")
        yield request


async def test_a_store_failure_reopening_the_standing_stream_is_nobodys(
    caplog: pytest.LogCaptureFixture,
) -> None:
    egress = loopback()
    sessions = pool(egress)
    served = start_mcp_server("streamable-http", resumable=True)
    key = SessionKey.of(Scope(tenant="acme"), served.url, "http", "token")
    auth = StoreDownOnReopening()
    heard: list[SessionKey] = []
    sessions._on_tools_changed = heard.append
    try:
        async with sessions.client(key, served.url, {}, auth) as client:
            assert text_of(await client.call_tool("echo", {"text": "on"})) == "on"
            pooled = sessions._sessions[key]
            await eventually(lambda: served.add_tool("added") and heard, within=20)
            # The standing stream had an event (list_changed): it is opened again with
            # Last-Event-ID once the server closes it, and the store fails that flow.
            assert text_of(await client.call_tool("unheard", {})) == "closed"
            await eventually(lambda: auth.reopened >= 1, within=20)
        assert pooled.refused == []  # before: the store's failure, "its request had been sent"
        assert "its request had been sent" not in caplog.text
        assert "an MCP session's own event stream failed" in caplog.text
        # The server ends the session: a lease's request is refused "Session not found".
        assert auth.session is not None
        async with httpx2.AsyncClient() as plain:
            ended = await plain.delete(served.url, headers={"mcp-session-id": auth.session})
            assert ended.status_code == 200, ended.text
        with pytest.raises(SessionBroke) as caught:
            async with sessions.client(key, served.url, {}, auth) as client:
                await client.call_tool("echo", {"text": "after"})
        # Its own error, not the standing stream's stale failure (before: "the session
        # broke: getting an OAuth token to resume an event stream failed: ...").
        assert str(caught.value) == "the session broke: MCP error -32600: Session not found"
        await lent_afresh(sessions, key, served)
    finally:
        served.stop()
        await sessions.aclose()
        await egress.aclose()


class RefusedOnStanding(httpx2.Auth):
    """A provider that renews a token for every GET (a request of its own first, as a
    token endpoint's), then sends the GET with a token the server refuses (none: the
    server requires one); every other request carries a good bearer."""

    def __init__(self, side: str) -> None:
        self.side = side
        self.refused = 0
        self.session: str | None = None

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        self.session = request.headers.get("mcp-session-id", self.session)
        if request.method != "GET":
            request.headers["authorization"] = "Bearer good"
            yield request
            return
        yield httpx2.Request("GET", self.side)  # the flow's own request: a renewal
        response = yield request
        if response.status_code == 401:
            self.refused += 1


async def test_a_token_refused_on_the_standing_stream_is_nobodys(
    caplog: pytest.LogCaptureFixture,
) -> None:
    egress = loopback()
    sessions = pool(egress)
    served = start_mcp_server("streamable-http", require_bearer=True)
    key = SessionKey.of(Scope(tenant="acme"), served.url, "http", "token")
    auth = RefusedOnStanding(f"{served.base_url}/control/state")
    try:
        async with sessions.client(key, served.url, {}, auth) as client:
            assert text_of(await client.call_tool("echo", {"text": "on"})) == "on"
            pooled = sessions._sessions[key]
            await eventually(lambda: auth.refused >= 1, within=20)
        # The standing GET's renewed token refused: no call's, nor why the session ends
        # (before: told as TokenRefused, kept in pooled.refused).
        assert pooled.refused == []
        assert "for an MCP session's own event stream" in caplog.text
        assert auth.session is not None
        async with httpx2.AsyncClient() as plain:
            headers = {"mcp-session-id": auth.session, "authorization": "Bearer good"}
            ended = await plain.delete(served.url, headers=headers)
            assert ended.status_code == 200, ended.text
        with pytest.raises(SessionBroke) as caught:
            async with sessions.client(key, served.url, {}, auth) as client:
                await client.call_tool("echo", {"text": "after"})
        # Its own error, not the standing stream's refused token (before: "the session
        # broke: the MCP server refused the OAuth token just obtained for it: HTTP 401 ...").
        assert str(caught.value) == "the session broke: MCP error -32600: Session not found"
    finally:
        served.stop()
        await sessions.aclose()
        await egress.aclose()
