"""A workflow's tool steps call MCP tools by the names the model sees (SEMANTICS, Workflows
and MCP): a server whose name holds a ``.`` offers ``my_tools__echo``, and publishing
takes that name (it refused it, and took ``my.tools__echo``, which then failed the Run
as an unknown tool); a step naming a tool the server's ``allow`` never grants is refused at
publish (it failed the Run at the step). From an audit of WorkflowRun."""

from __future__ import annotations

import pytest

from psych_runtime.specs import ValidationFailed, WorkflowSpec
from psych_runtime.workflows import RunStatus
from tests.mcp.fixture import McpTestServer

from .conftest import Harness

pytestmark = pytest.mark.e2e


def flow(server: McpTestServer, tool: str, *allow: str) -> WorkflowSpec:
    return WorkflowSpec.model_validate(
        {
            "name": "mcp-flow",
            "mcp_servers": [{"name": "my.tools", "url": server.url, "allow": allow}],
            "steps": [{"kind": "tool", "name": "greet", "tool": tool, "arguments": {"text": "hi"}}],
        }
    )


async def test_a_step_calls_a_dotted_servers_tool_by_its_model_facing_name(
    harness: Harness, mcp_http_server: McpTestServer
) -> None:
    async with harness.worker():
        run = await harness.client.dispatch(
            flow(mcp_http_server, "my_tools__echo"), "go", scope=harness.scope
        )
        result = await harness.client.result(run, scope=harness.scope)
        with pytest.raises(ValidationFailed, match=r"steps\[greet\]\.tool: .*as my_tools__<tool>"):
            harness.client.publish(flow(mcp_http_server, "my.tools__echo"))
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.outputs == {"greet": "hi"}


async def test_a_step_naming_a_tool_the_server_does_not_allow_is_refused_at_publish(
    harness: Harness, mcp_http_server: McpTestServer
) -> None:
    async with harness.worker():
        with pytest.raises(ValidationFailed, match=r"steps\[greet\]\.tool: .*allows only look"):
            await harness.client.dispatch(
                flow(mcp_http_server, "my_tools__echo", "look*"), "go", scope=harness.scope
            )
        run = await harness.client.dispatch(
            flow(mcp_http_server, "my_tools__echo", "echo"), "go", scope=harness.scope
        )
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
