"""A ``tools/call`` a 2026-07-28 server refused, or that was never sent, did not run.

A server answers a ``tools/call`` whose headers disagree with the tool's listing
(``HEADER_MISMATCH``) before any tool runs; the round re-lists the tool and resends once
(``mcp/_call.py``). A failure after that refusal, or a call that ran out of time while its
tool was still being listed, left nothing of the call on the server, and its outcome says
so: with a store that does not answer, ``StoreUnavailable`` saying the call did not run
(never ``ResultNotKept``, which a Run reads as a tool that ran and whose result is lost).

Against ``tests.mcp.modern_server`` in its own process on loopback, with its faults set on
its control surface; the store's disk refuses for real (a file stands where its
directory goes).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.mcp import McpActivities, McpSettings
from psych_runtime.specs import McpServer, StoreUnavailable
from tests.activities.test_mcp_ended_sessions import DID_NOT_RUN
from tests.activities.test_sent_or_not import broken_store, mcp_call
from tests.mcp.modern_fixture import ModernMcpServer, start_modern_server


@pytest.fixture(scope="module")
def modern() -> Iterator[ModernMcpServer]:
    server = start_modern_server()
    yield server
    server.stop()


@pytest.fixture
def served(modern: ModernMcpServer) -> Iterator[ModernMcpServer]:
    modern.reset()
    yield modern
    modern.reset()


def shop(server: ModernMcpServer) -> McpServer:
    return McpServer(name="shop", url=server.url)


async def test_a_refused_call_whose_relisting_failed_did_not_run(
    served: ModernMcpServer, tmp_path: Path
) -> None:
    # The first listing passes, the call is refused (HEADER_MISMATCH), and the listing
    # after it fails. Before: the call counted as sent, so its outcome was of a tool that
    # may have run, and the store's failure ResultNotKept.
    served.mismatch(calls=1)
    served.fault_lists(passing=1, failing=1)
    mcp = McpActivities(blobs=broken_store(tmp_path))
    try:
        with pytest.raises(StoreUnavailable, match=DID_NOT_RUN):
            await ActivityEnvironment().run(mcp.call, mcp_call(shop(served), "echo", text="hi"))
    finally:
        await mcp.aclose()
    state = served.state()
    assert (state["mismatched"], state["lists_failed"], state["calls"]) == (1, 1, {})


async def test_a_refused_call_whose_relisting_failed_shows_the_refusal(
    served: ModernMcpServer, blobs: LocalBlobStore
) -> None:
    # Before: the model read only the listing's error ("MCP error -32603: tools/list
    # failed ..."), as if listing were what the call had asked.
    served.mismatch(calls=1)
    served.fault_lists(passing=1, failing=1)
    mcp = McpActivities(blobs=blobs)
    try:
        outcome = await ActivityEnvironment().run(
            mcp.call, mcp_call(shop(served), "echo", text="hi")
        )
    finally:
        await mcp.aclose()
    assert outcome.status == "error"
    assert outcome.content == (
        "MCP server 'shop', tool 'echo': MCP error -32020: Mcp-Name header does not match "
        "the request body's 'name' parameter (the call was refused unrun; listing its tool "
        "again to resend it failed: MCP error -32603: tools/list failed (a fault set on the "
        "control surface))"
    ), outcome.content
    assert served.state()["calls"] == {}


async def test_a_call_refused_twice_did_not_run(served: ModernMcpServer, tmp_path: Path) -> None:
    # The resend after the re-listing is refused too: neither request ran the tool.
    served.mismatch(calls=2)
    mcp = McpActivities(blobs=broken_store(tmp_path))
    try:
        with pytest.raises(StoreUnavailable, match=DID_NOT_RUN):
            await ActivityEnvironment().run(mcp.call, mcp_call(shop(served), "echo", text="hi"))
    finally:
        await mcp.aclose()
    state = served.state()
    assert (state["mismatched"], state["lists"], state["calls"]) == (2, 2, {})


async def test_a_refused_call_is_resent_after_its_tool_is_listed_again(
    served: ModernMcpServer, blobs: LocalBlobStore
) -> None:
    served.mismatch(calls=1)
    mcp = McpActivities(blobs=blobs)
    try:
        outcome = await ActivityEnvironment().run(
            mcp.call, mcp_call(shop(served), "echo", text="hi")
        )
    finally:
        await mcp.aclose()
    assert (outcome.status, outcome.content) == ("ok", "hi")
    state = served.state()
    assert (state["mismatched"], state["lists"], state["calls"]) == (1, 2, {"echo": 1})


async def test_a_call_out_of_time_while_its_tool_was_listed_says_it_was_not_sent(
    served: ModernMcpServer, blobs: LocalBlobStore
) -> None:
    # Before: "no result within 0.5 s (the call was cancelled)", of a call never sent.
    served.fault_lists(delay=3.0)
    mcp = McpActivities(blobs=blobs, settings=McpSettings(call_timeout_seconds=0.5))
    try:
        outcome = await ActivityEnvironment().run(
            mcp.call, mcp_call(shop(served), "echo", text="hi")
        )
    finally:
        await mcp.aclose()
    assert outcome.status == "error"
    assert outcome.content == (
        "shop__echo: not sent within 0.5 s: its tool was still being listed (the tool did not run)"
    )
    assert served.state()["calls"] == {}
