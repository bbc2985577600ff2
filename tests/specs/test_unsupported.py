"""Fields the runtime does not implement yet are refused wherever they appear, by one table."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

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
    SpawnEnvelope,
    SubagentRef,
    ToolStep,
    WorkflowSpec,
    unsupported_features,
    validate,
)

SPECS_DIR = Path(specs.__file__).resolve().parent


def agent(name: str = "a", **fields: Any) -> AgentSpec:
    return AgentSpec(**{"name": name, "model": ModelRef(model="m"), **fields})


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


def test_tasks_and_components_are_implemented() -> None:
    # Issue 10 item 4: both fields publish and run now (AgentRun offers their built-ins).
    spec = agent(tasks_enabled=True, components_enabled=True)
    assert unsupported_features(spec) == []
    assert validate(spec) == []


def test_compaction_is_implemented_so_it_publishes() -> None:
    spec = agent(compaction=CompactionPolicy(trigger_tokens=1000))
    assert unsupported_features(spec) == []
    assert validate(spec) == []


def test_table_names_real_fields_of_spec_models() -> None:
    for key in [*UNSUPPORTED_FIELDS, *UNSUPPORTED_VALUES]:
        model_name, _, field = key.partition(".")
        model = getattr(specs, model_name)
        assert field in model.model_fields, key


AUTHORIZATION_CODE = McpOAuth(
    grant="authorization_code",
    preregistered_client_id="psych-agent",
    cimd_url="https://psych.test/client.json",
    redirect_uris=("https://psych.test/oauth/callback",),
    application_type="web",
    client_name="crm agent",
    allow_dynamic_registration=False,
)


def test_the_authorization_code_grant_and_its_fields_publish_and_run() -> None:
    # Issue 25 item 3: a person's consent suspends the Run (activities/mcp/_consent.py).
    server = McpServer(name="crm", url="https://crm.test", oauth=AUTHORIZATION_CODE)
    for spec in (
        agent(mcp_servers=[server]),
        agent(
            subagents=[
                SubagentRef(name="h", description="d" * 20, spec=agent(mcp_servers=[server]))
            ]
        ),
        WorkflowSpec(name="w", mcp_servers=[server], steps=[ToolStep(name="t", tool="crm__x")]),
        WorkflowSpec(name="w", steps=[AgentStep(name="s", spec=agent(mcp_servers=[server]))]),
    ):
        assert unsupported_features(spec) == []
        assert validate(spec) == []


def test_the_authorization_code_grant_needs_a_client_and_a_redirect_uri() -> None:
    # Neither client field: a client registered at run time, unless that is turned off.
    oauth = McpOAuth(
        grant="authorization_code",
        redirect_uris=("https://u:p@cb.test/x",),
        allow_dynamic_registration=False,
    )
    server = McpServer(name="crm", url="https://crm.test", oauth=oauth)
    problems = validate(agent(mcp_servers=[server]))
    assert [p.path for p in problems] == [
        "mcp_servers[crm].oauth.preregistered_client_id",
        "mcp_servers[crm].oauth.redirect_uris[0]",
    ]
    assert problems[0].message == (
        "the authorization_code grant needs a client: preregistered_client_id, or cimd_url "
        "(a client-id metadata document), or allow_dynamic_registration: true (a client "
        "registered with the authorization server at run time); allow_dynamic_registration "
        "is false"
    )
    # Allowed (the default): the client is registered at run time; only the URI is wrong.
    allowed = oauth.model_copy(update={"allow_dynamic_registration": True})
    registering = server.model_copy(update={"oauth": allowed})
    assert validate(agent(mcp_servers=[registering])) == problems[1:]
    # A secret belongs to a preregistered client, never to one registered at run time.
    secret = allowed.model_copy(update={"client_secret_credential": "crm_secret"})
    (wrong, _) = validate(agent(mcp_servers=[server.model_copy(update={"oauth": secret})]))
    assert wrong.path == "mcp_servers[crm].oauth.client_secret_credential"
    assert "a dynamically registered client gets its own" in wrong.message
    bare = McpServer(
        name="crm",
        url="https://crm.test",
        oauth=McpOAuth(grant="authorization_code", cimd_url="https://psych.test/c.json"),
    )
    (missing,) = validate(agent(mcp_servers=[bare]))
    assert missing.path == "mcp_servers[crm].oauth.redirect_uris"
    assert "needs a redirect URI" in missing.message


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


def test_spawn_is_implemented() -> None:
    assert unsupported_features(agent(spawn=SpawnEnvelope(tools=("t",)))) == []
