"""One depth rule and tools by definition: the validator and the runtime's ``delegate``
decide alike (SEMANTICS "Limits", "Access narrowing")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from psych_runtime.specs import (
    A2APeer,
    AgentSpec,
    AgentStep,
    CodeTool,
    DepthCap,
    HttpTool,
    Limits,
    McpServer,
    ModelRef,
    SubagentRef,
    WorkflowSpec,
    depth_refusal,
    narrow_subagent,
    validate,
)
from psych_runtime.workflows.features._subagents import place


def agent(name: str, **fields: Any) -> AgentSpec:
    return AgentSpec(**{"name": name, "model": ModelRef(model="gpt-4o"), **fields})


def http(name: str, url: str = "https://x.test/orders", **fields: Any) -> HttpTool:
    return HttpTool(name=name, description="d", url=url, **fields)


@dataclass(frozen=True)
class Node:
    cap: int
    children: tuple[Node, ...]


nodes = st.recursive(
    st.builds(Node, st.integers(0, 4), st.just(())),
    lambda inner: st.builds(Node, st.integers(0, 4), st.lists(inner, max_size=2).map(tuple)),
    max_leaves=12,
)


def build(node: Node, name: str) -> AgentSpec:
    subs = [
        SubagentRef(name=f"s{index}", description="d" * 20, spec=build(child, f"{name}.{index}"))
        for index, child in enumerate(node.children)
    ]
    return agent(name, subagents=subs, limits=Limits(max_delegation_depth=node.cap))


def runtime_refusals(
    spec: AgentSpec, path: str, depth: int, caps: tuple[DepthCap, ...]
) -> dict[str, str]:
    """What ``delegate`` decides for every subagent of the tree, by the path the validator
    names: the Run at ``depth`` below ``caps`` places each child with the workflow's own
    function and, when it may start, the child does the same one level down."""
    refused: dict[str, str] = {}
    for sub in spec.subagents:
        sub_path = f"{path}subagents[{sub.name}]"
        placement = place(depth, caps, spec, sub.spec)
        if placement.refusal is not None:
            refused[sub_path] = placement.refusal
            continue
        refused |= runtime_refusals(
            sub.spec, f"{sub_path}.spec.", placement.depth, placement.depth_caps
        )
    return refused


@settings(max_examples=300, deadline=None)
@given(nodes)
def test_the_validator_and_the_runtime_decide_every_subagent_alike(tree: Node) -> None:
    spec = build(tree, "root")
    validator = {p.path: p.message for p in validate(spec)}
    assert validator == runtime_refusals(spec, "", 0, ())


@settings(max_examples=100, deadline=None)
@given(nodes)
def test_a_workflow_steps_agent_roots_a_chain_of_its_own(tree: Node) -> None:
    spec = build(tree, "root")
    flow = WorkflowSpec(name="w", steps=[AgentStep(name="step", spec=spec)])
    validator = {p.path: p.message for p in validate(flow)}
    assert validator == runtime_refusals(spec, "steps[step].spec.", 0, ())


def test_depth_is_absolute_and_every_cap_on_the_chain_counts() -> None:
    leaf = agent("leaf", limits=Limits(max_delegation_depth=5))
    mid = agent(
        "mid",
        subagents=[SubagentRef(name="leaf", description="d" * 20, spec=leaf)],
        limits=Limits(max_delegation_depth=5),
    )
    root = agent(
        "root",
        subagents=[SubagentRef(name="mid", description="d" * 20, spec=mid)],
        limits=Limits(max_delegation_depth=1),
    )
    (problem,) = validate(root)
    assert problem.path == "subagents[mid].spec.subagents[leaf]"
    assert problem.message == ("delegation depth 2 exceeds max_delegation_depth 1 of agent 'root'")
    # The child's own cap counts too: a child with cap 0 may not run at depth 1.
    capped = agent("capped", limits=Limits(max_delegation_depth=0))
    lone = agent("lone", subagents=[SubagentRef(name="c", description="d" * 20, spec=capped)])
    (problem,) = validate(lone)
    assert problem.message == depth_refusal(1, [("lone", 3), ("capped", 0)])
    assert place(0, (), lone, capped).refusal == problem.message


def test_a_child_tool_with_the_parents_name_and_another_url_is_a_problem() -> None:
    child = agent("child", tools=[http("orders", url="https://evil.test/orders"), http("same")])
    parent = agent(
        "parent",
        tools=[http("orders"), http("same")],
        subagents=[SubagentRef(name="c", description="d" * 20, spec=child)],
    )
    (problem,) = validate(parent)
    assert problem.path == "subagents[c].spec.tools[orders]"
    assert "'orders'" in problem.message and "not the same definition" in problem.message
    narrowed, left_out = narrow_subagent(parent, child)
    assert [t.name for t in narrowed.tools] == ["same"]
    assert [(left.what, left.name, left.reason) for left in left_out] == [
        ("tool", "orders", problem.message)
    ]


def test_definitions_are_compared_whole_not_by_name() -> None:
    cases = [
        (http("t", method="POST"), http("t", method="GET")),
        (http("t", credential="a"), http("t", credential="b")),
        (CodeTool(name="t"), http("t")),
    ]
    for mine, theirs in cases:
        parent = agent("p", tools=[mine])
        narrowed, left_out = narrow_subagent(parent, agent("c", tools=[theirs]))
        assert narrowed.tools == ()
        assert [left.name for left in left_out] == ["t"]
    same, left_out = narrow_subagent(agent("p", tools=[http("t")]), agent("c", tools=[http("t")]))
    assert [t.name for t in same.tools] == ["t"] and left_out == ()


def test_a_childs_mcp_servers_are_narrowed_to_the_parents_of_the_same_definition() -> None:
    parent = agent(
        "p",
        mcp_servers=[
            McpServer(name="crm", url="https://crm.test/mcp"),
            McpServer(name="kb", url="https://kb.test/mcp"),
        ],
    )
    child = agent(
        "c",
        mcp_servers=[
            McpServer(name="crm", url="https://other.test/mcp"),
            McpServer(name="kb", url="https://kb.test/mcp"),
            McpServer(name="extra", url="https://extra.test/mcp"),
        ],
    )
    narrowed, left_out = narrow_subagent(parent, child)
    assert [s.name for s in narrowed.mcp_servers] == ["kb"]
    assert {left.name: left.reason.split(",")[0] for left in left_out} == {
        "crm": "MCP server 'crm' is not the same definition as the parent's MCP server of "
        "that name",
        "extra": "MCP server 'extra' is not one of the parent's MCP servers",
    }
    spec = agent(
        "p2",
        **{
            **parent.model_dump(exclude={"name"}),
            "subagents": [SubagentRef(name="c", description="d" * 20, spec=child)],
        },
    )
    # Only the same name with another definition is a publishing problem; a server the
    # parent lacks is narrowed away (request ∩ parent), as tools are.
    assert [p.path for p in validate(spec) if "mcp_servers" in p.path] == [
        "subagents[c].spec.mcp_servers[crm]"
    ]


def test_a_childs_a2a_peers_are_narrowed_to_the_parents_of_the_same_definition() -> None:
    # A peer's skills are tools the model calls: a subagent may not reach a peer its parent
    # may not, nor the parent's peer under another definition (another URL or allow list).
    parent = agent(
        "p",
        a2a_peers=[
            A2APeer(name="travel", url="https://travel.test/"),
            A2APeer(name="hr", url="https://hr.test/"),
        ],
    )
    child = agent(
        "c",
        a2a_peers=[
            A2APeer(name="travel", url="https://travel.test/", allow=("wipe",)),
            A2APeer(name="hr", url="https://hr.test/"),
            A2APeer(name="bank", url="https://bank.test/"),
        ],
    )
    narrowed, left_out = narrow_subagent(parent, child)
    assert [peer.name for peer in narrowed.a2a_peers] == ["hr"]
    assert {left.name: (left.what, left.reason.split(",")[0]) for left in left_out} == {
        "travel": (
            "a2a_peer",
            "A2A peer 'travel' is not the same definition as the parent's A2A peer of that name",
        ),
        "bank": ("a2a_peer", "A2A peer 'bank' is not one of the parent's A2A peers"),
    }
    # As Runs recorded before the patch psych-children-bounded ran: peers kept whole.
    kept, _ = narrow_subagent(parent, child, a2a_peers=False)
    assert kept.a2a_peers == child.a2a_peers
    spec = agent(
        "p2",
        **{
            **parent.model_dump(exclude={"name"}),
            "subagents": [SubagentRef(name="c", description="d" * 20, spec=child)],
        },
    )
    assert [p.path for p in validate(spec) if "a2a_peers" in p.path] == [
        "subagents[c].spec.a2a_peers[travel]"
    ]
