"""Fields the runtime does not implement yet are refused wherever they appear, by one table."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import psych_runtime.specs as specs
from psych_runtime.specs import (
    UNSUPPORTED_FIELDS,
    UNSUPPORTED_VALUES,
    A2APeer,
    AgentSpec,
    AgentStep,
    CompactionPolicy,
    McpOAuth,
    McpServer,
    ModelRef,
    Problem,
    SpawnEnvelope,
    SubagentRef,
    ToolStep,
    ValidationFailed,
    WorkflowSpec,
    WorkflowStepRef,
    spec_from_yaml,
    unsupported_features,
    validate,
)

SPECS_DIR = Path(specs.__file__).resolve().parent


def agent(name: str = "a", **fields: Any) -> AgentSpec:
    return AgentSpec(**{"name": name, "model": ModelRef(model="m"), **fields})


# A client-credentials server (implemented) that also names a field only the
# authorization_code grant uses (not implemented).
OAUTH_SERVER = McpServer(
    name="crm",
    url="https://crm.test",
    oauth=McpOAuth(
        grant="client_credentials",
        preregistered_client_id="psych-worker",
        client_secret_credential="crm_client_secret",
        cimd_url="https://psych.test/client.json",
    ),
)

# Each unsupported use inside an AgentSpec (its path there -> the fields that make it, and
# its key in the table).
AGENT_FIELDS: dict[str, tuple[dict[str, Any], str]] = {
    "mcp_servers[crm].oauth.cimd_url": ({"mcp_servers": [OAUTH_SERVER]}, "McpOAuth.cimd_url"),
}

# Where an AgentSpec can sit, and the path prefix its problems carry there.
PLACES: dict[str, tuple[Callable[[AgentSpec], AgentSpec | WorkflowSpec], str]] = {
    "root": (lambda inner: inner, ""),
    "subagent": (
        lambda inner: agent(subagents=[SubagentRef(name="h", description="d" * 20, spec=inner)]),
        "subagents[h].spec.",
    ),
    "grandchild": (
        lambda inner: agent(
            subagents=[
                SubagentRef(
                    name="c",
                    description="d" * 20,
                    spec=agent(
                        "c", subagents=[SubagentRef(name="g", description="d" * 20, spec=inner)]
                    ),
                )
            ]
        ),
        "subagents[c].spec.subagents[g].spec.",
    ),
    "agent_step": (
        lambda inner: WorkflowSpec(name="w", steps=[AgentStep(name="s", spec=inner)]),
        "steps[s].spec.",
    ),
    "nested_workflow": (
        lambda inner: WorkflowSpec(
            name="w",
            steps=[
                WorkflowStepRef(
                    name="n",
                    spec=WorkflowSpec(name="n", steps=[AgentStep(name="s", spec=inner)]),
                )
            ],
        ),
        "steps[n].spec.steps[s].spec.",
    ),
}


@pytest.mark.parametrize("place", sorted(PLACES))
@pytest.mark.parametrize("field", sorted(AGENT_FIELDS))
def test_unsupported_agent_field_is_refused_wherever_it_appears(field: str, place: str) -> None:
    build, prefix = PLACES[place]
    fields, key = AGENT_FIELDS[field]
    spec = build(agent("inner", **fields))
    problems = unsupported_features(spec)
    assert [p.path for p in problems] == [f"{prefix}{field}"]
    assert problems[0].message == UNSUPPORTED_FIELDS[key]
    assert "does not implement" in problems[0].message
    assert set(problems) <= set(validate(spec))


CLIENT_CREDENTIALS = McpOAuth(
    grant="client_credentials",
    preregistered_client_id="psych-worker",
    client_secret_credential="crm_client_secret",
)


def test_mcp_oauth_client_credentials_is_implemented() -> None:
    server = McpServer(name="crm", url="https://crm.test", oauth=CLIENT_CREDENTIALS)
    on_agent = agent(mcp_servers=[server])
    on_workflow = WorkflowSpec(
        name="w", mcp_servers=[server], steps=[ToolStep(name="t", tool="crm__get")]
    )
    assert unsupported_features(on_agent) == []
    assert unsupported_features(on_workflow) == []
    assert validate(on_agent) == []


def test_the_authorization_code_grant_and_its_fields_are_refused() -> None:
    oauth = McpOAuth(
        grant="authorization_code",
        cimd_url="https://psych.test/client.json",
        redirect_uris=("https://psych.test/callback",),
        application_type="web",
        client_name="crm agent",
    )
    server = McpServer(name="crm", url="https://crm.test", oauth=oauth)
    for spec in (
        agent(mcp_servers=[server]),
        WorkflowSpec(name="w", mcp_servers=[server], steps=[ToolStep(name="t", tool="crm__x")]),
    ):
        problems = unsupported_features(spec)
        assert [p.path for p in problems] == [
            "mcp_servers[crm].oauth.grant",
            "mcp_servers[crm].oauth.cimd_url",
            "mcp_servers[crm].oauth.application_type",
            "mcp_servers[crm].oauth.client_name",
            "mcp_servers[crm].oauth.redirect_uris",
        ]
        assert problems[0].message == UNSUPPORTED_VALUES["McpOAuth.grant"]["authorization_code"]
        assert problems[1].message == UNSUPPORTED_FIELDS["McpOAuth.cimd_url"]
        assert set(problems) <= set(validate(spec))


def test_client_credentials_needs_a_client_id_and_secret_and_no_bearer() -> None:
    server = McpServer(name="crm", url="https://crm.test", credential="crm_token", oauth=McpOAuth())
    problems = validate(agent(mcp_servers=[server]))
    assert [p.path for p in problems] == [
        "mcp_servers[crm].credential",
        "mcp_servers[crm].oauth.preregistered_client_id",
        "mcp_servers[crm].oauth.client_secret_credential",
    ]
    assert "either a bearer credential or oauth" in problems[0].message
    assert "client_credentials grant needs" in problems[1].message


def test_mcp_servers_are_implemented() -> None:
    server = McpServer(name="crm", url="https://crm.test")
    on_agent = agent(mcp_servers=[server])
    on_workflow = WorkflowSpec(
        name="w", mcp_servers=[server], steps=[ToolStep(name="t", tool="crm__get")]
    )
    assert unsupported_features(on_agent) == []
    assert unsupported_features(on_workflow) == []


def test_a2a_peers_are_implemented() -> None:
    # Issue 24 item 1: peers' skills are offered as tools (workflows/features/_a2a.py).
    spec = agent(a2a_peers=[A2APeer(name="peer", url="https://peer.test", allow=("x",))])
    assert unsupported_features(spec) == []
    assert validate(spec) == []


def test_defaults_and_explicit_defaults_are_not_refused() -> None:
    assert unsupported_features(agent()) == []
    explicit = agent(
        a2a_peers=[],
        mcp_servers=[],
        spawn=None,
        compaction=None,
        tasks_enabled=False,
        components_enabled=False,
    )
    assert unsupported_features(explicit) == []
    assert validate(explicit) == []


def test_every_use_is_reported_in_a_stable_order() -> None:
    everything = agent(
        **{k: v for fields, _ in AGENT_FIELDS.values() for k, v in fields.items()},
        subagents=[
            SubagentRef(name="h", description="d" * 20, spec=agent(mcp_servers=[OAUTH_SERVER]))
        ],
    )
    first = unsupported_features(everything)
    assert first == unsupported_features(everything)
    assert first == unsupported_features(AgentSpec.model_validate(everything.model_dump()))
    assert [p.path for p in first] == [
        "mcp_servers[crm].oauth.cimd_url",
        "subagents[h].spec.mcp_servers[crm].oauth.cimd_url",
    ]


def test_tasks_and_components_are_implemented() -> None:
    # Issue 10 item 4: both fields publish and run now (AgentRun offers their built-ins).
    spec = agent(tasks_enabled=True, components_enabled=True)
    assert unsupported_features(spec) == []
    assert validate(spec) == []


def test_a_document_using_an_unsupported_field_does_not_publish() -> None:
    spec = spec_from_yaml(
        "kind: agent\nname: a\nmodel: {model: m}\n"
        "mcp_servers: [{name: crm, url: 'https://crm.test', oauth: {grant: authorization_code}}]\n",
        source="a.yaml",
    )
    problems = validate(spec)
    why = UNSUPPORTED_VALUES["McpOAuth.grant"]["authorization_code"]
    assert problems == [Problem("mcp_servers[crm].oauth.grant", why)]
    assert "mcp_servers[crm].oauth.grant: the authorization_code grant is not implemented" in str(
        ValidationFailed(problems)
    )


def test_compaction_is_implemented_so_it_publishes() -> None:
    spec = agent(compaction=CompactionPolicy(trigger_tokens=1000))
    assert unsupported_features(spec) == []
    assert validate(spec) == []


def test_table_names_real_fields_of_spec_models() -> None:
    for key in UNSUPPORTED_FIELDS:
        model_name, _, field = key.partition(".")
        model = getattr(specs, model_name)
        assert field in model.model_fields, key


def test_unsupported_module_imports_nothing_a_workflow_sandbox_would_refuse() -> None:
    # The workflow calls this at Run admission, inside Temporal's sandbox.
    tree = ast.parse((SPECS_DIR / "_unsupported.py").read_text())
    imported = {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    } | {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert imported <= {"__future__", "collections", "types", "pydantic", "psych_runtime"}


def test_a_spec_nested_past_the_recursion_limit_is_walked_without_recursing() -> None:
    # The workflow calls this on Specs that were never validated (Run admission).
    spec = agent("leaf", mcp_servers=[OAUTH_SERVER])
    for _ in range(400):
        spec = agent(subagents=[SubagentRef(name="s", description="d" * 20, spec=spec)])
    (problem,) = unsupported_features(spec)
    assert problem.path == "subagents[s].spec." * 400 + "mcp_servers[crm].oauth.cimd_url"


def test_spawn_is_implemented() -> None:
    assert unsupported_features(agent(spawn=SpawnEnvelope(tools=("t",)))) == []
