"""What ``validate`` makes of a publish-time connection check (``mcp_connections``), and
``mcp_servers_of``/``mcp_connection_key``, which tell a check what to reach."""

from __future__ import annotations

from typing import Any

from psych_runtime.specs import (
    AgentSpec,
    AgentStep,
    McpServer,
    ModelRef,
    Problem,
    SubagentRef,
    ToolStep,
    ValidationContext,
    WorkflowSpec,
    WorkflowStepRef,
    mcp_connection_key,
    mcp_servers_of,
    validate,
)


def agent(name: str = "a", **fields: Any) -> AgentSpec:
    return AgentSpec(**{"name": name, "model": ModelRef(model="gpt-4o"), **fields})


def checks(spec: AgentSpec | WorkflowSpec, context: ValidationContext) -> list[Problem]:
    """Every problem ``validate`` finds, in its order: a Spec refused for any other reason,
    or a problem missing, fails the test."""
    return validate(spec, context)


def answered(*servers: McpServer, failed: dict[str, str] | None = None) -> dict[str, str | None]:
    failed = failed or {}
    return {mcp_connection_key(s): failed.get(s.name) for s in servers}


DOWN = McpServer(name="down", url="http://127.0.0.1:9/mcp")
UP = McpServer(name="up", url="http://127.0.0.1:8/mcp")


def test_every_server_unreachable_is_still_a_problem() -> None:
    # The old rule (empty reachable_mcp_servers = don't check) let a Spec whose every
    # server was down publish cleanly; an explicit check result must not.
    spec = agent(mcp_servers=[DOWN])
    connections = answered(DOWN, failed={"down": "connection refused"})
    problems = checks(spec, ValidationContext(mcp_connections=connections))
    assert [(p.path, p.message) for p in problems] == [
        (
            "mcp_servers[down]",
            "server did not answer at publish and is not optional: connection refused",
        )
    ]


def test_optional_and_answering_servers_are_not_problems() -> None:
    maybe = McpServer(name="maybe", url="http://127.0.0.1:7/mcp", optional=True)
    spec = agent(mcp_servers=[UP, maybe])
    connections = answered(UP, maybe, failed={"maybe": "timed out"})
    assert checks(spec, ValidationContext(mcp_connections=connections)) == []


def test_a_server_the_check_did_not_cover_is_a_problem() -> None:
    spec = agent(mcp_servers=[UP, DOWN])
    problems = checks(spec, ValidationContext(mcp_connections=answered(UP)))
    assert [(p.path, p.message) for p in problems] == [
        ("mcp_servers[down]", "the connection check did not reach this server")
    ]


def test_without_a_check_nothing_is_reported() -> None:
    spec = agent(mcp_servers=[DOWN])
    assert checks(spec, ValidationContext()) == []
    # The name-based field keeps its old meaning for callers that still use it.
    assert checks(spec, ValidationContext(reachable_mcp_servers=[])) == []
    named = checks(spec, ValidationContext(reachable_mcp_servers=["x"]))
    assert [(p.path, p.message) for p in named] == [
        ("mcp_servers[down]", "server did not answer at publish and is not optional")
    ]


def test_nested_servers_are_checked_at_their_paths() -> None:
    inner = McpServer(name="docs", url="http://127.0.0.1:6/mcp")
    outer = McpServer(name="docs", url="http://127.0.0.1:5/mcp")
    sub = agent("helper", mcp_servers=[inner])
    parent = agent(
        "parent",
        mcp_servers=[outer],
        subagents=[SubagentRef(name="helper", description="d" * 20, spec=sub)],
    )
    workflow = WorkflowSpec(
        name="flow",
        steps=[
            AgentStep(name="first", spec=parent),
            WorkflowStepRef(
                name="nested",
                spec=WorkflowSpec(
                    name="inner",
                    mcp_servers=[inner],
                    steps=[ToolStep(name="look", tool="docs__search")],
                ),
            ),
        ],
    )
    # Same name, different endpoints: only the subagent's one is down.
    connections = {mcp_connection_key(outer): None, mcp_connection_key(inner): "refused"}
    problems = checks(workflow, ValidationContext(mcp_connections=connections))
    down = "server did not answer at publish and is not optional: refused"
    helper_docs = "steps[first].spec.subagents[helper].spec.mcp_servers[docs]"
    assert [(p.path, p.message) for p in problems] == [
        # The subagent's one is also not the parent's definition of `docs` (it may not use it).
        (
            helper_docs,
            "MCP server 'docs' is not the same definition as the parent's MCP server of that "
            "name, so the subagent may not use it",
        ),
        (helper_docs, down),
        ("steps[nested].spec.mcp_servers[docs]", down),
    ]


def test_mcp_servers_of_walks_the_tree_once_per_endpoint() -> None:
    inner = McpServer(name="docs", url="http://127.0.0.1:6/mcp")
    same_endpoint = McpServer(name="other_name", url="http://127.0.0.1:6/mcp", optional=True)
    outer = McpServer(name="docs", url="http://127.0.0.1:5/mcp")
    sub = agent("helper", mcp_servers=[inner])
    parent = agent(
        "parent",
        mcp_servers=[outer, same_endpoint],
        subagents=[SubagentRef(name="helper", description="d" * 20, spec=sub)],
    )
    # The subagent's server shares an endpoint with the parent's second one: checked once.
    assert mcp_servers_of(parent) == (outer, same_endpoint)
    workflow = WorkflowSpec(
        name="flow", mcp_servers=[UP], steps=[AgentStep(name="first", spec=parent)]
    )
    assert mcp_servers_of(workflow) == (UP, outer, same_endpoint)


def test_connection_key_tells_transport_url_and_credential_apart() -> None:
    base = McpServer(name="s", url="http://127.0.0.1:5/mcp")
    renamed = McpServer(name="t", url="http://127.0.0.1:5/mcp", optional=True, allow=["x"])
    keys = {
        mcp_connection_key(base),
        mcp_connection_key(McpServer(name="s", url="http://127.0.0.1:5/sse", transport="sse")),
        mcp_connection_key(McpServer(name="s", url="http://127.0.0.1:5/mcp", transport="sse")),
        mcp_connection_key(McpServer(name="s", url="http://127.0.0.1:5/mcp", credential="k")),
    }
    assert len(keys) == 4
    assert mcp_connection_key(renamed) == mcp_connection_key(base)


def test_the_context_keeps_its_own_copy_of_the_answers() -> None:
    connections: dict[str, str | None] = answered(DOWN, failed={"down": "refused"})
    context = ValidationContext(mcp_connections=connections)
    connections[mcp_connection_key(DOWN)] = None
    assert context.mcp_connections == {mcp_connection_key(DOWN): "refused"}
    # A context stays hashable (the answers are left out of its hash).
    assert isinstance(hash(context), int)
