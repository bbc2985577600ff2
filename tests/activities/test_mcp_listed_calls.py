"""A ``tools/call`` whose answer arrived is never failed by a request sent after it.

The SDK's ``ClientSession.call_tool`` checks a successful result against the tool's output
schema, and when its session had not listed the tool yet it first sent ``tools/list``:
after the server had run the tool and answered. That listing failing (the session broken
meanwhile by another lease, a listing over the egress bound) failed the call as one that
may have run, its answer dropped (a tool not safe to repeat could run twice). A round now
lists the tool before its ``tools/call`` when its session has not (a failure there: the
call did not run) and sends nothing after the answer (``mcp/_call.py``).

Real MCP test servers in their own processes on loopback; the store's disk refuses for
real (a file stands where its directory goes).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.mcp import McpActivities
from psych_runtime.activities.mcp._call import Round, call_round, listed
from psych_runtime.activities.mcp._pool import SessionBroke, SessionKey
from psych_runtime.specs import McpServer, Scope, StoreUnavailable
from tests.activities.test_mcp import bounded_egress
from tests.activities.test_mcp_ended_sessions import DID_NOT_RUN, StoreDownFor, loopback, pool
from tests.activities.test_sent_or_not import broken_store, mcp_call
from tests.mcp.fixture import start_mcp_server


async def no_progress(progress: float, total: float | None, message: str | None) -> None:
    """A round's progress callback that ignores it."""


async def test_an_answered_call_keeps_its_answer_when_its_session_broke_right_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Another lease's token store failure ends the session right after ``charge`` was
    # answered. Before: the SDK then listed the tools (this session had not), the listing
    # failed with "Connection closed", and the lease raised SessionBroke (may have run).
    egress = loopback()
    sessions = pool(egress)
    served = start_mcp_server("streamable-http")
    key = SessionKey.of(Scope(tenant="acme"), served.url, "http", "token")
    auth = StoreDownFor(b"needs-a-token")

    async def break_the_session() -> None:
        with contextlib.suppress(StoreUnavailable, SessionBroke):
            async with sessions.client(key, served.url, {}, auth) as other:
                await other.call_tool("echo", {"text": "needs-a-token"})

    try:
        async with sessions.client(key, served.url, {}, auth) as client:
            session = client.session
            listing = session.list_tools
            lists: list[int] = []

            async def list_tools(*args: Any, **kwargs: Any) -> mcp_types.ListToolsResult:
                lists.append(served.calls("charge"))
                if served.calls("charge"):  # asked after the call reached the server
                    await break_the_session()
                return await listing(*args, **kwargs)

            monkeypatch.setattr(session, "list_tools", list_tools)
            made = Round()
            result = await call_round(client, "charge", {"amount": 1}, no_progress, None, made)
            assert made.sent
            assert lists == [0]  # listed once, before the call
            await break_the_session()
        assert isinstance(result, mcp_types.CallToolResult)
        assert not result.is_error
        assert served.calls("charge") == 1
    finally:
        served.stop()
        await sessions.aclose()
        await egress.aclose()


async def test_a_tool_listed_on_the_session_is_not_listed_again_before_its_call() -> None:
    egress = loopback()
    sessions = pool(egress)
    served = start_mcp_server("streamable-http")
    key = SessionKey.of(Scope(tenant="acme"), served.url, "http", None)
    try:
        async with sessions.client(key, served.url, {}) as client:
            assert not listed(client, "lookup")
            await client.list_tools(cache_mode="bypass")
            assert listed(client, "lookup")  # the SDK's record is where call_round reads it
            made = Round()
            result = await call_round(client, "lookup", {"id": "7"}, no_progress, None, made)
            assert isinstance(result, mcp_types.CallToolResult)
            assert result.structured_content is not None  # checked against its schema
    finally:
        served.stop()
        await sessions.aclose()
        await egress.aclose()


async def test_a_call_whose_listing_failed_first_did_not_run(tmp_path: Path) -> None:
    # The session's listing is over the egress bound. Before: ``charge`` ran and was
    # answered, the SDK's listing after it was refused, and the call was taken as one that
    # may have run (its outcome not kept: ResultNotKept). Now the listing comes first, and
    # its failure leaves the call unsent.
    served = start_mcp_server("streamable-http", json_response=True, filler=60)
    egress = bounded_egress()
    mcp = McpActivities(blobs=broken_store(tmp_path), egress=egress)
    server = McpServer(name="crm", url=served.url)
    try:
        with pytest.raises(StoreUnavailable, match=DID_NOT_RUN):
            await ActivityEnvironment().run(mcp.call, mcp_call(server, "charge", amount=1))
        assert served.calls("charge") == 0
    finally:
        served.stop()
        await mcp.aclose()
        await egress.aclose()
