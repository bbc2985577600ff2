"""AgentBuilder and WorkflowBuilder: the seed's examples, repeatability, equivalence."""

from __future__ import annotations

from typing import Any

import pytest

from psych_runtime.specs import (
    AgentBuilder,
    AgentSpec,
    AgentStep,
    CodeTool,
    HttpTool,
    Limits,
    McpOAuth,
    SpecError,
    ToolRegistry,
    ToolStep,
    ValidationContext,
    WorkflowBuilder,
    WorkflowSpec,
    WorkflowStepRef,
    parse_spec,
    spec_from_yaml,
    spec_to_yaml,
    unsupported_features,
    validate,
    version_hash,
)


def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order by its id.

    Args:
        order_id: The id printed on the receipt.
    """
    return {"order_id": order_id, "status": "shipped"}


def create_account(plan: str, seats: int = 1) -> str:
    """Create a customer account.

    Args:
        plan: The plan to start on.
        seats: How many seats to provision.
    """
    return f"{plan}:{seats}"


def support_builder() -> AgentBuilder:
    """The AgentBuilder example of the seed, as written."""
    return (
        AgentBuilder("support")
        .instructions("Help the customer with their order.")
        .model("gpt-4o", temperature=0.2, fallbacks=["gpt-4o-mini"])
        .tool(lookup_order)
        .http_tool(
            "issue_refund",
            description="Issue a refund for an order.",
            url="https://api.example.com/orders/{order_id}/refund",
            method="POST",
            credential="payments-api-key",
        )
        .skill("refund-policy", "When a refund is allowed", body="...")
        .limits(max_steps=32)
    )


def onboard_builder() -> WorkflowBuilder:
    """The WorkflowBuilder example of the seed, as written."""
    return (
        WorkflowBuilder("onboard-customer")
        .tool(create_account)
        .tool_step("create", "create_account", {"plan": "starter"})
        .agent_step("welcome", AgentBuilder("greeter").model("gpt-4o-mini"))
    )


SUPPORT_DICT: dict[str, Any] = {
    "kind": "agent",
    "name": "support",
    "instructions": "Help the customer with their order.",
    "model": {"model": "gpt-4o", "temperature": 0.2, "fallbacks": ["gpt-4o-mini"]},
    "tools": [
        {"kind": "code", "name": "lookup_order"},
        {
            "kind": "http",
            "name": "issue_refund",
            "description": "Issue a refund for an order.",
            "url": "https://api.example.com/orders/{order_id}/refund",
            "method": "POST",
            "credential": "payments-api-key",
            "input_schema": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    ],
    "skills": [{"name": "refund-policy", "description": "When a refund is allowed", "body": "..."}],
    "limits": {"max_steps": 32},
}

SUPPORT_YAML = """\
kind: agent
name: support
instructions: Help the customer with their order.
model:
  model: gpt-4o
  temperature: 0.2
  fallbacks: [gpt-4o-mini]
skills:
  - name: refund-policy
    description: When a refund is allowed
    body: "..."
tools:
  - kind: http
    name: issue_refund
    description: Issue a refund for an order.
    url: "https://api.example.com/orders/{order_id}/refund"
    method: POST
    credential: payments-api-key
    input_schema:
      type: object
      properties:
        order_id: {type: string}
      required: [order_id]
  - kind: code
    name: lookup_order
limits:
  max_steps: 32
"""

ONBOARD_DICT: dict[str, Any] = {
    "kind": "workflow",
    "name": "onboard-customer",
    "tools": [{"kind": "code", "name": "create_account"}],
    "steps": [
        {
            "kind": "tool",
            "name": "create",
            "tool": "create_account",
            "arguments": {"plan": "starter"},
        },
        {
            "kind": "agent",
            "name": "welcome",
            "spec": {"kind": "agent", "name": "greeter", "model": {"model": "gpt-4o-mini"}},
        },
    ],
}

ONBOARD_YAML = """\
kind: workflow
name: onboard-customer
tools: [{kind: code, name: create_account}]
steps:
  - {kind: tool, name: create, tool: create_account, arguments: {plan: starter}}
  - kind: agent
    name: welcome
    spec: {kind: agent, name: greeter, model: {model: gpt-4o-mini}}
"""


def test_agent_builder_seed_example() -> None:
    builder = support_builder()
    spec = builder.build()
    assert isinstance(spec, AgentSpec)
    assert spec.name == "support"
    assert spec.instructions == "Help the customer with their order."
    assert spec.model.model == "gpt-4o"
    assert spec.model.temperature == 0.2
    assert spec.model.fallbacks == ("gpt-4o-mini",)
    assert [t.name for t in spec.tools] == ["issue_refund", "lookup_order"]
    code, refund = spec.tools[1], spec.tools[0]
    assert isinstance(code, CodeTool)
    assert isinstance(refund, HttpTool)
    assert refund.url == "https://api.example.com/orders/{order_id}/refund"
    assert refund.method == "POST"
    assert refund.credential == "payments-api-key"
    assert refund.input_schema == {
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"],
    }
    assert [(s.name, s.description, s.body) for s in spec.skills] == [
        ("refund-policy", "When a refund is allowed", "...")
    ]
    assert spec.limits == Limits(max_steps=32)
    assert "lookup_order" in builder.registry
    assert builder.registry.get("lookup_order").fn is lookup_order
    context = ValidationContext(registered_tools=builder.registry.names())
    assert validate(spec, context) == []


def test_workflow_builder_seed_example() -> None:
    builder = onboard_builder()
    spec = builder.build()
    assert isinstance(spec, WorkflowSpec)
    assert spec.name == "onboard-customer"
    create, welcome = spec.steps
    assert isinstance(create, ToolStep)
    assert (create.name, create.tool, create.arguments) == (
        "create",
        "create_account",
        {"plan": "starter"},
    )
    assert isinstance(welcome, AgentStep)
    assert welcome.name == "welcome"
    assert welcome.spec.name == "greeter"
    assert welcome.spec.model.model == "gpt-4o-mini"
    assert spec.tools == (CodeTool(name="create_account"),)
    assert builder.registry.get("create_account").fn is create_account
    assert validate(spec, ValidationContext(registered_tools=builder.registry.names())) == []


@pytest.mark.parametrize("make", [support_builder, onboard_builder], ids=["agent", "workflow"])
def test_build_is_repeatable(make: Any) -> None:
    builder = make()
    first, second = builder.build(), builder.build()
    assert first == second
    assert first is not second
    assert version_hash(first) == version_hash(second)


def test_build_reflects_later_grants() -> None:
    builder = support_builder()
    before = version_hash(builder.build())
    builder.limits(max_turns=5)
    after = builder.build()
    assert after.limits.max_turns == 5
    assert version_hash(after) != before


@pytest.mark.parametrize(
    ("make", "data", "text"),
    [
        (support_builder, SUPPORT_DICT, SUPPORT_YAML),
        (onboard_builder, ONBOARD_DICT, ONBOARD_YAML),
    ],
    ids=["agent", "workflow"],
)
def test_builder_dict_and_yaml_hash_the_same(make: Any, data: Any, text: str) -> None:
    built = make().build()
    from_dict = parse_spec(data)
    from_yaml = spec_from_yaml(text)
    assert built == from_dict == from_yaml
    assert version_hash(built) == version_hash(from_dict) == version_hash(from_yaml)
    assert version_hash(spec_from_yaml(spec_to_yaml(built))) == version_hash(built)


def test_http_tool_schema_from_placeholders_is_required_strings() -> None:
    spec = (
        AgentBuilder("a")
        .model("m")
        .http_tool("t", description="d", url="https://x.test/{a}/{b}/{a}", method="GET")
        .build()
    )
    (tool,) = spec.tools
    assert isinstance(tool, HttpTool)
    assert tool.input_schema == {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "required": ["a", "b"],
    }


def test_http_tool_without_placeholders_hashes_as_written_in_a_file() -> None:
    # No placeholder, no schema: HttpTool's own default, as a file that leaves it out gets.
    built = AgentBuilder("a").model("m").http_tool("t", description="d", url="https://x.test/")
    from_file = spec_from_yaml(
        "kind: agent\nname: a\nmodel: {model: m}\n"
        "tools: [{kind: http, name: t, description: d, url: 'https://x.test/'}]\n"
    )
    assert built.build() == from_file
    assert version_hash(built.build()) == version_hash(from_file)


def test_http_tool_given_schema_kept() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    spec = (
        AgentBuilder("a").model("m").http_tool("t", description="d", url="u", input_schema=schema)
    )
    (tool,) = spec.build().tools
    assert isinstance(tool, HttpTool)
    assert tool.input_schema == schema


def test_no_model_is_a_spec_error() -> None:
    builder = AgentBuilder("support").instructions("Hi.")
    with pytest.raises(SpecError, match="model"):
        builder.build()


def test_missing_model_of_a_step_agent_is_a_spec_error() -> None:
    builder = WorkflowBuilder("w").agent_step("s", AgentBuilder("no_model"))
    with pytest.raises(SpecError, match="model"):
        builder.build()


@pytest.mark.parametrize(
    "grant",
    [
        lambda b: b.tool(lookup_order).tool(lookup_order),
        lambda b: b.tool("x").tool("x"),
        lambda b: b.tool(lookup_order).http_tool("lookup_order", description="d", url="u"),
        lambda b: b.http_tool("h", description="d", url="u").http_tool(
            "h", description="e", url="v"
        ),
        lambda b: b.skill("s", "d", body="b").skill("s", "other", body="c"),
        lambda b: b.mcp_server("m", "https://a.test").mcp_server("m", "https://b.test"),
        lambda b: b.a2a_peer("p", "https://a.test").a2a_peer("p", "https://b.test"),
        lambda b: b.subagent("s", "x" * 20, AgentBuilder("c").model("m")).subagent(
            "s", "y" * 20, AgentBuilder("c").model("m")
        ),
    ],
    ids=["code_fn", "code_name", "code_http", "http", "skill", "mcp", "a2a", "subagent"],
)
def test_duplicate_grant_is_a_spec_error(grant: Any) -> None:
    with pytest.raises(SpecError, match="already granted"):
        grant(AgentBuilder("a").model("m"))


def test_workflow_duplicate_tool_grant_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="already granted"):
        WorkflowBuilder("w").tool("t").tool("t")


def test_limits_accumulate() -> None:
    builder = AgentBuilder("a").model("m").limits(max_steps=32).limits(max_turns=5)
    builder.limits(max_steps=40)
    limits = builder.build().limits
    assert (limits.max_steps, limits.max_turns) == (40, 5)
    assert limits.deadline_seconds == Limits().deadline_seconds
    workflow = WorkflowBuilder("w").tool_step("s", "t").limits(max_steps=7).limits(max_turns=3)
    assert (workflow.build().limits.max_steps, workflow.build().limits.max_turns) == (7, 3)


def test_suspension_accumulates() -> None:
    builder = AgentBuilder("a").model("m").suspension(may_ask_questions=True)
    builder.suspension(approval_expires_seconds=60)
    suspension = builder.build().suspension
    assert suspension.may_ask_questions is True
    assert suspension.approval_expires_seconds == 60


def test_bad_limits_value_fails_at_the_call() -> None:
    builder = AgentBuilder("a").model("m").limits(max_turns=5)
    with pytest.raises(SpecError, match=r"max_steps"):
        builder.limits(max_steps=0)
    with pytest.raises(SpecError, match=r"not_a_limit"):
        builder.limits(not_a_limit=1)
    limits = builder.build().limits
    assert (limits.max_steps, limits.max_turns) == (Limits().max_steps, 5)
    with pytest.raises(SpecError, match=r"max_turns"):
        WorkflowBuilder("w").limits(max_turns=1001)


@pytest.mark.parametrize(
    "call",
    [
        lambda b: b.model("m", temperature=5),
        lambda b: b.model(""),
        lambda b: b.http_tool("h", description="", url="u"),
        lambda b: b.http_tool("h", description="d", url="u", headers={"Authorization": "x"}),
        lambda b: b.skill("s", "", body="b"),
        lambda b: b.mcp_server("m", "u", transport="stdio"),
        lambda b: b.spawn(max_depth=0),
        lambda b: b.compaction(0),
        lambda b: b.tool("bad name"),
        lambda b: b.suspension(children_expires_seconds=0),
    ],
    ids=["temp", "model", "http", "header", "skill", "mcp", "spawn", "compact", "tool", "susp"],
)
def test_bad_grant_fails_at_the_call(call: Any) -> None:
    with pytest.raises(SpecError):
        call(AgentBuilder("a").model("m"))


def test_subagent_and_other_grants() -> None:
    child = AgentBuilder("child").model("gpt-4o-mini").instructions("Small tasks.")
    spec = (
        AgentBuilder("parent")
        .model("gpt-4o")
        .description("A parent.")
        .subagent("helper", "Does the small tasks for me.", child)
        .mcp_server(
            "crm",
            "https://crm.test/mcp",
            allow=["get_*", "list_accounts"],
            oauth={
                "grant": "authorization_code",
                "preregistered_client_id": "psych-agent",
                "redirect_uris": ["https://cb.test"],
            },
        )
        .a2a_peer("peer", "https://peer.test", scheme="Token")
        .http_tool("notify", description="Notify the team.", url="https://hooks.test/notify")
        .spawn(tools=["notify"], max_depth=1)
        .compaction(10_000, keep_recent_turns=2)
        .tasks()
        .components()
        .answer_style("concise")
        .build()
    )
    assert spec.description == "A parent."
    assert spec.subagents[0].spec == child.build()
    assert spec.mcp_servers[0].allow == ("get_*", "list_accounts")
    assert spec.mcp_servers[0].oauth == McpOAuth(
        grant="authorization_code",
        preregistered_client_id="psych-agent",
        redirect_uris=("https://cb.test",),
    )
    assert spec.a2a_peers[0].scheme == "Token"
    assert spec.spawn is not None and spec.spawn.max_depth == 1
    assert spec.compaction is not None and spec.compaction.trigger_tokens == 10_000
    assert (spec.tasks_enabled, spec.components_enabled, spec.answer_style) == (
        True,
        True,
        "concise",
    )
    # Every grant is implemented (the MCP server's authorization_code OAuth too).
    assert validate(spec) == unsupported_features(spec) == []


def test_shared_registry_and_pre_registered_function() -> None:
    registry = ToolRegistry()
    registry.register(lookup_order, name="find_order")
    spec = AgentBuilder("a", registry=registry).model("m").tool(lookup_order).build()
    assert [t.name for t in spec.tools] == ["find_order"]
    assert len(registry) == 1
    other = AgentBuilder("b", registry=registry).model("m").tool(create_account, idempotent=True)
    assert other.registry is registry
    assert registry.get("create_account").idempotent is True


def test_tool_options_the_registration_contradicts_are_refused() -> None:
    # The function's registration decides its name, description and idempotence: a
    # builder asked for another name used to grant the registered one without a word.
    registry = ToolRegistry()
    registry.register(lookup_order, name="find_order", idempotent=True)
    builder = AgentBuilder("a", registry=registry).model("m")
    for options, named in (
        ({"name": "orders"}, "name 'orders'"),
        ({"description": "Other."}, "description 'Other.'"),
        ({"idempotent": False}, "idempotent=False"),
    ):
        with pytest.raises(SpecError, match=f"registered as tool 'find_order', so {named}"):
            builder.tool(lookup_order, **options)
    agreeing = builder.tool(lookup_order, name="find_order", idempotent=True).build()
    assert [t.name for t in agreeing.tools] == ["find_order"]
    with pytest.raises(SpecError, match="granted by name, so description, idempotent"):
        AgentBuilder("b").model("m").tool("lookup", description="Look.", idempotent=True)
    assert len(registry) == 1


def test_tool_options_reach_the_spec() -> None:
    spec = (
        AgentBuilder("a")
        .model("m")
        .tool(lookup_order, name="orders", description="Find orders.", interruptible=False)
        .build()
    )
    assert spec.tools == (CodeTool(name="orders", interruptible=False),)


def test_workflow_step_names_checked_by_the_model_at_build() -> None:
    builder = WorkflowBuilder("w").tool_step("s", "t").tool_step("s", "t")
    with pytest.raises(SpecError, match="more than once"):
        builder.build()


def test_workflow_without_steps_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="steps"):
        WorkflowBuilder("w").build()


def test_workflow_step_order_and_nesting() -> None:
    inner = WorkflowBuilder("inner").tool_step("only", "t")
    spec = (
        WorkflowBuilder("outer")
        .description("Outer.")
        .tool_step("z_first", "t")
        .workflow_step("nested", inner)
        .agent_step("a_last", AgentBuilder("g").model("m").build())
        .build()
    )
    assert [s.name for s in spec.steps] == ["z_first", "nested", "a_last"]
    assert isinstance(spec.steps[1], WorkflowStepRef)
    assert spec.steps[1].spec == inner.build()
    assert spec.description == "Outer."


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: AgentBuilder("a").mcp_server("fs", "https://mcp.test/mcp", allow="get*"), "allow"),
        (
            lambda: WorkflowBuilder("w").mcp_server("fs", "https://mcp.test/mcp", allow="get*"),
            "allow",
        ),
        (lambda: AgentBuilder("a").model("gpt-4o", fallbacks="gpt-4o-mini"), "fallbacks"),
    ],
    ids=["agent-allow", "workflow-allow", "fallbacks"],
)
def test_a_string_where_a_list_of_names_is_asked_is_refused(call: Any, field: str) -> None:
    # tuple("get*") is ('g', 'e', 't', '*'): an allow whose '*' granted every tool of the
    # server, and fallbacks of one-letter model ids, with no problem from validate.
    with pytest.raises(SpecError, match=rf"{field} is a list of names, not the string"):
        call()
