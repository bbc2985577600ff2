"""A tenant permits port that does not answer, against the time a turn's MCP discovery
may take: the port's bound (``PERMITS_ANSWER_SECONDS``) and the servers' own bounds must
fit in the discovery activity's, so a server whose permits are not known in time, and one
slow to list, are each unavailable (left out when optional), never the Run failed. Real
Runs on the dev server, the real test MCP server on loopback."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from psych_runtime.specs import PERMITS_ANSWER_SECONDS, PermitSource, WorkflowBuilder
from psych_runtime.workers import run_worker
from psych_runtime.workflows import RunStatus
from tests.mcp.fixture import McpTestServer

from .conftest import Harness

pytestmark = pytest.mark.e2e

HUNG_URL = "http://127.0.0.1:9/mcp"
"""The server whose permits the port never says (port 9, discard: never contacted)."""


class HangingOn:
    """A ``TenantPermits`` whose tenant service hangs on one server's question and
    answers every other at once (no restriction)."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def permitted(self, tenant: str, source: PermitSource) -> tuple[str, ...] | None:
        if source.url == self.url:
            await asyncio.Event().wait()
        return None


def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return f"order {order_id}: delivered"


async def test_a_port_hanging_on_one_server_and_a_slow_server_leave_both_out(
    harness: Harness, mcp_http_server: McpTestServer
) -> None:
    # A workflow's step discovers its MCP tools in a local activity of its own (an agent's
    # turn does inside its model call). The worker's defaults: 8 s to connect (initialize
    # included), 10 s to list. The slow server takes 5 s to initialize and never lists; the
    # port never says what the tenant may use of the other.
    slow = mcp_http_server
    slow.stall("initialize", 5)
    slow.stall("tools/list", 120)
    spec = (
        WorkflowBuilder("slow-permits", registry=harness.registry)
        .tool(lookup_order)
        .mcp_server("hung", HUNG_URL, transport="http", optional=True)
        .mcp_server("slow", slow.url, transport="http", optional=True)
        .tool_step("look", "lookup_order", {"order_id": "7"})
        .build()
    )
    settings = dataclasses.replace(harness.settings, permits=HangingOn(HUNG_URL))
    try:
        async with run_worker(harness.env.client, settings):
            run = await harness.client.dispatch(spec, "Go", scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
            report = await harness.client.report(run, scope=harness.scope)
    finally:
        slow.reset()
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.outputs == {"look": "order 7: delivered"}
    errors = {d.server: d.error for d in report.mcp if d.status == "unavailable"}
    assert errors["hung"] == (
        "the tenant permits for 'acme' could not be asked: TimeoutError: HangingOn.permitted "
        f"gave no answer within {PERMITS_ANSWER_SECONDS:g} s for tenant 'acme' (mcp {HUNG_URL})"
    )
    assert errors["slow"] == "tools/list gave no complete answer within 10 s"
