"""A listing over SSE whose POST fails fails at once, with its own error.

The SDK's SSE writer task ends with the first POST that raises (the server answering it
503 here, which the writer raises): that request is never answered. A call's round stopped
at once (``_lease.unless_told``), but a turn's discovery and ``check_servers`` (publish's
``--check-connections``) waited out their timeouts, then said only "no complete answer
within 10 s" / "timed out". Now both fail at once naming the refusal.

Real MCP test servers in their own processes on loopback (``tests.mcp.server``; its
``/control/refuse`` answers the ``tools/list`` POSTs 503 once the session connected).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.mcp import McpActivities, McpSettings, check_servers
from psych_runtime.specs import McpServer, Scope
from tests.activities.test_mcp import catalog
from tests.activities.test_mcp_ended_sessions import loopback
from tests.mcp.fixture import McpTestServer, Transport, start_mcp_server

QUICK = 5.0
"""Bound on a listing that must fail at once (the timeouts below are 15 s)."""

SLOW = McpSettings(connect_timeout_seconds=5, list_timeout_seconds=15)


@pytest.fixture
def refusing(request: pytest.FixtureRequest) -> Iterator[McpTestServer]:
    """A server of the test's transport answering every ``tools/list`` POST 503."""
    transport: Transport = request.param
    served = start_mcp_server(transport)
    served.refuse("tools/list")
    yield served
    served.stop()


def spec_of(served: McpTestServer) -> McpServer:
    transport = "sse" if served.transport == "sse" else "http"
    return McpServer(name="crm", url=served.url, transport=transport, optional=True)


@pytest.mark.parametrize("refusing", ["sse"], indirect=True)
async def test_a_turns_sse_listing_whose_post_failed_fails_at_once(
    refusing: McpTestServer, tmp_path: Path
) -> None:
    egress = loopback()
    mcp = McpActivities(blobs=LocalBlobStore(tmp_path / "blobs"), egress=egress, settings=SLOW)
    try:
        started = time.monotonic()
        result = await catalog(mcp, spec_of(refusing))
        assert time.monotonic() - started < QUICK  # before: the 15 s list timeout
        (status,) = result.servers
        assert status.status == "unavailable"
        assert status.error == "the MCP server answered a message with HTTP 503", status.error
    finally:
        await mcp.aclose()
        await egress.aclose()


@pytest.mark.parametrize("refusing", ["sse", "streamable-http"], indirect=True)
async def test_a_checked_listing_whose_post_failed_fails_at_once(refusing: McpTestServer) -> None:
    egress = loopback()
    try:
        started = time.monotonic()
        answers = await check_servers([spec_of(refusing)], Scope(tenant="acme"), None, SLOW, egress)
        assert time.monotonic() - started < QUICK  # before, over SSE: the 20 s bound
        said = answers["crm"]
        assert said is not None
        if refusing.transport == "sse":
            assert said == "the MCP server answered a message with HTTP 503", said
    finally:
        await egress.aclose()
