"""Publish-time validation (every problem, each with a path) and access narrowing."""

from __future__ import annotations

import re
from typing import Any

import pytest

from psych_runtime.specs import (
    BUILTIN_TOOL_NAMES,
    MCP_TOOL_SEPARATOR,
    A2APeer,
    AgentSpec,
    AgentStep,
    CodeTool,
    CompactionPolicy,
    HttpTool,
    Limits,
    McpServer,
    ModelRef,
    Problem,
    Skill,
    SpawnEnvelope,
    SubagentRef,
    ToolStep,
    ValidationContext,
    ValidationFailed,
    WorkflowSpec,
    WorkflowStepRef,
    context_free_problems,
    host_placeholders,
    matches,
    narrow,
    unsupported_features,
    validate,
)

MCP_URL = "https://mcp.test/mcp"


def agent(name: str = "a", **fields: Any) -> AgentSpec:
    return AgentSpec(**{"name": name, "model": ModelRef(model="gpt-4o"), **fields})


def http(name: str = "h", url: str = "https://x.test/", **fields: Any) -> HttpTool:
    return HttpTool(name=name, description="d", url=url, **fields)


def skill(name: str, body: str = "b") -> Skill:
    return Skill(name=name, description="d", body=body)


def checks(
    spec: AgentSpec | WorkflowSpec, context: ValidationContext | None = None
) -> list[Problem]:
    """What ``validate`` finds besides fields the runtime does not implement yet, so the
    checks on those fields stay tested for when they land (the refusals have their own
    tests in test_unsupported.py)."""
    unsupported = unsupported_features(spec)
    return [p for p in validate(spec, context) if p not in unsupported]


def paths(problems: list[Problem]) -> list[str]:
    return sorted(p.path for p in problems)


def nest(depth: int, **limits: Any) -> AgentSpec:
    """An agent with a chain of ``depth`` subagents below it."""
    spec = agent("leaf")
    for level in range(depth, 0, -1):
        spec = agent(
            f"level{level - 1}",
            subagents=[SubagentRef(name=f"sub{level}", description="d" * 20, spec=spec)],
            limits=Limits(**limits),
        )
    return spec


def test_valid_spec_has_no_problems() -> None:
    spec = agent(
        tools=[
            CodeTool(name="lookup"),
            http(
                "refund",
                url="https://x.test/orders/{order_id}",
                input_schema={"type": "object", "properties": {"order_id": {"type": "string"}}},
            ),
        ],
        mcp_servers=[
            McpServer(name="crm", url=MCP_URL),
            McpServer(name="maybe", url=MCP_URL, optional=True),
        ],
        skills=[skill("a", "see [[skill:b]]"), skill("b", "see [[skill:a]]")],
        spawn=SpawnEnvelope(tools=["lookup", "refund"], models=["gpt-4o"], max_depth=2),
        subagents=[SubagentRef(name="s", description="d" * 20, spec=agent("child"))],
    )
    context = ValidationContext(
        registered_tools=["lookup"], known_models=["gpt-4o"], reachable_mcp_servers=["crm"]
    )
    assert checks(spec, context) == []
    assert validate(spec, context) == unsupported_features(spec)


def test_spec_of_implemented_fields_only_is_valid() -> None:
    spec = agent(
        tools=[CodeTool(name="lookup"), http("refund")],
        skills=[skill("a")],
        subagents=[SubagentRef(name="s", description="d" * 20, spec=agent("child"))],
    )
    assert validate(spec, ValidationContext(registered_tools=["lookup"])) == []


def test_every_problem_is_reported_not_just_the_first() -> None:
    spec = agent(
        model=ModelRef(model="mystery", fallbacks=["gpt-4o", "ghost"]),
        tools=[
            CodeTool(name="unregistered"),
            CodeTool(name="load_skill"),
            http("refund", url="https://x.test/{order_id}/{line}"),
        ],
        mcp_servers=[
            McpServer(name="down", url=MCP_URL),
            McpServer(name="opt", url=MCP_URL, optional=True),
        ],
        skills=[skill("s", "use [[skill:missing]] and [[skill:s]]")],
        spawn=SpawnEnvelope(tools=["not_mine"], max_depth=5),
        compaction=CompactionPolicy(trigger_tokens=10, model="tiny"),
    )
    context = ValidationContext(
        registered_tools=["load_skill"], known_models=["gpt-4o"], reachable_mcp_servers=["other"]
    )
    problems = checks(spec, context)
    assert paths(problems) == sorted(
        [
            "compaction.model",
            "mcp_servers[down]",
            "model.fallbacks[1]",
            "model.model",
            "skills[s].body",
            "spawn.max_depth",
            "spawn.tools",
            "tools[load_skill]",
            "tools[refund].url",
            "tools[refund].url",
            "tools[unregistered]",
        ]
    )
    for problem in problems:
        assert problem.message
        assert str(problem) == f"{problem.path}: {problem.message}"


def test_validation_failed_carries_every_problem() -> None:
    problems = validate(agent(tools=[CodeTool(name="x"), CodeTool(name="y")]))
    error = ValidationFailed(problems)
    assert error.problems == tuple(problems)
    assert "2 problem(s)" in str(error)
    assert "tools[x]" in str(error) and "tools[y]" in str(error)


def test_unregistered_code_tool() -> None:
    spec = agent(tools=[CodeTool(name="lookup"), http()])
    (problem,) = validate(spec, ValidationContext())
    assert problem.path == "tools[lookup]"
    assert "not registered" in problem.message
    assert validate(spec, ValidationContext(registered_tools=["lookup"])) == []
    assert validate(spec) == [problem]


def test_unknown_model_and_empty_known_models() -> None:
    spec = agent(
        model=ModelRef(model="gpt-5", fallbacks=["gpt-4o"]),
        spawn=SpawnEnvelope(models=["nope"], max_depth=1),
    )
    problems = checks(spec, ValidationContext(known_models=["gpt-4o"]))
    assert paths(problems) == ["model.model", "spawn.models[0]"]
    assert "gpt-5" in problems[0].message or "gpt-5" in problems[1].message
    assert checks(spec, ValidationContext(known_models=[])) == []
    assert checks(spec, ValidationContext(known_models=["gpt-5", "gpt-4o", "nope"])) == []


@pytest.mark.parametrize("field", ["registered_tools", "known_models", "reachable_mcp_servers"])
def test_a_context_given_one_string_for_its_names_is_refused(field: str) -> None:
    # frozenset("gpt-4o") is its characters: known_models="gpt-4o" reported "unknown model
    # 'gpt-4o'", and registered_tools="lookup" registered a code tool named "l".
    with pytest.raises(TypeError, match=f"{field} is a sequence of names, not the string 'x1'"):
        ValidationContext(**{field: "x1"})  # type: ignore[arg-type]
    given: dict[str, Any] = {field: ["x1"]}
    assert getattr(ValidationContext(**given), field) == frozenset({"x1"})


def test_unreachable_mcp_server() -> None:
    spec = agent(
        mcp_servers=[
            McpServer(name="up", url=MCP_URL),
            McpServer(name="down", url=MCP_URL),
            McpServer(name="flaky", url=MCP_URL, optional=True),
        ]
    )
    problems = checks(spec, ValidationContext(reachable_mcp_servers=["up"]))
    assert paths(problems) == ["mcp_servers[down]"]
    assert "not optional" in problems[0].message
    assert checks(spec, ValidationContext(reachable_mcp_servers=[])) == []
    assert checks(spec, ValidationContext(reachable_mcp_servers=["up", "down"])) == []


def test_context_free_problems_are_all_but_registrations_models_and_reachability() -> None:
    # Code tools at every depth, a model and an MCP server nobody checked: no problem
    # without a worker's context. A literal key anywhere is one, with its path.
    inner = agent("inner", tools=[CodeTool(name="deep")], model=ModelRef(model="unknown"))
    lead = agent(
        "lead",
        tools=[CodeTool(name="mine")],
        subagents=[SubagentRef(name="inner", description="x" * 20, spec=inner)],
        mcp_servers=[McpServer(name="down", url="https://down.test/mcp")],
    )
    nested = WorkflowSpec(
        name="nested",
        tools=[CodeTool(name="step_tool")],
        steps=[ToolStep(name="t", tool="step_tool")],
    )
    flow = WorkflowSpec(
        name="flow",
        steps=[
            AgentStep(name="a", spec=lead),
            WorkflowStepRef(name="w", spec=nested),
        ],
    )
    assert context_free_problems(lead) == []
    assert context_free_problems(flow) == []
    assert paths(validate(flow)) == [
        "steps[a].spec.subagents[inner].spec.tools[deep]",
        "steps[a].spec.tools[mine]",
        "steps[w].spec.tools[step_tool]",
    ]
    leaky = inner.model_copy(update={"tools": (http(headers={"X-Api-Key": "k"}),)})
    assert paths(context_free_problems(leaky)) == ["tools[h].headers[X-Api-Key]"]


def test_broken_skill_link() -> None:
    spec = agent(skills=[skill("a", "[[skill:b]] [[skill:gone]]"), skill("b", "[[skill:a]]")])
    (problem,) = validate(spec)
    assert problem.path == "skills[a].body"
    assert "gone" in problem.message


def test_a_link_is_what_a_model_reads_as_one() -> None:
    # The runtime follows no link: the model reads the body and calls load_skill, which
    # matches a name exactly. Spaces and the case of "skill" do not change what it reads.
    body = (
        "[[skill: b]] [[ Skill : b ]] [[skills:b]] "
        "[[skill: gone]] [[Skill:gone2 ]] [[skill:refund policy]] [[skill:B]] [[skill:]]"
    )
    spec = agent(skills=[skill("a", body), skill("b", "[[skill:a]]")])
    assert [p.message for p in validate(spec)] == [
        f"link {link} names no skill of this agent"
        for link in (
            "[[skill: gone]]",
            "[[Skill:gone2 ]]",
            "[[skill:refund policy]]",
            "[[skill:B]]",
            "[[skill:]]",
        )
    ]


@pytest.mark.parametrize("name", sorted(BUILTIN_TOOL_NAMES | {"send_message"}))
def test_tool_named_like_a_builtin(name: str) -> None:
    spec = agent(tools=[http(name)])
    (problem,) = validate(spec)
    assert problem.path == f"tools[{name}]"
    assert "built-in" in problem.message


def test_a_tool_named_like_an_mcp_servers_or_a_peers_tools_is_a_problem() -> None:
    # Until 12-06 only an MCP server's name as written was compared: a tool named after a
    # server's sanitised name, or after an A2A peer, passed, and at run time the server's
    # or peer's tool took a hashed name beside it.
    spec = agent(
        tools=[http("my_mcp__search"), http("billing__refund"), http("billing_x__refund")],
        mcp_servers=[McpServer(name="my.mcp", url=MCP_URL)],
        a2a_peers=[A2APeer(name="billing", url="https://peer.test/a2a")],
    )
    assert [(p.path, p.message) for p in validate(spec)] == [
        (
            "tools[billing__refund]",
            "name 'billing__refund' collides with the skills of A2A peer 'billing'",
        ),
        (
            "tools[my_mcp__search]",
            "name 'my_mcp__search' collides with the tools of MCP server 'my.mcp'",
        ),
    ]


def test_builtin_names_include_the_documented_ones() -> None:
    documented = {"load_skill", "read_tool_output", "ask_question", "delegate", "spawn"}
    assert documented <= BUILTIN_TOOL_NAMES


def test_http_url_placeholder_missing_from_schema() -> None:
    spec = agent(
        tools=[
            http(
                "t",
                url="https://x.test/{a}/{b}?q={c}",
                input_schema={"type": "object", "properties": {"b": {"type": "string"}}},
            )
        ]
    )
    problems = validate(spec)
    assert [p.path for p in problems] == ["tools[t].url", "tools[t].url"]
    assert "{a}" in problems[0].message
    assert "{c}" in problems[1].message
    assert validate(agent(tools=[http("t", url="https://x.test/{a}")])) != []


@pytest.mark.parametrize(
    "url",
    [
        "https://{host}/orders",
        "https://api.test{suffix}/orders",
        "http{s}://api.test/",
        "https://api.test:{port}/",
        "https://api.test{/suffix}",  # RFC 6570's form: the host ends at the brace's "/"
        "https://api.test{?q}",
    ],
)
def test_an_http_url_placeholder_may_not_choose_scheme_host_or_port(url: str) -> None:
    (name,) = re.findall(r"\{([^{}]+)\}", url)
    schema = {"type": "object", "properties": {name: {"type": "string"}}}
    problems = validate(agent(tools=[http("t", url=url, input_schema=schema)]))
    assert [
        (p.path, f"{{{name}}} is in the scheme, host or port" in p.message) for p in problems
    ] == [("tools[t].url", True)]
    assert host_placeholders(url) == [name]


def test_an_http_url_placeholder_in_the_path_and_query_is_fine() -> None:
    schema = {"type": "object", "properties": {"a": {}, "q": {}}}
    url = "https://api.test/orders/{a}?q={q}"
    assert validate(agent(tools=[http("t", url=url, input_schema=schema)])) == []
    assert host_placeholders(url) == []


@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_model_id_is_a_problem_not_the_default(blank: str) -> None:
    # compaction.model None is the agent's model; a blank one named no model and was taken
    # for None (the summariser ran on the agent's model) until 12-06. A blank spawn model
    # let the envelope allow no model the child could start on.
    spec = agent(
        compaction=CompactionPolicy(trigger_tokens=10, model=blank),
        spawn=SpawnEnvelope(models=[blank], max_depth=1),
    )
    problems = validate(spec)
    assert [(p.path, p.message) for p in problems] == [
        (path, f"{blank!r} names no model: give a model id, or leave it out")
        for path in ("compaction.model", "spawn.models[0]")
    ]
    assert validate(agent(compaction=CompactionPolicy(trigger_tokens=10))) == []


def test_spawn_tools_must_be_the_agents_own() -> None:
    spec = agent(
        tools=[CodeTool(name="own")],
        mcp_servers=[McpServer(name="srv", url=MCP_URL)],
        spawn=SpawnEnvelope(tools=["own", f"srv{MCP_TOOL_SEPARATOR}anything", "other", "srv"]),
    )
    problems = checks(spec, ValidationContext(registered_tools=["own"]))
    assert paths(problems) == ["spawn.tools"] * 3
    messages = " ".join(p.message for p in problems)
    assert "'other'" in messages and "'srv'" in messages
    assert "'own'" not in messages


def test_spawn_tools_may_not_name_mcp_tools() -> None:
    # A spawned child is composed with its parent's code and HTTP tools only (no MCP
    # servers), so an envelope naming an MCP tool would publish and then grant nothing.
    spec = agent(
        tools=[CodeTool(name="own")],
        mcp_servers=[McpServer(name="srv", url=MCP_URL)],
        spawn=SpawnEnvelope(tools=[f"srv{MCP_TOOL_SEPARATOR}lookup", f"srv{MCP_TOOL_SEPARATOR}*"]),
    )
    problems = checks(spec, ValidationContext(registered_tools=["own"]))
    assert paths(problems) == ["spawn.tools", "spawn.tools"]
    assert all("MCP server 'srv'" in p.message for p in problems)
    assert all("code and HTTP tools" in p.message for p in problems)


def test_spawn_depth_within_delegation_depth() -> None:
    over = agent(spawn=SpawnEnvelope(max_depth=4), limits=Limits(max_delegation_depth=3))
    (problem,) = checks(over)
    assert problem.path == "spawn.max_depth"
    assert "max_delegation_depth" in problem.message
    at = agent(spawn=SpawnEnvelope(max_depth=3), limits=Limits(max_delegation_depth=3))
    assert checks(at) == []


def test_fallbacks_without_a_transient_budget_are_no_problem() -> None:
    # Such fallbacks are never tried (psych validate warns of them), but the Spec runs: a
    # Version published with them is still started, and a Run's spawn composes (and
    # validates) a child that inherits them (replay: spawn_with_unbudgeted_fallbacks).
    model = ModelRef(model="gpt-4o", fallbacks=["gpt-4o-mini"])
    assert checks(agent(model=model, limits=Limits(transient_retry_budget=0))) == []


def test_subagent_nesting_within_delegation_depth() -> None:
    assert validate(nest(3)) == []  # default max_delegation_depth is 3
    problems = validate(nest(4))
    assert [p.path for p in problems] == [
        "subagents[sub1].spec.subagents[sub2].spec.subagents[sub3].spec.subagents[sub4]"
    ]
    assert "depth 4" in problems[0].message
    assert validate(nest(2, max_delegation_depth=2)) == []
    assert paths(validate(nest(1, max_delegation_depth=0))) == ["subagents[sub1]"]


def test_parent_depth_bounds_a_childs_larger_budget() -> None:
    child = agent("child", subagents=[SubagentRef(name="g", description="d" * 20, spec=agent())])
    parent = agent(
        subagents=[SubagentRef(name="c", description="d" * 20, spec=child)],
        limits=Limits(max_delegation_depth=1),
    )
    assert paths(validate(parent)) == ["subagents[c].spec.subagents[g]"]


def test_problems_inside_subagents_carry_their_path() -> None:
    child = agent("child", tools=[CodeTool(name="nope")])
    spec = agent(subagents=[SubagentRef(name="helper", description="d" * 20, spec=child)])
    assert paths(validate(spec)) == ["subagents[helper].spec.tools[nope]"]


def test_tool_step_must_name_a_workflow_tool() -> None:
    spec = WorkflowSpec(
        name="w",
        tools=[http("known")],
        mcp_servers=[McpServer(name="srv", url=MCP_URL)],
        steps=[
            ToolStep(name="ok", tool="known"),
            ToolStep(name="mcp", tool="srv__create"),
            ToolStep(name="bad", tool="unknown"),
        ],
    )
    (problem,) = checks(spec)
    assert problem.path == "steps[bad].tool"
    assert "unknown" in problem.message


def test_workflow_problems_carry_step_prefix() -> None:
    inner_agent = agent("greeter", tools=[CodeTool(name="missing")])
    nested = WorkflowSpec(name="inner", steps=[ToolStep(name="x", tool="absent")])
    spec = WorkflowSpec(
        name="w",
        tools=[CodeTool(name="unreg")],
        steps=[
            AgentStep(name="welcome", spec=inner_agent),
            WorkflowStepRef(name="sub", spec=nested),
        ],
    )
    problems = validate(spec, ValidationContext(known_models=["other"]))
    assert paths(problems) == [
        "steps[sub].spec.steps[x].tool",
        "steps[welcome].spec.model.model",
        "steps[welcome].spec.tools[missing]",
        "tools[unreg]",
    ]


def test_workflow_agent_step_delegation_depth() -> None:
    spec = WorkflowSpec(name="w", steps=[AgentStep(name="deep", spec=nest(4))])
    (problem,) = validate(spec)
    assert problem.path.startswith("steps[deep].spec.subagents[sub1]")


def test_validation_context_takes_any_iterable() -> None:
    context = ValidationContext(
        registered_tools=(n for n in ["a"]), known_models={"m"}, reachable_mcp_servers=["s"]
    )
    assert context.registered_tools == frozenset({"a"})
    assert context.known_models == frozenset({"m"})
    assert context.reachable_mcp_servers == frozenset({"s"})
    assert ValidationContext().known_models == frozenset()


# --- narrow --------------------------------------------------------------------------------

OFFERED = ["search", "search_docs", "create", "delete", "admin_reset"]


def test_empty_allow_grants_everything_offered() -> None:
    assert narrow(OFFERED) == tuple(sorted(OFFERED))
    assert narrow(OFFERED, allow=()) == tuple(sorted(OFFERED))


def test_allow_exact_and_trailing_star() -> None:
    assert narrow(OFFERED, allow=["create"]) == ("create",)
    assert narrow(OFFERED, allow=["search*"]) == ("search", "search_docs")
    assert narrow(OFFERED, allow=["search"]) == ("search",)
    assert narrow(OFFERED, allow=["sea"]) == ()
    assert narrow(OFFERED, allow=["*"]) == tuple(sorted(OFFERED))
    assert narrow(OFFERED, allow=["create", "admin_*"]) == ("admin_reset", "create")


def test_permitted_is_three_state() -> None:
    assert narrow(OFFERED, permitted=None) == tuple(sorted(OFFERED))
    assert narrow(OFFERED, permitted=()) == ()
    assert narrow(OFFERED, permitted=["search*", "delete"]) == ("delete", "search", "search_docs")
    assert narrow(OFFERED, allow=["search*"], permitted=["search_docs", "create"]) == (
        "search_docs",
    )


def test_withheld_removed() -> None:
    assert narrow(OFFERED, withheld=["create", "not_offered"]) == (
        "admin_reset",
        "delete",
        "search",
        "search_docs",
    )
    assert narrow(OFFERED, allow=["search*"], withheld={"search"}) == ("search_docs",)


def test_narrow_result_sorted_and_unique() -> None:
    result = narrow(["b", "a", "b", "c", "a"], allow=["a", "b", "c*"])
    assert result == ("a", "b", "c")
    assert isinstance(result, tuple)


def test_narrow_never_grants_what_is_not_offered() -> None:
    assert narrow(["a"], allow=["a", "b"], permitted=["b", "a"]) == ("a",)


def test_matches() -> None:
    assert matches("srv__x", ["srv__*"])
    assert matches("x", ["x"])
    assert not matches("xy", ["x"])
    assert not matches("x", [])
    assert matches("anything", ["*"])


def test_an_mcp_allow_entry_that_could_match_nothing_is_a_problem() -> None:
    # allow matches exactly or by a trailing '*': a '*' anywhere else, or an empty entry,
    # granted nothing and passed validation, so the Run offered none of those tools.
    spec = agent(
        mcp_servers=[
            McpServer(name="crm", url=MCP_URL, allow=["get*account", "list_*", "", "*"]),
            McpServer(name="docs", url=MCP_URL, allow=["search"], optional=True),
        ]
    )
    problems = [p for p in checks(spec) if p.path.endswith(".allow")]
    assert [(p.path, p.message) for p in problems] == [
        (
            "mcp_servers[crm].allow",
            "an empty entry grants nothing; give a name, or a prefix ending in '*'",
        ),
        (
            "mcp_servers[crm].allow",
            "'get*account': '*' may only end an entry (a prefix such as 'get_*'); an entry "
            "matches a name exactly or by its trailing '*', nothing else",
        ),
    ]
    assert problems == [p for p in context_free_problems(spec) if p.path.endswith(".allow")]


@pytest.mark.parametrize(
    "url",
    [
        "npx -y @modelcontextprotocol/server-github",
        "ws://mcp.test/mcp",
        "mcp.test/mcp",
        "file:///srv/mcp",
        "https://",
        " https://mcp.test/mcp",
    ],
)
def test_an_mcp_server_url_that_is_not_http_with_a_host_is_a_problem(url: str) -> None:
    # Servers are reached over streamable HTTP or SSE only: a stdio server's command line
    # or a URL of another scheme passed validate, then failed the Run (or, optional, left
    # its tools out of every Run) as an unreachable server.
    spec = agent(mcp_servers=[McpServer(name="gh", url=url, optional=True)])
    message = (
        f"{url!r} is not an http:// or https:// URL with a host: MCP servers are reached "
        "over streamable HTTP or SSE only"
    )
    assert [(p.path, p.message) for p in checks(spec)] == [("mcp_servers[gh].url", message)]
    assert [p.path for p in context_free_problems(spec)] == ["mcp_servers[gh].url"]
    for good in ("http://127.0.0.1:8000/mcp", "https://mcp.test/sse?page=1"):
        assert checks(agent(mcp_servers=[McpServer(name="gh", url=good)])) == []


def test_an_a2a_peer_allow_entry_that_could_match_nothing_is_a_problem() -> None:
    # The same narrowing as an MCP server's allow (exact, or a trailing '*').
    spec = agent(a2a_peers=[A2APeer(name="billing", url="https://b.test/", allow=["re*und", ""])])
    assert [(p.path, p.message) for p in checks(spec)] == [
        (
            "a2a_peers[billing].allow",
            "an empty entry grants nothing; give a name, or a prefix ending in '*'",
        ),
        (
            "a2a_peers[billing].allow",
            "'re*und': '*' may only end an entry (a prefix such as 'get_*'); an entry "
            "matches a name exactly or by its trailing '*', nothing else",
        ),
    ]


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("travel.example.com", "an http(s) URL with a host"),
        ("ftp://travel.example.com", "an http(s) URL with a host"),
        ("https://", "an http(s) URL with a host"),
        (
            "https://travel.example.com/a2a/.well-known/agent-card.json",
            "the peer's base URL (https://travel.example.com/a2a)",
        ),
    ],
)
def test_a_peer_url_a_card_cannot_be_fetched_from_is_a_problem(url: str, why: str) -> None:
    spec = agent(a2a_peers=(A2APeer(name="travel", url=url),))
    [problem] = validate(spec)
    assert problem.path == "a2a_peers[travel].url"
    assert why in problem.message and repr(url) in problem.message


def test_an_http_peer_url_with_a_path_is_valid() -> None:
    spec = agent(a2a_peers=(A2APeer(name="travel", url="http://127.0.0.1:8080/a2a/travel"),))
    assert validate(spec) == []
