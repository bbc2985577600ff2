"""``PsychClient.publish(..., mcp_connections=...)``: the client's equivalent of ``psych
publish --check-connections``, fed by ``check_connections`` against real MCP servers.

``mcp_servers`` is itself refused as not implemented until issue 9 lands in the
workflow; these tests read the other problems only, so they hold before and after.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities import FileVersionStore, StaticSecretResolver
from psych_runtime.specs import (
    AgentSpec,
    CodeTool,
    McpServer,
    ModelRef,
    Problem,
    Scope,
    ToolRegistry,
    ValidationFailed,
    unsupported_features,
)
from psych_runtime.workers import check_connections
from psych_runtime.workflows import PsychClient
from tests.mcp.fixture import McpTestServer, start_mcp_server

SCOPE = Scope(tenant="acme", principal="ops")


def lookup(order_id: str) -> str:
    """Look an order up.

    Args:
        order_id: The order's id.
    """
    return order_id


def spec_with(*servers: McpServer) -> AgentSpec:
    return AgentSpec(
        name="checked",
        model=ModelRef(model="m"),
        tools=[CodeTool(name="lookup")],
        mcp_servers=list(servers),
    )


def publish_problems(
    client: PsychClient, spec: AgentSpec, connections: dict[str, str | None]
) -> list[Problem]:
    """What ``publish`` refused, besides fields not implemented yet (empty: published)."""
    try:
        client.publish(spec, mcp_connections=connections)
    except ValidationFailed as failed:
        unsupported = unsupported_features(spec)
        return [p for p in failed.problems if p not in unsupported]
    return []


@pytest.fixture
def client(dev_env: WorkflowEnvironment, tmp_path: Path) -> PsychClient:
    registry = ToolRegistry()
    registry.register(lookup)
    return PsychClient(dev_env.client, store=FileVersionStore(tmp_path), registry=registry)


async def test_publish_refuses_a_spec_whose_only_server_is_down(client: PsychClient) -> None:
    server = await asyncio.to_thread(start_mcp_server, "streamable-http")
    await asyncio.to_thread(server.stop)
    spec = spec_with(McpServer(name="crm", url=server.url))
    connections = await check_connections(spec, scope=SCOPE, secrets=None)
    problems = publish_problems(client, spec, connections)
    assert [p.path for p in problems] == ["mcp_servers[crm]"]
    assert "did not answer at publish" in problems[0].message
    # The registry's tools still count: only the server is a problem.
    assert not any("lookup" in p.message for p in problems)


async def test_publish_takes_a_spec_whose_servers_answered(
    client: PsychClient, mcp_http_server: McpTestServer, mcp_sse_server: McpTestServer
) -> None:
    spec = spec_with(
        McpServer(name="one", url=mcp_http_server.url),
        McpServer(name="two", url=mcp_sse_server.url, transport="sse"),
    )
    connections = await check_connections(spec, scope=SCOPE, secrets=None)
    assert list(connections.values()) == [None, None]
    assert publish_problems(client, spec, connections) == []


async def test_the_credential_is_resolved_for_the_scope_given(client: PsychClient) -> None:
    server = await asyncio.to_thread(start_mcp_server, "sse", require_bearer=True)
    try:
        spec = spec_with(McpServer(name="crm", url=server.url, transport="sse", credential="k"))
        secrets = StaticSecretResolver({"k": "the-token"})
        assert (
            publish_problems(
                client, spec, await check_connections(spec, scope=SCOPE, secrets=secrets)
            )
            == []
        )
        assert ["the-token"] in server.bearers().values()
        refused = await check_connections(spec, scope=SCOPE, secrets=StaticSecretResolver({}))
        assert [p.path for p in publish_problems(client, spec, refused)] == ["mcp_servers[crm]"]
    finally:
        await asyncio.to_thread(server.stop)
