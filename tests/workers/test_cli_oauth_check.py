"""``psych validate --check-connections`` of a server behind OAuth with a person's consent
(``authorization_code``), against ``tests.mcp.consent_server`` on loopback: per server,
whether the workers' token store holds a token for the checked Scope, and what a person
must do if not. A missing token is no problem (the first Run asks for consent); the check
writes nothing to the store.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from mcp.client.auth import PKCEParameters
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from mcp.shared.auth_utils import resource_url_from_server_url

from psych_runtime.activities.mcp._consent import ConsentProvider
from psych_runtime.activities.mcp._held import TokensHeld
from psych_runtime.activities.mcp._oauth import OAuthClients, StoredTokens
from psych_runtime.activities.mcp._told import ForServer
from psych_runtime.activities.tokens import LocalTokenStore, TokenKey
from psych_runtime.specs import McpOAuth, McpServer, Scope
from psych_runtime.workers.cli import main
from tests.forking import client as forking
from tests.mcp.oauth_fixture import OAuthMcpServer, start_oauth_server

CLIENT = "psych-agent"
REDIRECT = "http://127.0.0.1:9/oauth/callback"
"""Never followed here: the test reads the code from the redirect itself."""


@pytest.fixture
def consent_server() -> Iterator[OAuthMcpServer]:
    server = start_oauth_server(
        "streamable-http", {CLIENT: REDIRECT}, module="tests.mcp.consent_server"
    )
    yield server
    server.stop()


@pytest.fixture
def registering_server() -> Iterator[OAuthMcpServer]:
    """The consent server with dynamic client registration (no client registered yet)."""
    server = start_oauth_server(
        "streamable-http", {}, module="tests.mcp.consent_server", extra=("--registration",)
    )
    yield server
    server.stop()


def consented_token(server: OAuthMcpServer) -> OAuthToken:
    """A token a person's consent got (the authorize redirect's code, exchanged)."""
    pkce = PKCEParameters.generate()
    resource = resource_url_from_server_url(server.url)
    with httpx.Client(timeout=30) as http:
        answer = http.get(
            f"{server.issuer}/authorize",
            params={
                "response_type": "code",
                "client_id": CLIENT,
                "redirect_uri": REDIRECT,
                "state": "s",
                "code_challenge": pkce.code_challenge,
                "code_challenge_method": "S256",
                "resource": resource,
            },
        )
        assert answer.status_code == 302, answer.text
        code = parse_qs(urlsplit(answer.headers["location"]).query)["code"][0]
        token = http.post(
            f"{server.issuer}/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": REDIRECT,
                "client_id": CLIENT,
                "code_verifier": pkce.code_verifier,
                "resource": resource,
            },
        )
        assert token.status_code == 200, token.text
    return OAuthToken.model_validate(token.json())


def spec_file(tmp_path: Path, server: OAuthMcpServer) -> Path:
    spec = {
        "kind": "agent",
        "name": "checked",
        "model": {"model": "m"},
        "mcp_servers": [
            {
                "name": "crm",
                "url": server.url,
                "oauth": {
                    "grant": "authorization_code",
                    "preregistered_client_id": CLIENT,
                    "redirect_uris": [REDIRECT],
                },
            }
        ],
    }
    path = tmp_path / "checked.json"
    path.write_text(json.dumps(spec))
    return path


def oauth_lines(file: Path, err: str) -> list[str]:
    prefix = f"{file}: mcp server 'crm' ("
    return [line.partition(") oauth: ")[2] for line in err.splitlines() if line.startswith(prefix)]


def test_check_connections_says_whether_a_token_is_held_and_what_to_do(
    tmp_path: Path,
    consent_server: OAuthMcpServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tokens = tmp_path / "tokens"
    monkeypatch.setenv("PSYCH_TOKEN_DIR", str(tokens))
    monkeypatch.delenv("PSYCH_BLOB_URL", raising=False)
    monkeypatch.setenv("PSYCH_MCP_OAUTH_ISSUERS", f"{CLIENT}={consent_server.issuer}")
    file = spec_file(tmp_path, consent_server)
    argv = ["validate", str(file), "--check-connections", "--tenant", "acme"]

    # None held: valid (the first Run asks), and the person's part is said.
    assert main(argv) == 0
    (said,) = oauth_lines(file, capsys.readouterr().err)
    assert said.startswith("no usable token is held for tenant 'acme': a person must consent.")
    assert f"the redirect to {REDIRECT} must be served by psych oauth-callback" in said
    assert not tokens.exists() or not any(p.is_file() for p in tokens.rglob("*"))
    assert consent_server.consents()["authorized"] == []

    # Held (as a Run's exchange stores it): used, and said so.
    key = TokenKey("acme", None, consent_server.issuer, CLIENT, consent_server.url)
    client = OAuthClientInformationFull(client_id=CLIENT, token_endpoint_auth_method="none")
    stored = StoredTokens(LocalTokenStore(tokens), key, TokensHeld(), client)
    asyncio.run(stored.set_tokens(consented_token(consent_server)))
    before = {p: p.read_bytes() for p in tokens.rglob("*") if p.is_file()}
    assert main(argv) == 0
    assert oauth_lines(file, capsys.readouterr().err) == ["a token is held for tenant 'acme'"]
    bearers = consent_server.state()["bearers"]
    assert bearers and bearers[-1] == consent_server.state()["issued"][-1]["token"]

    # Revoked: refused by the server; a person must consent again. Nothing was written.
    consent_server.revoke_everything()
    assert main(argv) == 0
    (said,) = oauth_lines(file, capsys.readouterr().err)
    assert said.startswith("the token held was refused (revoked or expired); no usable token")
    assert {p: p.read_bytes() for p in tokens.rglob("*") if p.is_file()} == before


def registering_spec(
    tmp_path: Path, server: OAuthMcpServer, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Path]:
    """The token directory and a Spec file whose OAuth server has neither client field (a
    Run registers its client dynamically), with the environment the check reads set."""
    tokens = tmp_path / "tokens"
    monkeypatch.setenv("PSYCH_TOKEN_DIR", str(tokens))
    monkeypatch.delenv("PSYCH_BLOB_URL", raising=False)
    monkeypatch.setenv("PSYCH_MCP_OAUTH_ISSUERS", f"{server.url}={server.issuer}")
    file = spec_file(tmp_path, server)
    spec = json.loads(file.read_text())
    del spec["mcp_servers"][0]["oauth"]["preregistered_client_id"]
    file.write_text(json.dumps(spec))
    return tokens, file


def test_check_connections_registers_no_client_and_says_a_person_must_consent(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    registering_server: OAuthMcpServer,
) -> None:
    # Neither client field: a Run registers the client dynamically; the check does not
    # (each publish would leave a registration at the authorization registering_server).
    tokens, file = registering_spec(tmp_path, registering_server, monkeypatch)
    argv = ["validate", str(file), "--check-connections", "--tenant", "acme"]
    assert main(argv) == 0
    (said,) = oauth_lines(file, capsys.readouterr().err)
    assert said.startswith("no usable token is held for tenant 'acme': a person must consent.")
    # Before the fix: one registration per check.
    assert registering_server.registered() == []
    assert not tokens.exists() or not any(p.is_file() for p in tokens.rglob("*"))


def test_check_connections_leaves_a_forgotten_registration_to_the_runs(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    registering_server: OAuthMcpServer,
) -> None:
    # A stored registration the authorization registering_server forgot: a Run replaces it before it
    # asks a consent (``_registration.still_known``); the check neither registers another
    # nor forgets the stored one (it writes nothing).
    tokens, file = registering_spec(tmp_path, registering_server, monkeypatch)
    oauth = McpOAuth(grant="authorization_code", redirect_uris=(REDIRECT,))

    async def store_a_registration() -> None:
        clients = OAuthClients(
            {registering_server.url: registering_server.issuer}, LocalTokenStore(tokens)
        )
        crm = McpServer(name="crm", url=registering_server.url, oauth=oauth)
        grant = await clients.grant(crm, Scope(tenant="acme"), None)
        assert isinstance(grant.auth, ForServer)
        assert isinstance(grant.auth.inner, ConsentProvider)
        storage = grant.auth.inner.context.storage
        assert isinstance(storage, StoredTokens)
        sent = {"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}
        async with httpx.AsyncClient() as http:
            answer = await http.post(f"{registering_server.issuer}/register", json=sent)
        await storage.set_client_info(OAuthClientInformationFull(**answer.json()))

    asyncio.run(store_a_registration())
    registering_server.forget_registrations()
    before = {p: p.read_bytes() for p in tokens.rglob("*") if p.is_file()}
    assert before
    argv = ["validate", str(file), "--check-connections", "--tenant", "acme"]
    assert main(argv) == 0
    (said,) = oauth_lines(file, capsys.readouterr().err)
    assert said.startswith("no usable token is held for tenant 'acme': a person must consent.")
    assert len(registering_server.registered()) == 1
    assert {p: p.read_bytes() for p in tokens.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("verbose", [False, True])
def test_a_record_logged_during_a_check_is_printed_once(
    tmp_path: Path, consent_server: OAuthMcpServer, verbose: bool
) -> None:
    # With --verbose the record reached the check's handler and, propagating, the root's
    # console handler: it was printed twice. In its own process: --verbose sets up the
    # process's logging (and in-process, pytest's log handlers take the records).
    tokens = tmp_path / "tokens"
    key = TokenKey("acme", None, consent_server.issuer, CLIENT, consent_server.url)
    client = OAuthClientInformationFull(client_id=CLIENT, token_endpoint_auth_method="none")
    stored = StoredTokens(LocalTokenStore(tokens), key, TokensHeld(), client)
    asyncio.run(stored.set_tokens(consented_token(consent_server)))
    (record,) = [p for p in tokens.rglob("*") if p.is_file() and not p.name.startswith(".")]
    record.write_text("{cut short")  # logged at warning by the check's read of the token
    env = {
        **{name: value for name, value in os.environ.items() if name != "PSYCH_BLOB_URL"},
        "PSYCH_TOKEN_DIR": str(tokens),
        "PSYCH_MCP_OAUTH_ISSUERS": f"{CLIENT}={consent_server.issuer}",
        "XDG_CONFIG_HOME": str(tmp_path),
    }
    file = spec_file(tmp_path, consent_server)
    argv = ["validate", str(file), "--check-connections", "--tenant", "acme"]
    done = forking.run(  # forked (tests.forking)
        [sys.executable, "-m", "psych_runtime.workers.cli", *argv, *["--verbose"] * verbose],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    logged = [line for line in done.stderr.splitlines() if "is unreadable: ignored" in line]
    assert len(logged) == 1, done.stderr
    if verbose:  # as every record of a verbose command, at its time and level
        assert re.match(r"\d\d:\d\d:\d\d warning: the token record of ", logged[0]), logged
    else:  # the file's warning, as every other line about it
        assert logged[0].startswith(f"{file}: warning: the token record of "), logged


@pytest.mark.parametrize("how", ["cut short", "store failed", "sealed"])
def test_a_record_that_cannot_be_read_is_not_said_to_be_refused(
    tmp_path: Path,
    consent_server: OAuthMcpServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    # Before the fix: a damaged record was "the token held was refused (revoked or
    # expired)", sending a person to consent for a store's fault; a store that failed
    # ended the command with its error (and no oauth line). A sealed record was already
    # said to be held; it is now said to be stored, not opened: a record sealed with other
    # keys (or this one, garbage behind the seal) was "a token is held". And the store's
    # own warning (naming its directory) was printed too: where a store is is its log's.
    tokens = tmp_path / "tokens"
    monkeypatch.setenv("PSYCH_TOKEN_DIR", str(tokens))
    monkeypatch.delenv("PSYCH_BLOB_URL", raising=False)
    monkeypatch.setenv("PSYCH_MCP_OAUTH_ISSUERS", f"{CLIENT}={consent_server.issuer}")
    key = TokenKey("acme", None, consent_server.issuer, CLIENT, consent_server.url)
    client = OAuthClientInformationFull(client_id=CLIENT, token_endpoint_auth_method="none")
    stored = StoredTokens(LocalTokenStore(tokens), key, TokensHeld(), client)
    asyncio.run(stored.set_tokens(consented_token(consent_server)))
    record = tokens / key.location()
    if how == "cut short":
        record.write_text("{cut short")
    elif how == "sealed":
        record.write_bytes(b"psych-blob-v1\0not opened by the check")
    else:  # the disk refuses the read (EISDIR), as a store that does not answer
        record.unlink()
        record.mkdir()
    file = spec_file(tmp_path, consent_server)
    done = main(["validate", str(file), "--check-connections", "--tenant", "acme"])
    err = capsys.readouterr().err
    (said,) = oauth_lines(file, err)
    assert "revoked or expired" not in said
    assert str(tmp_path / "tokens") not in err, err
    if how == "cut short":
        assert done == 0
        assert said.startswith(
            "the token record held cannot be read (damaged: cut short, or not a token "
            "record), so a Run ignores it (no token was refused): a person must consent"
        )
    elif how == "sealed":
        assert done == 0
        assert said.startswith(
            "a token record is stored for tenant 'acme', sealed with the payload keys, which "
            "this check does not hold: whether it opens and holds a token the server accepts "
            "is not checked here"
        ), said
    else:  # a Run could not reach the server either: a problem
        assert done == 1
        assert said.startswith("the token store did not answer (the token record TokenKey(acme ")
        assert "the local token store failed (EISDIR: Is a directory)" in said
        assert "whether a token is held for tenant 'acme' is not known" in said
        assert "consenting again would not help" in said
