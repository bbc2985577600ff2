"""A workflow's tool steps call MCP tools by the names the model sees (SEMANTICS, Workflows
and MCP): a server whose name holds a ``.`` offers ``my_tools__echo``, and publishing
takes that name (it refused it, and took ``my.tools__echo``, which then failed the Run
as an unknown tool); a step naming a tool the server's ``allow`` never grants is refused at
publish (it failed the Run at the step); a step on an optional server that is unavailable
fails saying so (it said only "unknown tool ...; the tools you have are: "). From an audit
of WorkflowRun."""

from __future__ import annotations

import pytest

from psych_runtime.specs import RunFailed, ValidationFailed, WorkflowSpec
from psych_runtime.workflows import RunStatus
from tests._ports import free_port
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


async def test_a_step_on_an_optional_unavailable_server_fails_saying_so(
    harness: Harness,
) -> None:
    spec = WorkflowSpec.model_validate(
        {
            "name": "mcp-flow",
            "mcp_servers": [
                {"name": "my.tools", "url": f"http://127.0.0.1:{free_port()}/mcp", "optional": True}
            ],
            "steps": [{"kind": "tool", "name": "greet", "tool": "my_tools__echo"}],
        }
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        with pytest.raises(RunFailed) as failed:
            await harness.client.result(run, scope=harness.scope)
    assert str(failed.value).startswith("step 'greet' (tool) failed: error: unknown tool")
    assert str(failed.value).endswith(
        "(MCP server 'my.tools' is unavailable, and optional: the Run went on without its tools)"
    )
