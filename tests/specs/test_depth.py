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
    SpawnEnvelope,
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


def spawn_refusals(caps: list[int], max_depth: int) -> list[str]:
    """What the runtime's ``spawn`` refuses for every spawn depth the envelope allows, of
    the last agent of a delegation chain with ``caps`` (root first): a child at spawn depth
    ``s`` runs at delegation depth ``len(caps) - 1 + s`` and takes its parent's limits, so
    its chain is the parent's, the parent, then the parent's cap again
    (``workflows/features/_spawn.py``)."""
    chain = [(f"a{index}", cap) for index, cap in enumerate(caps)]
    depth = len(caps) - 1
    refused = []
    for spawn_depth in range(1, max_depth + 1):
        why = depth_refusal(depth + spawn_depth, [*chain, (chain[-1][0], caps[-1])])
        if why is not None:
            refused.append(why)
    return refused


def spawning_chain(caps: list[int], max_depth: int) -> AgentSpec:
    """A chain of subagents with ``caps`` (root first) whose last agent spawns."""
    last = len(caps) - 1
    spec = agent(
        f"a{last}",
        spawn=SpawnEnvelope(max_depth=max_depth),
        limits=Limits(max_delegation_depth=caps[last]),
    )
    for index in range(last - 1, -1, -1):
        sub = SubagentRef(name=f"s{index + 1}", description="d" * 20, spec=spec)
        spec = agent(f"a{index}", subagents=[sub], limits=Limits(max_delegation_depth=caps[index]))
    return spec


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=4), st.integers(1, 5))
def test_the_validator_refuses_a_spawn_envelope_the_runtime_would_refuse(
    caps: list[int], max_depth: int
) -> None:
    spec = spawning_chain(caps, max_depth)
    problems = validate(spec)
    if any(not p.path.endswith("spawn.max_depth") for p in problems):
        return  # the chain itself is refused: no spawn ever runs
    spawn_path = "".join(f"subagents[s{i}].spec." for i in range(1, len(caps))) + "spawn.max_depth"
    flagged = [p for p in problems if p.path == spawn_path]
    assert bool(flagged) == bool(spawn_refusals(caps, max_depth)), (problems, caps, max_depth)


def test_a_subagents_spawn_envelope_is_held_to_the_caps_above_it() -> None:
    # The subagent's own cap (3) allows max_depth 3, but the root's (2) stops its spawns
    # at depth 2: the runtime refused every spawn past that, with these words.
    spec = spawning_chain([2, 3], 3)
    (problem,) = validate(spec)
    assert problem.path == "subagents[s1].spec.spawn.max_depth"
    refused = spawn_refusals([2, 3], 3)
    assert refused == [
        f"delegation depth {depth} exceeds max_delegation_depth 2 of agent 'a0'" for depth in (3, 4)
    ]
    assert problem.message == (
        "3 at delegation depth 1 lets a spawned child reach depth 4, where spawn refuses it: "
        "delegation depth 4 exceeds max_delegation_depth 2 of agent 'a0'"
    )
    assert validate(spawning_chain([2, 3], 1)) == []
