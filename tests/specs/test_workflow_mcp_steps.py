"""A workflow's tool step names an MCP tool as the model sees it (SEMANTICS, Workflows and
MCP; ``specs/_mcp_tool_names.py``): ``<server>__<tool>`` with each part sanitised. From an
audit of WorkflowRun: validation matched the server's raw name, so a server named
``my.tools`` could not be used from a step at all: ``my.tools__echo`` was published and
failed the Run ("unknown tool"), ``my_tools__echo``, the name offered, was refused."""

from __future__ import annotations

from psych_runtime.specs import McpServer, ToolStep, WorkflowSpec, sanitise_tool_name, validate


def flow(*tools: str, **server: object) -> WorkflowSpec:
    return WorkflowSpec(
        name="w",
        mcp_servers=[McpServer(name="my.tools", url="http://127.0.0.1:9/mcp", **server)],
        steps=[ToolStep(name=f"s{at}", tool=tool) for at, tool in enumerate(tools)],
    )


def test_a_step_names_a_dotted_servers_tool_as_the_model_sees_it() -> None:
    assert sanitise_tool_name("my.tools") == "my_tools"
    assert validate(flow("my_tools__echo", "my_tools__look_up-2")) == []


def test_a_step_naming_a_name_never_offered_is_refused_with_the_form_to_use() -> None:
    problems = validate(flow("my.tools__echo", "my_tools__look.up"))
    assert [p.path for p in problems] == ["steps[s0].tool", "steps[s1].tool"]
    assert problems[0].message == (
        "'my.tools__echo' is not one of the workflow's tools: MCP server 'my.tools' offers "
        "its tools as my_tools__<tool>, every character of <tool> outside [a-zA-Z0-9_-] "
        "written _"
    )
    assert problems[1].message.startswith("'my_tools__look.up' is not one of the workflow's")


def test_a_step_naming_a_tool_the_servers_allow_never_grants_is_refused() -> None:
    # From the same audit: `allow` was not read at publish, and the Run failed at the
    # step ("unknown tool").
    spec = flow(
        "my_tools__write_file",
        "my_tools__read_file",
        "my_tools__look_up",
        "my_tools__lookup",
        "my_tools__write-0123abcd",  # cut or suffixed: which tool it is is not known
        allow=["look.up", "read_*"],
    )
    (write, lookup) = validate(spec)
    assert (write.path, lookup.path) == ("steps[s0].tool", "steps[s3].tool")
    assert write.message == (
        "'my_tools__write_file' is never callable: its MCP server does not allow it "
        "('my.tools' allows only look.up, read_*)"
    )
