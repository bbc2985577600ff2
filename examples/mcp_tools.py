"""An agent with an MCP server's tools, offline (fake model, embedded dev server).

It serves a tiny MCP server itself, built with the ``mcp`` SDK and served over streamable
HTTP on loopback (any free port; ``mcp-agent.yaml`` is pointed at it), with two tools: the
Spec allows one, ``stock_level``, which the model sees as ``inventory__stock_level``. The
worker connects to the server for the Run, lists its tools and calls the one the model
asks for.

    python examples/mcp_tools.py
"""

from __future__ import annotations

import asyncio
import socket

import uvicorn
from _offline import load, offline, run, status
from mcp.server.mcpserver import MCPServer

from psych_runtime.specs import AgentSpec, parse_spec, spec_to_data
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import exit_process

STOCK = {"oak-desk": 12, "pine-shelf": 0}


def inventory_server() -> MCPServer:
    """The MCP server: stock levels (allowed by the Spec) and restocking (not allowed)."""
    server = MCPServer("inventory", log_level="WARNING")

    @server.tool()
    def stock_level(sku: str) -> str:
        """How many of a product are in stock."""
        return f"{STOCK.get(sku, 0)} x {sku} in stock"

    @server.tool()
    def restock(sku: str, count: int) -> str:
        """Order more of a product (the Spec does not allow it: the model never sees it)."""
        STOCK[sku] = STOCK.get(sku, 0) + count
        return f"ordered {count} x {sku}"

    return server


async def serve(server: MCPServer) -> tuple[uvicorn.Server, asyncio.Task[None], str]:
    """Serve ``server`` on a free loopback port; its MCP URL once it accepts connections."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    web = uvicorn.Server(uvicorn.Config(server.streamable_http_app(), log_level="warning"))
    serving = asyncio.create_task(web.serve(sockets=[sock]))
    while not web.started:
        if serving.done():
            await serving  # it failed to start: its error
        await asyncio.sleep(0.01)
    return web, serving, f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"


def pointed_at(url: str) -> AgentSpec:
    """``mcp-agent.yaml`` with its server's URL set to ``url``."""
    data = spec_to_data(load("mcp-agent.yaml"))
    data["mcp_servers"][0]["url"] = url
    spec = parse_spec(data, source="mcp-agent.yaml")
    assert isinstance(spec, AgentSpec)
    return spec


async def main() -> int:
    web, serving, url = await serve(inventory_server())
    print(f"MCP server 'inventory' at {url}")
    replies = (
        Reply.tool_calls(ToolCall("inventory__stock_level", {"sku": "oak-desk"})),
        Reply.text("We have 12 oak desks in stock."),
    )
    try:
        async with offline(*replies) as client:
            report = await run(client, pointed_at(url), "Do you have the oak desk in stock?")
    finally:
        web.should_exit = True
        await serving
    return status(report)


if __name__ == "__main__":
    exit_process(asyncio.run(main()))
