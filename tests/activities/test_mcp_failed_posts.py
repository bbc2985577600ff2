"""One request's POST failing on a pooled streamable-HTTP session fails that request alone.

On streamable HTTP each request is its own POST, run in a task of the SDK transport's task
group. Before: one POST raising (here its JSON body over the egress bound; likewise a
connection refused or reset, a read timeout, an egress refusal) ended the whole session, so
another lease's call the server was running lost its answer (``SessionBroke``, may have
run). Now the failing request alone raises; the session is lent no more and closed when
its last lease ends.

Real MCP test servers in their own processes on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections.abc import AsyncIterator

import pytest
from mcp.shared.exceptions import MCPDeprecationWarning

from psych_runtime.activities.egress import Egress, EgressRules, EgressSettings
from psych_runtime.activities.mcp._pool import (
    _ENDED,
    McpSessions,
    SessionBroke,
    SessionKey,
    _Pooled,
)
from psych_runtime.specs import Scope
from tests.activities.test_mcp import eventually
from tests.activities.test_mcp_answered_leases import text_of
from tests.activities.test_mcp_ended_sessions import pool
from tests.mcp.fixture import McpTestServer, start_mcp_server

_BOUND = 20_000
"""The egress policy's ``max_response_bytes`` here: ``big`` past it is refused."""


@contextlib.asynccontextmanager
async def bounded_json_server() -> AsyncIterator[tuple[McpSessions, McpTestServer, SessionKey]]:
    """A streamable-HTTP server answering with JSON bodies (read whole, so bounded), a pool
    through a loopback egress bounding bodies at ``_BOUND``, and the pool's key for it."""
    rules = EgressRules(allow_cidrs=("127.0.0.0/8",))
    egress = Egress(EgressSettings(rules=rules, max_response_bytes=_BOUND))
    sessions = pool(egress)
    served = start_mcp_server("streamable-http", json_response=True)
    try:
        yield sessions, served, SessionKey.of(Scope(tenant="acme"), served.url, "http", None)
    finally:
        served.stop()
        await sessions.aclose()
        await egress.aclose()


async def test_a_call_in_flight_gets_its_answer_when_another_calls_post_failed() -> None:
    async with bounded_json_server() as (sessions, served, key):

        async def call(tool: str, arguments: dict[str, object]) -> object:
            async with sessions.client(key, served.url, {}) as client:
                return await client.call_tool(tool, arguments)

        assert text_of(await call("echo", {"text": "connected"})) == "connected"
        pooled = sessions._sessions[key]
        slow = asyncio.create_task(call("slow", {"seconds": 2}))
        await eventually(lambda: served.calls("slow") == 1, within=20)
        with pytest.raises(SessionBroke) as caught:  # its reply refused: may have run
            await call("big", {"size": 2 * _BOUND})
        assert "response too large" in str(caught.value)
        assert not caught.value.nothing_handed
        assert pooled.broken not in (None, _ENDED)  # lent no more
        assert text_of(await slow).startswith("slept 2")  # before: SessionBroke, lost
        await eventually(lambda: pooled.task is not None and pooled.task.done(), within=10)
        assert text_of(await call("echo", {"text": "again"})) == "again"  # a fresh session


async def test_a_notification_whose_post_failed_is_dropped_and_the_session_lent_no_more() -> None:
    # Nobody waits for a notification: its POST refused (the server gone) is logged and
    # dropped, and the session is lent no more. Before: the failed POST ended the session
    # through the transport's writer, as if the server had ended it; a request after it
    # was refused unsent ("Connection closed"), not by its own fault.
    async with bounded_json_server() as (sessions, served, key):
        leased: list[_Pooled] = []

        async def notify_then_call() -> None:
            async with sessions.client(key, served.url, {}) as client:
                assert text_of(await client.call_tool("echo", {"text": "on"})) == "on"
                pooled = sessions._sessions[key]
                leased.append(pooled)
                served.stop()
                with warnings.catch_warnings():  # any notification: this one is at hand
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    await client.send_roots_list_changed()
                await eventually(lambda: pooled.broken is not None, within=10)
                assert "ConnectError" in str(pooled.broken)
                await client.call_tool("charge", {"amount": 1})

        with pytest.raises(SessionBroke) as caught:  # the call's own POST refused
            await notify_then_call()
        assert "ConnectError" in str(caught.value)
        task = leased[0].task
        await eventually(lambda: task is not None and task.done(), within=10)
