"""MCP OAuth (client_credentials) at publish time: ``check_servers`` gets a token as a Run
would, against ``tests.mcp.oauth_server`` on loopback, and the client secret reaches only
the issuer the operator configured."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from psych_runtime.activities import LocalTokenStore, McpSettings, StaticSecretResolver
from psych_runtime.activities.mcp import check_servers, parse_oauth_issuers
from psych_runtime.specs import McpOAuth, McpServer, Scope, SpecError
from psych_runtime.workers import WorkerSettings
from tests.mcp.oauth_fixture import OAuthMcpServer, start_oauth_server

SECRET = "cc-secret-0123456789"
SCOPE = Scope(tenant="acme")
SECRETS = StaticSecretResolver({"crm_secret": SECRET})


@pytest.fixture(scope="module")
def oauth_server() -> Iterator[OAuthMcpServer]:
    server = start_oauth_server("streamable-http", {"psych-worker": SECRET})
    yield server
    server.stop()


def crm(server: OAuthMcpServer) -> McpServer:
    oauth = McpOAuth(preregistered_client_id="psych-worker", client_secret_credential="crm_secret")
    return McpServer(name="crm", url=server.url, oauth=oauth)


def requests_made(server: OAuthMcpServer) -> int:
    return len(server.state()["token_requests"])


async def test_a_check_gets_a_token_from_the_configured_issuer(
    oauth_server: OAuthMcpServer,
) -> None:
    before = requests_made(oauth_server)
    settings = McpSettings(oauth_issuers={"crm_secret": oauth_server.issuer})
    answers = await check_servers([crm(oauth_server)], SCOPE, SECRETS, settings)
    assert answers == {"crm": None}
    state = oauth_server.state()
    assert state["token_requests"][before:] == [{"client_id": "psych-worker", "ok": True}]
    # The token was bound to the MCP server (RFC 8707) and used on it.
    issued = state["issued"][-1]
    assert issued["resource"] == oauth_server.url
    assert issued["token"] in state["bearers"]


async def test_without_a_configured_issuer_the_secret_is_never_sent(
    oauth_server: OAuthMcpServer,
) -> None:
    before = requests_made(oauth_server)
    answers = await check_servers([crm(oauth_server)], SCOPE, SECRETS, McpSettings())
    reason = answers["crm"]
    assert reason is not None
    assert "no authorization server is configured for credential 'crm_secret'" in reason
    assert requests_made(oauth_server) == before


async def test_a_server_pointing_at_another_issuer_is_refused(
    oauth_server: OAuthMcpServer,
) -> None:
    """The MCP server names its authorization server; the operator named another one for
    this secret: the flow stops before any token request."""
    before = requests_made(oauth_server)
    settings = McpSettings(oauth_issuers={"crm_secret": "https://auth.elsewhere.test"})
    answers = await check_servers([crm(oauth_server)], SCOPE, SECRETS, settings)
    reason = answers["crm"]
    assert reason is not None and "issuer" in reason.lower(), reason
    assert SECRET not in reason
    assert requests_made(oauth_server) == before


async def test_a_wrong_secret_is_reported_without_its_value(
    oauth_server: OAuthMcpServer,
) -> None:
    wrong = "not-the-secret-987654"
    settings = McpSettings(oauth_issuers={"crm_secret": oauth_server.issuer})
    resolver = StaticSecretResolver({"crm_secret": wrong})
    answers = await check_servers([crm(oauth_server)], SCOPE, resolver, settings)
    reason = answers["crm"]
    assert reason is not None
    assert wrong not in reason
    assert oauth_server.state()["token_requests"][-1] == {
        "client_id": "psych-worker",
        "ok": False,
    }


def test_the_issuers_are_read_from_the_environment(tmp_path: Path) -> None:
    env = {
        "PSYCH_MCP_OAUTH_ISSUERS": " crm_secret=https://auth.crm.test , erp=http://10.0.0.5:8080/t",
        "PSYCH_TOKEN_DIR": str(tmp_path / "tokens"),
    }
    settings = WorkerSettings.from_env(env)
    assert settings.mcp.oauth_issuers == {
        "crm_secret": "https://auth.crm.test",
        "erp": "http://10.0.0.5:8080/t",
    }
    assert isinstance(settings.tokens, LocalTokenStore)
    assert settings.tokens.root == tmp_path / "tokens"
    assert parse_oauth_issuers("") == {}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("crm_secret", "expected <credential name>=<issuer URL>"),
        ("=https://a.test", "expected <credential name>=<issuer URL>"),
        ("a=https://a.test,a=https://b.test", "given twice"),
        ("a=ftp://a.test", "http(s) URL"),
        ("a=auth.test", "http(s) URL"),
    ],
)
def test_a_malformed_issuer_list_names_the_entry(text: str, problem: str) -> None:
    with pytest.raises(SpecError, match="PSYCH_MCP_OAUTH_ISSUERS entry") as caught:
        parse_oauth_issuers(text)
    assert problem in str(caught.value)
