"""A pooled streamable-HTTP session: a request whose own OAuth flow failed fails alone, and
each lease is told its own fault.

The SDK runs each streamable-HTTP POST in its transport's task group, and the request's
OAuth flow inside it: a flow raising on purpose (a token store down, a token the
authorization server refused) ended the whole session. Before: another lease's call the
server was running lost its answer (``SessionBroke``, may have run). Now the asking lease
raises what it did before (``StoreUnavailable`` as it is; ``SessionBroke`` with the flow's
words: a call that did not run when the flow failed before its request left, as over SSE,
``nothing_handed``, until 12-07 one that may have run; after it left, may have run), the
others keep their answers, and the session is lent no more and
closed after its last lease. A flow stopped for a person's consent (``ConsentNeeded``)
fails its own request alone the same way since 12-07 (the consent asked for by the call
whose request needed it: tests/activities/test_mcp_consent_owner.py; the Run asks again:
tests/e2e/test_mcp_consent.py).

Since sessions outlive a fault, a lease's ``SessionBroke`` named the session's last
failure, which could be another lease's: one lease's reply over the egress bound, then
another's own ``ConnectError``, told "response too large".

Real MCP test servers in their own processes on loopback.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import httpx2
import pytest
from mcp.client.auth import OAuthTokenError

from psych_runtime.activities.mcp._pool import _ENDED, SessionBroke
from psych_runtime.activities.mcp._told import ConsentNeeded
from psych_runtime.specs import StoreUnavailable
from tests.activities.test_mcp import eventually
from tests.activities.test_mcp_answered_leases import lent_afresh, pooled_server, text_of
from tests.activities.test_mcp_ended_sessions import StoreDownFor
from tests.activities.test_mcp_failed_posts import _BOUND, bounded_json_server
from tests.activities.test_mcp_sse_told import RefusedFor


async def test_a_call_in_flight_keeps_its_answer_when_another_calls_token_store_failed() -> None:
    async with pooled_server("streamable-http", "http", "token") as (sessions, served, key):
        auth = StoreDownFor(b"needs-a-token")

        async def call(tool: str, arguments: dict[str, object]) -> object:
            async with sessions.client(key, served.url, {}, auth) as client:
                return await client.call_tool(tool, arguments)

        assert text_of(await call("echo", {"text": "connected"})) == "connected"
        pooled = sessions._sessions[key]
        slow = asyncio.create_task(call("slow", {"seconds": 2}))
        await eventually(lambda: served.calls("slow") == 1, within=20)
        with pytest.raises(StoreUnavailable, match="the token store did not answer"):
            await call("echo", {"text": "needs-a-token"})  # its own failure, as before
        assert pooled.broken not in (None, _ENDED)  # lent no more
        assert key not in sessions.keys
        assert text_of(await slow).startswith("slept 2")  # before: SessionBroke, lost
        await eventually(lambda: pooled.task is not None and pooled.task.done(), within=10)
        await lent_afresh(sessions, key, served)


async def test_a_call_whose_oauth_flow_failed_says_so_and_others_keep_theirs() -> None:
    async with pooled_server("streamable-http", "http", "token") as (sessions, served, key):
        auth = RefusedFor(b"refused-token")

        async def call(tool: str, arguments: dict[str, object]) -> object:
            async with sessions.client(key, served.url, {}, auth) as client:
                return await client.call_tool(tool, arguments)

        assert text_of(await call("echo", {"text": "connected"})) == "connected"
        pooled = sessions._sessions[key]
        slow = asyncio.create_task(call("slow", {"seconds": 2}))
        await eventually(lambda: served.calls("slow") == 1, within=20)
        with pytest.raises(SessionBroke) as caught:
            await call("echo", {"text": "refused-token"})
        said = "the session broke: getting an OAuth token failed: OAuthTokenError: invalid_client"
        assert str(caught.value) == said  # its own words, as before
        # The flow failed before its request left: did not run, as over SSE (until 12-07 it
        # read "handed to the transport", a call that may have run).
        assert caught.value.nothing_handed
        assert served.calls("echo") == 1  # the first only
        assert text_of(await slow).startswith("slept 2")  # before: SessionBroke, lost
        await eventually(lambda: pooled.task is not None and pooled.task.done(), within=10)
        await lent_afresh(sessions, key, served)


class RefusedAfterSending(httpx2.Auth):
    """An OAuth provider whose flow, for a request carrying ``marker``, sends it, then fails
    (as one whose authorization server refused a new token after the server's 401)."""

    requires_request_body = True

    def __init__(self, marker: bytes) -> None:
        self.marker = marker

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        yield request
        if self.marker in request.content:
            raise OAuthTokenError("invalid_client")


async def test_a_call_whose_oauth_flow_failed_after_sending_may_have_run() -> None:
    # The converse: the request left before the flow failed, so the server may have run it.
    async with pooled_server("streamable-http", "http", "token") as (sessions, served, key):
        auth = RefusedAfterSending(b"sent-then-refused")
        with pytest.raises(SessionBroke) as caught:
            async with sessions.client(key, served.url, {}, auth) as client:
                await client.call_tool("echo", {"text": "sent-then-refused"})
        assert str(caught.value).endswith("OAuthTokenError: invalid_client"), caught.value
        assert not caught.value.nothing_handed
        assert served.calls("echo") == 1  # it did run
        await lent_afresh(sessions, key, served)


class ConsentFor(httpx2.Auth):
    """An OAuth provider whose flow stops for a person's consent for a request carrying
    ``marker`` (as ``_consent.py``'s does)."""

    requires_request_body = True

    def __init__(self, marker: bytes) -> None:
        self.marker = marker

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if self.marker in request.content:
            raise ConsentNeeded("a person's consent is needed (the Run suspends for it)")
        yield request


async def test_a_consent_need_still_ends_the_session() -> None:
    # Left as it was: the activity meets the consent need through the session's end.
    async with pooled_server("streamable-http", "http", "token") as (sessions, served, key):
        auth = ConsentFor(b"needs-consent")

        async def call(tool: str, arguments: dict[str, object]) -> object:
            async with sessions.client(key, served.url, {}, auth) as client:
                return await client.call_tool(tool, arguments)

        assert text_of(await call("echo", {"text": "connected"})) == "connected"
        pooled = sessions._sessions[key]
        with pytest.raises(SessionBroke, match="a person's consent is needed"):
            await call("echo", {"text": "needs-consent"})
        await eventually(lambda: pooled.task is not None and pooled.task.done(), within=10)
        await lent_afresh(sessions, key, served)


async def test_each_lease_is_told_its_own_fault() -> None:
    # One lease's reply is over the egress bound; another lease, holding the session from
    # before, then meets its own ConnectError (the server gone). Before: it was told
    # "response too large", the session's last failure.
    async with bounded_json_server() as (sessions, served, key):
        leased, gone = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with sessions.client(key, served.url, {}) as held:
                assert text_of(await held.call_tool("echo", {"text": "on"})) == "on"
                leased.set()
                await gone.wait()
                await held.call_tool("echo", {"text": "gone"})

        holding = asyncio.create_task(hold())
        await leased.wait()
        pooled = sessions._sessions[key]
        with pytest.raises(SessionBroke, match="response too large"):
            async with sessions.client(key, served.url, {}) as other:
                await other.call_tool("big", {"size": 2 * _BOUND})
        assert pooled.broken is not None and "response too large" in pooled.broken
        served.stop()
        gone.set()
        with pytest.raises(SessionBroke) as caught:
            await holding
        assert str(caught.value).startswith(
            "the session broke: sending an MCP message failed: ConnectError"
        ), caught.value
