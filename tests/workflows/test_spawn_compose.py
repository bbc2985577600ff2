"""Composing a spawned child's Spec: pure functions, so checked without a server."""

from __future__ import annotations

from typing import Any

import pytest

from psych_runtime.specs import (
    A2APeer,
    AgentSpec,
    CodeTool,
    HttpTool,
    Limits,
    McpServer,
    ModelRef,
    SpawnEnvelope,
    SuspensionPolicy,
    version_hash,
)
from psych_runtime.workflows.features._spawn_compose import (
    SpawnRequest,
    child_model,
    child_tools,
    compose,
    parse_request,
)

HTTP = HttpTool(name="refund", description="Refund an order.", url="https://orders.test/refund")


def parent(**fields: Any) -> AgentSpec:
    base: dict[str, Any] = {
        "name": "lead",
        "model": ModelRef(model="m", temperature=0.2, fallbacks=("m2",)),
        "tools": (CodeTool(name="lookup"), HTTP),
        "spawn": SpawnEnvelope(),
        "limits": Limits(max_turns=7),
        "suspension": SuspensionPolicy(children_expires_seconds=60),
    }
    return AgentSpec(**{**base, **fields})


def request(**fields: Any) -> SpawnRequest:
    base: dict[str, Any] = {
        "name": "finder",
        "instructions": "Find it.",
        "task": "what is x?",
        "tools": ("lookup",),
        "model": None,
    }
    return SpawnRequest(**{**base, **fields})


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"task": "t"}, "needs a name"),
        ({"name": "a"}, "needs a task"),
        ({"name": "a", "task": " "}, "needs a task"),
        ({"name": "a", "task": "t", "tools": "lookup"}, "list of tool names"),
        ({"name": "a", "task": "t", "model": 3}, "model must be a model id"),
        ({"name": "a", "task": "t", "instructions": ["x"]}, "instructions must be a string"),
    ],
)
def test_bad_arguments_are_named(arguments: dict[str, Any], problem: str) -> None:
    parsed = parse_request(arguments)
    assert isinstance(parsed, str) and problem in parsed


def test_arguments_parse_with_repeated_tools_once() -> None:
    parsed = parse_request({"name": "a", "task": "t", "tools": ["x", "y", "x"]})
    assert parsed == SpawnRequest("a", "", "t", ("x", "y"), None)


def test_tools_are_the_parents_definitions_within_the_envelope() -> None:
    spec = parent()
    assert child_tools(spec, SpawnEnvelope(), ["refund", "lookup"]) == (
        CodeTool(name="lookup"),
        HTTP,
    )
    narrowed = SpawnEnvelope(tools=("lookup",))
    outside = child_tools(spec, narrowed, ["refund"])
    assert outside == (
        "not started: 'refund' is outside the spawn envelope (a child may hold: lookup)"
    )
    unknown = child_tools(spec, narrowed, ["wipe", "lookup"])
    assert unknown == "not started: 'wipe' is not among your tools (lookup, refund)"
    assert child_tools(spec, narrowed, []) == ()


def test_a_tool_of_the_parents_mcp_server_or_peer_is_refused_as_such() -> None:
    # The model sees them as its own tools (<server>__<tool>, sanitised): told they were
    # "not among your tools", it was told something false about its own tool list.
    spec = parent(
        mcp_servers=(McpServer(name="my.crm", url="https://crm.test/mcp"),),
        a2a_peers=(A2APeer(name="travel", url="https://travel.test/"),),
    )
    refused = child_tools(spec, SpawnEnvelope(), ["my_crm__lookup", "travel__book", "lookup"])
    assert refused == (
        "not started: 'my_crm__lookup' is a tool of MCP server 'my.crm'; 'travel__book' is a "
        "tool of A2A peer 'travel': a spawned child holds only your code and HTTP tools "
        "(lookup, refund), never an MCP server's or an A2A peer's"
    )
    both = child_tools(spec, SpawnEnvelope(), ["travel__book", "wipe"])
    assert both == (
        "not started: 'travel__book' is a tool of A2A peer 'travel': a spawned child holds "
        "only your code and HTTP tools (lookup, refund), never an MCP server's or an A2A "
        "peer's; 'wipe' is not among your tools (lookup, refund)"
    )


def test_the_model_comes_from_the_envelope_or_is_the_parents() -> None:
    spec = parent()
    assert child_model(spec, SpawnEnvelope(), None) == spec.model
    refused = child_model(spec, SpawnEnvelope(), "other")
    assert (
        refused == "not started: model 'other' is outside the spawn envelope (a child may use: m)"
    )
    envelope = SpawnEnvelope(models=("big", "small"))
    chosen = child_model(spec, envelope, "small")
    # The parent's parameters carry over, its fallbacks (failover for its model) do not.
    assert chosen == ModelRef(model="small", temperature=0.2)
    assert child_model(spec, envelope, None) == ModelRef(model="big", temperature=0.2)


def test_compose_inherits_limits_and_passes_the_envelope_down_deterministically() -> None:
    spec = parent(spawn=SpawnEnvelope(tools=("lookup",), max_alive=2, max_depth=2))
    assert spec.spawn is not None
    tools = (CodeTool(name="lookup"),)
    child = compose(spec, spec.spawn, request(), tools, spec.model)
    assert isinstance(child, AgentSpec)
    assert (child.name, child.instructions, child.tools) == ("finder", "Find it.", tools)
    assert (child.limits, child.suspension) == (spec.limits, spec.suspension)
    assert child.spawn == SpawnEnvelope(max_alive=2, max_depth=2)
    again = compose(spec, spec.spawn, request(), tools, spec.model)
    assert isinstance(again, AgentSpec) and version_hash(again) == version_hash(child)


def test_an_invalid_composition_is_refused_with_its_path() -> None:
    spec = parent()
    assert spec.spawn is not None
    bad = compose(spec, spec.spawn, request(name="two words"), (), spec.model)
    assert isinstance(bad, str)
    assert bad.startswith("not started: the composed child Spec is invalid: name: String")
