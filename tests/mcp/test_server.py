"""The scriptable MCP test server, driven by the official SDK's client over both transports.

If these fail, every MCP test built on the server is meaningless, so each behaviour the
activity and e2e tests rely on is checked here against a stock client.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.e2e._waiting import eventually
from tests.mcp.fixture import McpTestServer, start_mcp_server
from tests.mcp.server import PIXEL_PNG, RESOURCE_TEXT, RESOURCE_URI

pytestmark = pytest.mark.long

TRANSPORTS = ["streamable-http", "sse"]


@pytest.fixture(params=TRANSPORTS)
def server(
    request: pytest.FixtureRequest, mcp_http_server: McpTestServer, mcp_sse_server: McpTestServer
) -> McpTestServer:
    return mcp_sse_server if request.param == "sse" else mcp_http_server


@asynccontextmanager
async def connect(
    server: McpTestServer,
    *,
    bearer: str | None = None,
    on_message: Callable[[IncomingMessage], None] | None = None,
) -> AsyncIterator[Client]:
    """A stock SDK client on the server's transport, after the ``initialize`` handshake."""
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else None

    async def message_handler(message: IncomingMessage) -> None:
        if on_message is not None:
            on_message(message)

    if server.transport == "sse":
        transport = sse_client(server.url, headers=headers)
        async with Client(transport, mode="legacy", message_handler=message_handler) as client:
            yield client
        return
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(
            streamable_http_client(server.url, http_client=http),
            mode="legacy",
            message_handler=message_handler,
        ) as client,
    ):
        yield client


async def _holds(condition: bool) -> bool:
    return condition


def _text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def test_initialize_names_the_server(server: McpTestServer) -> None:
    async with connect(server) as client:
        assert client.session.server_info is not None
        assert client.session.server_info.name == "psych-test-mcp"
        capabilities = client.session.server_capabilities
        assert capabilities is not None
        assert capabilities.tools is not None


async def test_list_tools_carries_annotations_and_output_schema(server: McpTestServer) -> None:
    async with connect(server) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) >= {
        "echo",
        "lookup",
        "fail",
        "charge",
        "tally",
        "wipe",
        "slow",
        "progress",
        "image",
        "resource",
        "big",
    }
    assert not any(name.startswith("filler_") for name in tools)
    for name in ("echo", "lookup", "tally", "big"):
        annotations = tools[name].annotations
        assert annotations is not None and annotations.read_only_hint is True, name
    assert tools["charge"].annotations is None
    wipe = tools["wipe"].annotations
    assert wipe is not None and wipe.destructive_hint is True and wipe.read_only_hint is False
    output_schema = tools["lookup"].output_schema
    assert output_schema is not None
    assert set(output_schema["properties"]) == {"id", "name", "status"}


async def test_calls_return_each_content_kind(server: McpTestServer) -> None:
    async with connect(server) as client:
        echo = await client.call_tool("echo", {"text": "hello"})
        lookup = await client.call_tool("lookup", {"id": "42"})
        fail = await client.call_tool("fail", {"reason": "no such order"})
        image = await client.call_tool("image", {})
        resource = await client.call_tool("resource", {})
        big = await client.call_tool("big", {"size": 100_000})
    assert (_text(echo), echo.is_error) == ("hello", False)
    assert lookup.structured_content == {"id": "42", "name": "record 42", "status": "active"}
    assert '"record 42"' in _text(lookup)
    assert fail.is_error is True
    assert "no such order" in _text(fail)
    block = image.content[0]
    assert isinstance(block, types.ImageContent)
    assert block.mime_type == "image/png"
    assert base64.b64decode(block.data) == PIXEL_PNG
    embedded = resource.content[0]
    assert isinstance(embedded, types.EmbeddedResource)
    assert isinstance(embedded.resource, types.TextResourceContents)
    assert (str(embedded.resource.uri), embedded.resource.text) == (RESOURCE_URI, RESOURCE_TEXT)
    assert len(_text(big)) == 100_000


async def test_calls_are_counted_per_tool(server: McpTestServer) -> None:
    async with connect(server) as client:
        await client.call_tool("charge", {"amount": 5})
        await client.call_tool("charge", {"amount": 7})
        tally = await client.call_tool("tally", {})
    assert server.calls("charge") == 2
    assert server.calls("tally") == 1
    assert _text(tally) == "tally 1"
    server.reset()
    assert server.calls("charge") == 0


async def test_progress_notifications_arrive_before_the_result(server: McpTestServer) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with connect(server) as client:
        result = await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
    assert _text(result) == "done 3"
    assert [(p, t) for p, t, _ in seen] == [(1, 3), (2, 3), (3, 3)]


async def test_list_changed_reaches_every_open_session(server: McpTestServer) -> None:
    changed = [anyio.Event(), anyio.Event()]

    def watcher(index: int) -> Callable[[IncomingMessage], None]:
        def on_message(message: IncomingMessage) -> None:
            if isinstance(message, types.ServerNotification) and isinstance(
                message, types.ToolListChangedNotification
            ):
                changed[index].set()

        return on_message

    async with (
        connect(server, on_message=watcher(0)) as first,
        connect(server, on_message=watcher(1)) as second,
    ):
        await first.list_tools()
        await second.list_tools()
        # Streamable HTTP delivers it on the GET stream the client opens after the
        # handshake; give that stream a moment, then add.
        await asyncio.sleep(0.5)
        assert await asyncio.to_thread(server.add_tool, "added_tool") >= 2
        with anyio.fail_after(10):
            await changed[0].wait()
            await changed[1].wait()
        names = {tool.name for tool in (await first.list_tools(cache_mode="refresh")).tools}
        assert "added_tool" in names
        added = await second.call_tool("added_tool", {"text": "hi"})
        assert _text(added) == "added_tool: hi"
    server.reset()
    assert "added_tool" not in server.state()["tools"]


async def test_cancelling_a_slow_call_is_logged(server: McpTestServer) -> None:
    async with connect(server) as client:
        with anyio.move_on_after(1.0) as scope:
            await client.call_tool("slow", {"seconds": 30})
        assert scope.cancelled_caught
        await eventually(
            lambda: _holds(bool(server.cancellations())), what="the cancellation to arrive"
        )
        # The session is still usable after a cancelled call.
        assert _text(await client.call_tool("echo", {"text": "after"})) == "after"
    [cancellation] = server.cancellations()
    assert cancellation["tool"] == "slow"
    await eventually(
        lambda: _holds(server.interrupted() == ["slow"]), what="the slow call to be interrupted"
    )


async def test_bearer_is_logged_per_session(server: McpTestServer) -> None:
    async with connect(server, bearer="token-a") as a, connect(server, bearer="token-b") as b:
        await a.call_tool("echo", {"text": "a"})
        await b.call_tool("echo", {"text": "b"})
    bearers = server.bearers()
    assert sorted(bearers.values()) == [["token-a"], ["token-b"]]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_require_bearer_refuses_a_request_without_one(transport: str) -> None:
    assert transport in ("streamable-http", "sse")
    server = await asyncio.to_thread(
        start_mcp_server,
        "sse" if transport == "sse" else "streamable-http",
        require_bearer=True,
    )
    try:
        async with httpx2.AsyncClient() as http:
            if transport == "sse":
                refused = await http.get(server.url)
            else:
                refused = await http.post(
                    server.url,
                    json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                    headers={"Accept": "application/json, text/event-stream"},
                )
        assert refused.status_code == 401
        async with connect(server, bearer="good") as client:
            assert _text(await client.call_tool("echo", {"text": "in"})) == "in"
        assert list(server.bearers().values()) == [["good"]]
    finally:
        await asyncio.to_thread(server.stop)


async def test_filler_tools_make_a_large_catalogue() -> None:
    server = await asyncio.to_thread(start_mcp_server, "streamable-http", filler=40)
    try:
        async with connect(server) as client:
            tools = (await client.list_tools()).tools
        fillers = [tool for tool in tools if tool.name.startswith("filler_")]
        assert [tool.name for tool in fillers] == [f"filler_{i:03d}" for i in range(40)]
        assert all(len(tool.description or "") == 1000 for tool in fillers)
    finally:
        await asyncio.to_thread(server.stop)


async def test_stop_ends_its_own_process() -> None:
    server = await asyncio.to_thread(start_mcp_server, "sse")
    pid = server.pid
    await asyncio.to_thread(server.stop)
    assert server.process.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
