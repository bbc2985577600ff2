"""An MCP server's OAuth client URLs at publish: a ``cimd_url`` the SDK would refuse at run
time (it is the client id: https with a path), and a redirect URI no authorization server
takes (not an absolute http(s) URL, or with a fragment), are problems naming the field,
not a Run's failure with the SDK's ValueError or a pydantic ValidationError."""

from __future__ import annotations

import pytest

from psych_runtime.specs import AgentBuilder, McpOAuth, validate

CALLBACK = "https://psych.test/oauth/callback"


def problems_of(oauth: McpOAuth) -> list[tuple[str, str]]:
    spec = AgentBuilder("a").model("m").mcp_server("crm", "https://crm.test/mcp", oauth=oauth)
    return [(problem.path, problem.message) for problem in validate(spec.build())]


@pytest.mark.parametrize(
    "url",
    ["http://client.test/meta.json", "https://client.test", "https://client.test/", "client.json"],
)
def test_a_client_id_metadata_document_url_must_be_https_with_a_path(url: str) -> None:
    oauth = McpOAuth(grant="authorization_code", cimd_url=url, redirect_uris=(CALLBACK,))
    ((path, message),) = problems_of(oauth)
    assert path == "mcp_servers[crm].oauth.cimd_url"
    assert "an https URL with a host and a path" in message and repr(url) in message


@pytest.mark.parametrize(
    ("uri", "wrong"),
    [
        ("not a url", "an absolute http(s) URL with a host"),
        ("/oauth/callback", "an absolute http(s) URL with a host"),
        ("psych://callback", "an absolute http(s) URL with a host"),
        ("https://psych.test/oauth/callback#done", "a URL without a fragment"),
    ],
)
def test_a_redirect_uri_must_be_an_absolute_http_url_without_a_fragment(
    uri: str, wrong: str
) -> None:
    oauth = McpOAuth(
        grant="authorization_code", preregistered_client_id="psych", redirect_uris=(CALLBACK, uri)
    )
    ((path, message),) = problems_of(oauth)
    assert path == "mcp_servers[crm].oauth.redirect_uris[1]"
    assert f"a redirect URI is {wrong}" in message and repr(uri) in message


def test_good_urls_publish() -> None:
    oauth = McpOAuth(
        grant="authorization_code",
        cimd_url="https://psych.test/oauth/client.json",
        redirect_uris=(CALLBACK, "http://127.0.0.1:8765/oauth/callback"),
    )
    assert problems_of(oauth) == []
