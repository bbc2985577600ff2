"""MCP OAuth (client_credentials) at publish time: ``check_servers`` gets a token as a Run
would, against ``tests.mcp.oauth_server`` on loopback, and the client secret reaches only
the issuer the operator configured."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from psych_runtime.activities import (
    LocalTokenStore,
    McpSettings,
    StaticSecretResolver,
    TokenKey,
)
from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.mcp import McpActivities, check_servers, parse_oauth_issuers
from psych_runtime.activities.mcp._held import HeldRedactor, TokensHeld
from psych_runtime.activities.mcp._oauth import OAuthUnavailable, StoredTokens
from psych_runtime.specs import McpOAuth, McpServer, Scope, SpecError
from psych_runtime.workers import WorkerSettings
from tests.activities.test_mcp import call
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


async def test_a_sealed_record_is_said_to_be_stored_not_held(
    oauth_server: OAuthMcpServer, tmp_path: Path
) -> None:
    # Was "a token is held": the check holds no payload keys, so a record sealed with other
    # keys (here garbage behind the seal's prefix) cannot be told from a usable one.
    settings = McpSettings(oauth_issuers={"crm_secret": oauth_server.issuer})
    key = TokenKey("acme", None, oauth_server.issuer, "psych-worker", oauth_server.url)
    store = LocalTokenStore(tmp_path)
    await store.put(key, b"psych-blob-v1\0sealed with keys this check does not hold")
    said: dict[str, str] = {}
    answers = await check_servers(
        [crm(oauth_server)], SCOPE, SECRETS, settings, tokens=store, oauth=said
    )
    assert answers == {"crm": None}
    assert said["crm"].startswith(
        "a token record is stored for tenant 'acme', sealed with the payload keys, which this "
        "check does not hold: whether it opens and holds a token the server accepts is not "
        "checked here"
    ), said
    assert await store.get(key) == b"psych-blob-v1\0sealed with keys this check does not hold"


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


def test_an_mcp_server_url_with_a_query_names_its_issuer() -> None:
    # A dynamically registered client's issuer is named under the MCP server's URL, which
    # may carry a query (before the fix: split at its first "=", "must be an http(s) URL").
    env = {"PSYCH_MCP_OAUTH_ISSUERS": "https://crm.test/mcp?space=acme=https://auth.crm.test"}
    settings = WorkerSettings.from_env(env)
    assert settings.mcp.oauth_issuers == {
        "https://crm.test/mcp?space=acme": "https://auth.crm.test"
    }


def test_names_holding_commas_are_written_in_the_json_form() -> None:
    # A credential name may hold a comma (the Spec bounds only its length), and so may a
    # client id or an MCP server URL. Before the fix: no way to write one (split there).
    text = '{"crm,eu": "https://auth.eu.test", "https://crm.test/mcp?ids=1,2": "https://a.test"}'
    settings = WorkerSettings.from_env({"PSYCH_MCP_OAUTH_ISSUERS": f"  {text}"})
    assert settings.mcp.oauth_issuers == {
        "crm,eu": "https://auth.eu.test",
        "https://crm.test/mcp?ids=1,2": "https://a.test",
    }


COMMA = "a name holding a comma is written in the JSON form"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        # A name cut at its comma: the error says how to write it (before the fix, only
        # "expected <credential name>=<issuer URL>").
        ("crm,eu=https://auth.test", "entry 'crm': expected <credential name>=<issuer URL> ("),
        ("https://crm.test/mcp?ids=1,2=https://a.test", "the issuer must be an http(s) URL ("),
        (
            '{"a": "https://a.test", "a": "https://b.test"}',
            "entry 'a': credential 'a' is given twice",
        ),
        ('{"a": 1}', "entry 'a': the issuer must be a string"),
        ('{"a": {"b": "https://a.test"}}', "entry 'a': the issuer must be a string"),
        ('{" ": "https://a.test"}', "entry ' ': the name is empty"),
        ('{"a": "https://a.test/?realm=acme"}', "no query or fragment (RFC 8414)"),
        ('{"a": "ftp://a.test"}', "entry 'a': the issuer must be an http(s) URL"),
        ("crm_secret", "expected <credential name>=<issuer URL>"),
        ("=https://a.test", "expected <credential name>=<issuer URL>"),
        ("a=https://a.test,a=https://b.test", "given twice"),
        ("a=ftp://a.test", "http(s) URL"),
        ("a=auth.test", "http(s) URL"),
        # An issuer has no query (RFC 8414); one whose query held "=https://" was cut there
        # and taken silently (before the fix: {"a=https://auth.test/?next": "https://x.test"}).
        ("a=https://auth.test/?next=https://x.test", "no query or fragment (RFC 8414)"),
        ("a=https://auth.test/?realm=acme", "no query or fragment (RFC 8414)"),
        ("a=https://auth.test/#top", "no query or fragment (RFC 8414)"),
    ],
)
def test_a_malformed_issuer_list_names_the_entry(text: str, problem: str) -> None:
    with pytest.raises(SpecError, match="PSYCH_MCP_OAUTH_ISSUERS entry") as caught:
        parse_oauth_issuers(text)
    assert problem in str(caught.value)
    if problem.endswith("("):
        assert COMMA in str(caught.value)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"a": "https://a.test"', "starts with '{': its JSON form does not parse"),
        ("{}x", "starts with '{': its JSON form does not parse"),
    ],
)
def test_a_json_issuer_list_that_does_not_parse_says_so(text: str, problem: str) -> None:
    with pytest.raises(SpecError, match="PSYCH_MCP_OAUTH_ISSUERS") as caught:
        parse_oauth_issuers(text)
    assert problem in str(caught.value)


KEY = TokenKey("acme", None, "https://auth.test", "psych-worker", "https://crm.test/mcp")


async def test_stored_tokens_keep_their_key_and_absolute_expiry(tmp_path: Path) -> None:
    store = LocalTokenStore(tmp_path)
    held = TokensHeld()
    storage = StoredTokens(store, KEY, held)
    assert await storage.get_tokens() is None
    await storage.set_tokens(OAuthToken(access_token="tok-1", expires_in=3600))
    again = await StoredTokens(store, KEY, TokensHeld()).get_tokens()
    assert again is not None and again.access_token == "tok-1"
    assert again.expires_in is not None and 3590 <= again.expires_in <= 3600
    assert "tok-1" not in HeldRedactor({}, held, KEY)("sent back: tok-1")
    # A record read under another key (a store that mixed records up) is not used.
    other = dataclasses.replace(KEY, issuer="https://other.test")
    record = await store.get(KEY)
    assert record is not None
    await store.put(other, record)
    assert await StoredTokens(store, other, TokensHeld()).get_tokens() is None


async def test_a_key_is_held_while_a_storage_or_redactor_of_it_lives() -> None:
    held = TokensHeld()
    storage = StoredTokens(None, KEY, held)
    await storage.set_tokens(OAuthToken(access_token="tok-1", refresh_token="ref-1"))
    redact = HeldRedactor({}, held, KEY)
    del storage
    gc.collect()
    assert len(held) == 1
    assert "tok-1" not in redact("sent back: tok-1") and "ref-1" not in redact("ref-1")
    # A token the key gets later (a new session's, a refresh) reaches the older redactor.
    later = StoredTokens(None, KEY, held)
    await later.set_tokens(OAuthToken(access_token="tok-2"))
    assert "tok-2" not in redact("sent back: tok-2")
    del later, redact
    gc.collect()
    assert len(held) == 0
    # A worker that served many principals keeps none of the keys nothing uses any more.
    for index in range(50):
        key = dataclasses.replace(KEY, principal=f"user-{index}")
        await StoredTokens(None, key, held).set_tokens(OAuthToken(access_token=f"t-{index}"))
    gc.collect()
    assert len(held) == 0


async def test_an_unreadable_record_is_as_absent_and_the_next_token_replaces_it(
    tmp_path: Path,
) -> None:
    store = LocalTokenStore(tmp_path)
    await store.put(KEY, b'{"key": ["acme"')  # cut short
    storage = StoredTokens(store, KEY, TokensHeld())
    assert await storage.get_tokens() is None
    await storage.set_tokens(OAuthToken(access_token="tok-new"))
    again = await StoredTokens(store, KEY, TokensHeld()).get_tokens()
    assert again is not None and again.access_token == "tok-new"


async def test_an_expired_token_is_handed_out_only_with_a_refresh_token(tmp_path: Path) -> None:
    store = LocalTokenStore(tmp_path)
    storage = StoredTokens(store, KEY, TokensHeld())
    await storage.set_tokens(OAuthToken(access_token="tok-old", expires_in=0))
    assert await storage.get_tokens() is None
    await storage.set_tokens(
        OAuthToken(access_token="tok-old", expires_in=0, refresh_token="ref-1")
    )
    expired = await storage.get_tokens()
    assert expired is not None and expired.refresh_token == "ref-1"
    assert expired.expires_in == 0


async def test_without_a_store_a_token_lives_in_the_storage_only(tmp_path: Path) -> None:
    storage = StoredTokens(None, KEY, TokensHeld())
    await storage.set_tokens(OAuthToken(access_token="tok-check"))
    token = await storage.get_tokens()
    assert token is not None and token.access_token == "tok-check"
    assert os.listdir(tmp_path) == []
    assert await storage.get_client_info() is None
    with pytest.raises(OAuthUnavailable, match="registered dynamically for a server whose Spec"):
        await storage.set_client_info(OAuthClientInformationFull(client_id="x", redirect_uris=None))


async def test_a_token_refused_mid_session_is_an_error_naming_the_refusal_asked_once(
    oauth_server: OAuthMcpServer, tmp_path: Path
) -> None:
    """The server stops taking the token and the authorization server stops knowing the
    client: the call fails saying the token request was refused (not the SDK's "Connection
    closed"), after one token request, and the Run's next call asks again (no loop)."""
    settings = McpSettings(oauth_issuers={"crm_secret": oauth_server.issuer})
    mcp = McpActivities(
        blobs=LocalBlobStore(tmp_path / "blobs"),
        secrets=SECRETS,
        settings=settings,
        tokens=LocalTokenStore(tmp_path / "tokens"),
    )
    try:
        assert (await call(mcp, crm(oauth_server), "whoami", {})).status == "ok"
        oauth_server.revoke_all()
        oauth_server.set_clients({})
        before = requests_made(oauth_server)
        refused = await call(mcp, crm(oauth_server), "whoami", {})
        assert refused.status == "error"
        assert refused.content.startswith("MCP server 'crm', tool 'whoami': ")
        assert "getting an OAuth token failed" in refused.content, refused.content
        assert "invalid_client" in refused.content
        assert SECRET not in refused.content
        assert requests_made(oauth_server) - before == 1
    finally:
        oauth_server.set_clients({"psych-worker": SECRET})
        await mcp.aclose()


async def test_a_token_refused_as_soon_as_it_is_issued_is_an_error_naming_the_refusal(
    oauth_server: OAuthMcpServer, tmp_path: Path
) -> None:
    """The MCP server refuses every token the authorization server issues (expired on
    arrival): a call's error says the server refused the token just obtained, with the
    server's ``error``, not the SDK's "Server returned an error response"; and once tokens
    are good again the session's next call works (the refusal is not blamed later)."""
    settings = McpSettings(oauth_issuers={"crm_secret": oauth_server.issuer})
    mcp = McpActivities(
        blobs=LocalBlobStore(tmp_path / "blobs"),
        secrets=SECRETS,
        settings=settings,
        tokens=LocalTokenStore(tmp_path / "tokens"),
    )
    try:
        assert (await call(mcp, crm(oauth_server), "whoami", {})).status == "ok"
        oauth_server.revoke_all()
        oauth_server.set_lifetime(0)
        refused = await call(mcp, crm(oauth_server), "whoami", {})
        assert refused.status == "error"
        assert refused.content == (
            "MCP server 'crm', tool 'whoami': the MCP server refused the OAuth token just "
            "obtained for it: HTTP 401 (invalid_token) (a token expired on arrival, or issued "
            "for another resource or scope)"
        ), refused.content
        oauth_server.set_lifetime(3600)
        assert (await call(mcp, crm(oauth_server), "whoami", {})).status == "ok"
    finally:
        oauth_server.set_lifetime(3600)
        await mcp.aclose()


async def test_a_malformed_token_response_is_named_without_its_content(
    oauth_server: OAuthMcpServer, tmp_path: Path
) -> None:
    """The token endpoint answers 200 with something that is no OAuth token response (a
    token under another name): the call's error names what is wrong with it, field by
    field, and none of the body, so no part of the credential it carries reaches the
    error (history)."""
    settings = McpSettings(oauth_issuers={"crm_secret": oauth_server.issuer})
    mcp = McpActivities(
        blobs=LocalBlobStore(tmp_path / "blobs"),
        secrets=SECRETS,
        settings=settings,
        tokens=LocalTokenStore(tmp_path / "tokens"),
    )
    leaked = "tok-LEAK-0123456789abcdef"
    oauth_server.set_token_reply(200, json.dumps({"token": leaked, "token_type": "Bearer"}))
    try:
        refused = await call(mcp, crm(oauth_server), "whoami", {})
    finally:
        oauth_server.clear_token_reply()
        await mcp.aclose()
    assert refused.status == "error"
    assert refused.content == (
        "MCP server 'crm', tool 'whoami': getting an OAuth token failed: the authorization "
        "server's token response is not an OAuth token response (access_token: Field required)"
    ), refused.content
    assert "tok-LEAK" not in refused.content
