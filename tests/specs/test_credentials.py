"""``validate`` reports credentials written into a Spec instead of named, with their path."""

from __future__ import annotations

from typing import Any

import pytest

from psych_runtime.specs import (
    A2APeer,
    AgentSpec,
    HttpTool,
    McpOAuth,
    McpServer,
    ModelRef,
    Problem,
    ToolStep,
    WorkflowSpec,
    validate,
)


def agent(**fields: Any) -> AgentSpec:
    return AgentSpec(**{"name": "a", "model": ModelRef(model="m"), **fields})


def http(url: str = "https://api.test/x", **fields: Any) -> HttpTool:
    schema = {"type": "object", "properties": {"id": {"type": "string"}, "page": {}}}
    return HttpTool(name="t", description="d", url=url, input_schema=schema, **fields)


def credential_problems(spec: AgentSpec | WorkflowSpec) -> list[Problem]:
    return [p for p in validate(spec) if "credential" in p.message]


@pytest.mark.parametrize(
    ("url", "shape"),
    [
        ("https://alice:s3cret@api.test/orders/{id}", "user:password@"),
        ("https://ghp_abcdef0123456789@api.test/orders", "user@"),
        ("http://u:p@127.0.0.1:8080/", "user:password@"),
    ],
)
def test_userinfo_in_an_http_tool_url(url: str, shape: str) -> None:
    (problem,) = credential_problems(agent(tools=[http(url)]))
    assert problem.path == "tools[t].url"
    assert shape in problem.message
    assert "name a credential instead (`credential`)" in problem.message
    assert "s3cret" not in problem.message and "ghp_" not in problem.message


@pytest.mark.parametrize(
    "param",
    [
        "api_key",
        "apikey",
        "API-KEY",
        "access_token",
        "token",
        "key",
        "secret",
        "client_secret",
        "password",
        "stripe_api_key",
        "sig",
    ],
)
def test_key_like_query_parameter_literal(param: str) -> None:
    spec = agent(tools=[http(f"https://api.test/orders/{{id}}?page={{page}}&{param}=abc123")])
    (problem,) = credential_problems(spec)
    assert problem.path == "tools[t].url"
    assert f"query parameter {param!r}" in problem.message
    assert "abc123" not in problem.message


@pytest.mark.parametrize(
    "url",
    [
        "https://api.test/orders/{id}?token={page}",  # filled from the call, not a literal
        "https://api.test/orders?key=",  # nothing written
        "https://api.test/orders?page_token=abc&sort=key&monkey=1&limit=10",
        "https://api.test/users/alice@example.com",  # an @ in the path is not userinfo
    ],
)
def test_urls_without_literal_credentials_pass(url: str) -> None:
    assert credential_problems(agent(tools=[http(url)])) == []


@pytest.mark.parametrize(
    "header",
    [
        "X-Api-Key",
        "api-key",
        "X-Auth-Token",
        "X-Access-Token",
        "Private-Token",
        "X-Client-Secret",
        "Ocp-Apim-Subscription-Key",
        "X-Session",
    ],
)
def test_key_like_literal_header(header: str) -> None:
    spec = agent(tools=[http(headers={"Accept": "application/json", header: "abc123"})])
    (problem,) = credential_problems(spec)
    assert problem.path == f"tools[t].headers[{header}]"
    assert "name a credential instead" in problem.message
    assert "abc123" not in problem.message


def test_header_carrying_an_auth_scheme_under_any_name() -> None:
    spec = agent(tools=[http(headers={"X-Upstream": "Bearer abc123"})])
    (problem,) = credential_problems(spec)
    assert problem.path == "tools[t].headers[X-Upstream]"


def test_ordinary_headers_pass() -> None:
    headers = {"Accept": "application/json", "Idempotency-Key": "k1", "User-Agent": "psych"}
    assert validate(agent(tools=[http(headers=headers)])) == []


def test_mcp_and_a2a_urls_are_checked_too() -> None:
    spec = agent(
        mcp_servers=[
            McpServer(name="crm", url="https://crm.test/mcp?api_key=abc"),
            McpServer(
                name="docs",
                url="https://docs.test/mcp",
                oauth=McpOAuth(
                    cimd_url="https://me:pw@id.test/client.json",
                    preregistered_client_id="psych",
                    client_secret_credential="docs_secret",
                ),
            ),
        ],
        a2a_peers=[A2APeer(name="peer", url="https://bob:pw@peer.test")],
    )
    assert sorted(p.path for p in credential_problems(spec)) == [
        "a2a_peers[peer].url",
        "mcp_servers[crm].url",
        "mcp_servers[docs].oauth.cimd_url",
    ]
    workflow = WorkflowSpec(
        name="w",
        mcp_servers=[McpServer(name="crm", url="https://crm.test/mcp?token=abc")],
        tools=[http("https://x:y@api.test/")],
        steps=[ToolStep(name="s", tool="t")],
    )
    assert sorted(p.path for p in credential_problems(workflow)) == [
        "mcp_servers[crm].url",
        "tools[t].url",
    ]


def test_the_credential_mechanism_itself_passes() -> None:
    spec = agent(tools=[http(credential="payments-api-key")])
    assert validate(spec) == []
