"""``PsychClient.publish(..., mcp_connections=...)``: the client's equivalent of ``psych
publish --check-connections``, fed by ``check_connections`` against real MCP servers.

Every problem ``publish`` reports is compared, path and message: a Spec refused for any
other reason, or a problem missing, fails the test.
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
    Scope,
    ToolRegistry,
    ValidationFailed,
    mcp_connection_key,
)
from psych_runtime.workers import check_connections
from psych_runtime.workflows import PsychClient
from tests.mcp.fixture import McpTestServer, start_mcp_server

SCOPE = Scope(tenant="acme", principal="ops")
REFUSED = "ConnectError: All connection attempts failed"
"""What the check reads from a loopback port nothing listens on."""


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
) -> list[tuple[str, str]]:
    """What ``publish`` refused, as (path, message) (empty: published)."""
    try:
        client.publish(spec, mcp_connections=connections)
    except ValidationFailed as failed:
        return [(p.path, p.message) for p in failed.problems]
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
    assert connections == {mcp_connection_key(spec.mcp_servers[0]): REFUSED}
    # The registry's tools still count: only the server is a problem.
    assert publish_problems(client, spec, connections) == [
        ("mcp_servers[crm]", f"server did not answer at publish and is not optional: {REFUSED}")
    ]


async def test_publish_takes_a_spec_whose_servers_answered(
    client: PsychClient, mcp_http_server: McpTestServer, mcp_sse_server: McpTestServer
) -> None:
    spec = spec_with(
        McpServer(name="one", url=mcp_http_server.url),
        McpServer(name="two", url=mcp_sse_server.url, transport="sse"),
    )
    connections = await check_connections(spec, scope=SCOPE, secrets=None)
    assert connections == {mcp_connection_key(server): None for server in spec.mcp_servers}
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
        assert list(server.bearers().values()) == [["the-token"]]
        refused = await check_connections(spec, scope=SCOPE, secrets=StaticSecretResolver({}))
        assert publish_problems(client, spec, refused) == [
            (
                "mcp_servers[crm]",
                "server did not answer at publish and is not optional: "
                "credential 'k' is not available",
            )
        ]
    finally:
        await asyncio.to_thread(server.stop)
