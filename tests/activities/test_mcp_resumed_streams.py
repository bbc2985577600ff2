"""A token store failing a resumed event stream's OAuth flow: the call's request had left.

Over streamable HTTP a ``tools/call`` is answered on an event stream; a server that drops
it (its events kept) is resumed by the SDK with a GET carrying ``Last-Event-ID``, in the
asking call's context and through its OAuth flow. A token store failing that flow
(``StoreUnavailable``) came out of the lease as it is, which the activity reads as "the
store is down, nothing sent" and Temporal retries: yet the ``tools/call`` POST had left and
the tool ran. Now the lease raises ``SessionBroke`` naming the store's failure, a call that
may have run (not ``nothing_handed``).

Real MCP test servers in their own processes on loopback (``tests.mcp.server
--resumable``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import httpx2
import pytest

from psych_runtime.activities.mcp._call import Round, call_round
from psych_runtime.activities.mcp._pool import McpSessions, SessionBroke, SessionKey
from psych_runtime.specs import Scope, StoreUnavailable
from tests.activities.test_mcp_answered_leases import lent_afresh, text_of
from tests.activities.test_mcp_ended_sessions import StoreDownFor, loopback, nothing, pool
from tests.mcp.fixture import start_mcp_server


class StoreDownOnResuming(httpx2.Auth):
    """An OAuth provider whose token store fails for every resumption of an event stream
    (a GET carrying ``Last-Event-ID``)."""

    def __init__(self) -> None:
        self.resumed = 0

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if request.method == "GET" and "last-event-id" in request.headers:
            self.resumed += 1
            raise StoreUnavailable("the token store did not answer")
        yield request


async def dropped_round(
    sessions: McpSessions, key: SessionKey, url: str, auth: httpx2.Auth, made: Round
) -> object:
    """One ``dropped`` round (``call_round``, as the activity's) on a lease of ``key``."""
    async with sessions.client(key, url, {}, auth) as client:
        async with asyncio.timeout(20):
            return await call_round(client, "dropped", {"seconds": 0.5}, nothing, None, made)


async def test_a_store_failure_resuming_a_calls_stream_is_a_call_that_may_have_run() -> None:
    egress = loopback()
    sessions = pool(egress)
    served = start_mcp_server("streamable-http", resumable=True)
    key = SessionKey.of(Scope(tenant="acme"), served.url, "http", "token")
    auth = StoreDownOnResuming()
    try:
        async with sessions.client(key, served.url, {}, auth) as client:
            assert text_of(await client.call_tool("echo", {"text": "on"})) == "on"
        made = Round()
        with pytest.raises(SessionBroke) as caught:
            await dropped_round(sessions, key, served.url, auth, made)
        assert auth.resumed >= 1  # its stream was dropped, and resuming it met the store
        assert served.calls("dropped") == 1  # its POST had left: the tool ran
        assert made.sent
        assert not caught.value.nothing_handed  # before: StoreUnavailable, "nothing sent"
        assert str(caught.value) == (
            "the session broke: getting an OAuth token to resume an event stream failed: the "
            "token store did not answer (its request had been sent)"
        )
        await lent_afresh(sessions, key, served)
    finally:
        served.stop()
        await sessions.aclose()
        await egress.aclose()


async def test_a_dropped_stream_resumed_gets_its_answer() -> None:
    # The server and the SDK's resumption, as the test above relies on them.
    egress = loopback()
    sessions = pool(egress)
    served = start_mcp_server("streamable-http", resumable=True)
    key = SessionKey.of(Scope(tenant="acme"), served.url, "http", "token")
    try:
        async with sessions.client(key, served.url, {}, StoreDownFor(b"never")) as client:
            async with asyncio.timeout(20):
                answer = await client.call_tool("dropped", {"seconds": 0.5})
        assert text_of(answer) == "resumed after 0.5"
    finally:
        served.stop()
        await sessions.aclose()
        await egress.aclose()
