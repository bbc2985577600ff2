"""A published MCP server from PyPI (``mcp-server-time`` behind ``fastmcp run``), started
on loopback and driven by the SDK's client over both transports."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator

import mcp.types as types
import pytest
from mcp import Client
from mcp.client.sse import sse_client

from tests.mcp.fixture import Transport
from tests.mcp.published import TOOLS, PublishedMcpServer, start_published_mcp_server

pytestmark = pytest.mark.long


@pytest.fixture(params=["streamable-http", "sse"])
async def published(request: pytest.FixtureRequest) -> AsyncIterator[PublishedMcpServer]:
    transport: Transport = request.param
    server = await asyncio.to_thread(start_published_mcp_server, transport)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.stop)


def _client(server: PublishedMcpServer) -> Client:
    if server.transport == "sse":
        return Client(sse_client(server.url), mode="legacy")
    return Client(server.url, mode="legacy")


async def test_lists_and_calls_a_tool_of_the_published_server(
    published: PublishedMcpServer,
) -> None:
    async with _client(published) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        result = await client.call_tool(
            "convert_time",
            {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
        )
    assert set(tools) == set(TOOLS)
    annotations = tools["get_current_time"].annotations
    assert annotations is not None and annotations.read_only_hint is True
    assert result.is_error is False
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    converted = json.loads(block.text)
    assert converted["target"]["datetime"].endswith("T21:00:00+09:00")
    assert result.structured_content is not None
    assert result.structured_content["time_difference"] == "+9.0h"


async def test_a_bad_argument_is_a_tool_error(published: PublishedMcpServer) -> None:
    async with _client(published) as client:
        result = await client.call_tool("get_current_time", {"timezone": "Not/AZone"})
    assert result.is_error is True


async def test_stop_ends_the_proxy_and_the_time_server() -> None:
    server = await asyncio.to_thread(start_published_mcp_server, "streamable-http")
    pgid = server.pid
    await asyncio.to_thread(server.stop)
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
