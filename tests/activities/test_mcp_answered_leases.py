"""A call whose answer arrived keeps it, whatever another lease did to the session after.

Two leases share one pooled session; the first has its ``tools/call`` answered and, before
its lease ends, another lease breaks the session for a reason other than the server ending
it: a token store failing that lease's OAuth flow (that request fails alone), a request
refused on it as "Connection closed", or the session retired. Before: the first lease's
exit raised ``SessionBroke`` (not ``nothing_handed``), so its answer was dropped and the
call reported as one that may have run (a tool not safe to repeat could run twice). The
session itself is still lent no more; a call that had not had its answer when the session
broke is still one that may have run.

Real MCP test servers in their own processes on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from psych_runtime.activities.mcp._pool import _ENDED, McpSessions, SessionBroke, SessionKey
from psych_runtime.specs import Scope, StoreUnavailable
from tests.activities.test_mcp import eventually
from tests.activities.test_mcp_ended_sessions import (
    StoreDownFor,
    charge_after_the_break,
    echo_round,
    loopback,
    pool,
)
from tests.mcp.fixture import McpTestServer, Transport, start_mcp_server


def text_of(result: object) -> str:
    content = getattr(result, "content", None)
    assert content, result
    return str(content[0].text)


async def lent_afresh(sessions: McpSessions, key: SessionKey, served: McpTestServer) -> None:
    """The next lease of ``key`` connects a new session, which works."""
    auth = StoreDownFor(b"needs-a-token")
    async with sessions.client(key, served.url, {}, auth) as client:
        assert text_of(await client.call_tool("echo", {"text": "again"})) == "again"


@contextlib.asynccontextmanager
async def pooled_server(
    transport: Transport, wire: str, secret: str | None
) -> AsyncIterator[tuple[McpSessions, McpTestServer, SessionKey]]:
    """A real MCP server on ``transport``, a session pool through a loopback egress, and
    the pool's key for it (``secret``: the credential it is keyed by); all stopped and
    closed after."""
    egress = loopback()
    sessions = pool(egress)
    served = start_mcp_server(transport)
    try:
        yield sessions, served, SessionKey.of(Scope(tenant="acme"), served.url, wire, secret)
    finally:
        served.stop()
        await sessions.aclose()
        await egress.aclose()


async def test_an_answered_call_keeps_its_answer_when_another_lease_broke_the_session() -> None:
    # Streamable HTTP: a token store fails the second lease's OAuth flow, which breaks the
    # session (that request fails alone, and the pool is told of it) while the first
    # lease, answered, still holds it and a third has its tools/call with the server.
    async with pooled_server("streamable-http", "http", "token") as (sessions, served, key):
        auth = StoreDownFor(b"needs-a-token")

        async def call(tool: str, arguments: dict[str, object]) -> object:
            async with sessions.client(key, served.url, {}, auth) as client:
                return await client.call_tool(tool, arguments)

        async with sessions.client(key, served.url, {}, auth) as client:
            answered = await client.call_tool("echo", {"text": "kept"})
            pooled = sessions._sessions[key]
            slow = asyncio.create_task(call("slow", {"seconds": 2}))
            await eventually(lambda: served.calls("slow") == 1, within=20)
            with pytest.raises(StoreUnavailable):
                await call("echo", {"text": "needs-a-token"})
            await eventually(lambda: pooled.broken is not None, within=10)
            assert pooled.broken != _ENDED  # broken by a lease, not ended by the server
        assert text_of(answered) == "kept"  # its lease ended without raising
        # Its POST had left: answered too (until 12-07 the SDK ended the session with the
        # failed flow, and this call lost its answer, may have run: test_mcp_told_posts).
        assert text_of(await slow).startswith("slept 2")
        assert key not in sessions.keys or sessions._sessions[key] is not pooled
        await lent_afresh(sessions, key, served)


async def test_an_answered_sse_call_keeps_its_answer_when_another_call_met_the_break() -> None:
    # SSE: a token store failing one POST ends the transport's writer (that call fails at
    # once, and the session is lent no more); a later call by a lease holding it is
    # refused unsent ("Connection closed"), while the first lease, answered, still holds it.
    async with pooled_server("sse", "sse", "token") as (sessions, served, key):
        gate, broke = asyncio.Event(), asyncio.Event()
        auth = StoreDownFor(b"needs-a-token", gate)
        async with sessions.client(key, served.url, {}, auth) as client:
            answered = await client.call_tool("echo", {"text": "kept"})
            pooled = sessions._sessions[key]
            failing = asyncio.create_task(
                echo_round(sessions, key, served.url, auth, "needs-a-token")
            )
            await eventually(lambda: auth.waiting, within=10)  # its POST's flow has begun
            charging = asyncio.create_task(
                charge_after_the_break(sessions, key, served.url, auth, broke)
            )
            await eventually(lambda: pooled.users == 3, within=10)
            gate.set()
            with pytest.raises(StoreUnavailable):
                await failing
            broke.set()
            with pytest.raises(SessionBroke) as caught:
                await charging
            assert caught.value.nothing_handed
            assert pooled.broken not in (None, _ENDED)
        assert text_of(answered) == "kept"  # its lease ended without raising
        assert served.calls("charge") == 0
        await lent_afresh(sessions, key, served)


async def test_an_answered_call_keeps_its_answer_when_its_session_was_retired() -> None:
    # A call needing a person's consent retires the session (McpActivities._call) while
    # another lease, answered, holds it.
    async with pooled_server("streamable-http", "http", "token") as (sessions, served, key):
        async with sessions.client(key, served.url, {}) as client:
            answered = await client.call_tool("echo", {"text": "kept"})
            pooled = sessions._sessions[key]
            sessions.retire(key, "a person's consent is needed")
        assert text_of(answered) == "kept"  # its lease ended without raising
        await eventually(lambda: pooled.task is not None and pooled.task.done(), within=10)
        await lent_afresh(sessions, key, served)


async def test_a_call_in_flight_gets_its_answer_after_the_server_garbled_a_message() -> None:
    # A server message the SSE transport cannot read reaches the pool as a transport
    # fault; the transport reads on. Before: the pool closed the session at once, cutting
    # off ``slow``, which the server was running (SessionBroke: may have run). Now the
    # session is lent no more and closed once its last lease ends.
    async with pooled_server("sse", "sse", None) as (sessions, served, key):
        async with sessions.client(key, served.url, {}) as client:
            slow = asyncio.create_task(client.call_tool("slow", {"seconds": 2}))
            await eventually(lambda: served.calls("slow") == 1, within=20)
            pooled = sessions._sessions[key]
            assert served.garble() == 1
            await eventually(lambda: pooled.broken is not None, within=10)
            assert text_of(await slow).startswith("slept 2")
        await eventually(lambda: pooled.task is not None and pooled.task.done(), within=10)
        await lent_afresh(sessions, key, served)
