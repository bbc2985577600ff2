"""MCP servers behind OAuth (client_credentials) end to end: real Runs on the dev server
against ``tests.mcp.oauth_server`` (the SDK's resource-server auth and metadata, on
loopback), through psych's own worker.

The worker gets a token for each Run's Scope with the secret the SecretResolver names,
sends it only to the issuer configured for that secret, keeps it in the token store, gets
a new one when the server stops accepting it, and never writes the secret or a token to
history, records, blobs or logs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest

from psych_runtime.activities import FileVersionStore, McpSettings, StaticSecretResolver
from psych_runtime.activities.egress import EgressRules, EgressSettings
from psych_runtime.specs import AgentBuilder, McpOAuth, RunFailed, Scope, WorkflowSpec
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import Key, Keyring, PsychCodec, connect, run_worker
from psych_runtime.workflows import PsychClient, RunStatus, ToolCallFinished
from tests.mcp.oauth_fixture import OAuthMcpServer, start_oauth_server

from .conftest import Harness
from .test_upstream_secrets import payload_texts

pytestmark = pytest.mark.e2e

CLIENT = "psych-worker"
SECRET = "cc-SECRET-5f1e2d3c4b5a"
OAUTH = McpOAuth(preregistered_client_id=CLIENT, client_secret_credential="crm_secret")


@pytest.fixture(params=["streamable-http", "sse"])
def oauth_server(request: pytest.FixtureRequest) -> Iterator[OAuthMcpServer]:
    server = start_oauth_server(request.param, {CLIENT: SECRET})
    yield server
    server.stop()


@pytest.fixture
def oauth_harness(harness: Harness, oauth_server: OAuthMcpServer) -> Harness:
    harness.settings.secrets = StaticSecretResolver({"crm_secret": SECRET})
    harness.settings.mcp = McpSettings(oauth_issuers={"crm_secret": oauth_server.issuer})
    return harness


def agent(server: OAuthMcpServer, name: str = "crm-agent") -> AgentBuilder:
    transport: Literal["http", "sse"] = "sse" if server.transport == "sse" else "http"
    return (
        AgentBuilder(name)
        .instructions("Use the CRM.")
        .model("fake-model")
        .mcp_server("crm", server.url, transport=transport, oauth=OAUTH)
    )


def _token_records(root: Path) -> list[Path]:
    """The token store's records (not its shards' lock files, ``.lock``)."""
    return [p for p in root.rglob("*") if p.is_file() and p.name != ".lock"]


def _files_holding(root: Path, needle: bytes) -> list[Path]:
    if not root.exists():
        return []
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


async def test_tenants_get_their_own_tokens_and_none_is_written_anywhere(
    oauth_harness: Harness, oauth_server: OAuthMcpServer, caplog: pytest.LogCaptureFixture
) -> None:
    harness = oauth_harness
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("crm__whoami", {})),
        Reply.text("done acme"),
        Reply.tool_calls(ToolCall("crm__whoami", {})),
        Reply.text("done globex"),
    )
    spec = agent(oauth_server).build()
    acme, globex = Scope(tenant="acme"), Scope(tenant="globex")
    caplog.set_level("DEBUG")
    async with harness.worker():
        runs = []
        for scope in (acme, globex):
            run = await harness.client.dispatch(spec, "who am I?", scope=scope)
            result = await harness.client.result(run, scope=scope)
            assert result.status is RunStatus.COMPLETED, result.reason
            runs.append((run, scope))
        records = [
            [r for r in (await harness.client.records(run, scope=scope)).records]
            for run, scope in runs
        ]
        histories = [
            (
                await harness.env.client.get_workflow_handle(run.workflow_id).fetch_history()
            ).to_json()
            for run, _ in runs
        ]
        report = await harness.client.report(runs[0][0], scope=acme)
    state = oauth_server.state()
    tokens = [item["token"] for item in state["issued"]]
    # One token per tenant, each asked for once, bound to the MCP server (RFC 8707).
    assert len(tokens) == 2
    assert state["token_requests"] == [{"client_id": CLIENT, "ok": True}] * 2
    assert {item["resource"] for item in state["issued"]} == {oauth_server.url}
    # The MCP requests carried those tokens only, and the store holds each under its
    # own tenant's key.
    assert set(state["bearers"]) == set(tokens)
    held = _token_records(harness.home / "tokens")
    by_tenant = {
        record["key"][0]: record["token"]["access_token"]
        for record in (json.loads(path.read_bytes()) for path in held)
    }
    assert by_tenant == {"acme": tokens[0], "globex": tokens[1]}
    for run_records in records:
        finished = [r for r in run_records if isinstance(r, ToolCallFinished)]
        assert [r.status for r in finished] == ["ok"]
    # The tool ran as the configured client.
    (whoami,) = report.tool_calls
    assert whoami.result == CLIENT
    texts = [r.model_dump_json() for run_records in records for r in run_records]
    # A history's payload data is base64 in its JSON: searched decoded too.
    texts += histories + ["\n".join(payload_texts(json.loads(h))) for h in histories]
    for needle in (SECRET, *tokens):
        assert not any(needle in text for text in texts), needle
        assert needle not in caplog.text
        assert not _files_holding(harness.home / "blobs", needle.encode())
    # The secret is not in the token store either.
    assert not _files_holding(harness.home / "tokens", SECRET.encode())


async def test_a_token_the_server_echoes_back_is_redacted(
    oauth_harness: Harness, oauth_server: OAuthMcpServer
) -> None:
    """A server that sends the token back (a debug endpoint, an error quoting the
    request) does not get it into the result, the records, history or blobs.

    Not the worker's DEBUG log: the SDK's ``mcp.client.streamable_http`` logger prints
    every message a server sends at DEBUG, before the worker sees it.
    """
    harness = oauth_harness
    harness.fake.enqueue(Reply.tool_calls(ToolCall("crm__leak", {})), Reply.text("done"))
    async with harness.worker():
        run = await harness.client.dispatch(agent(oauth_server).build(), "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
        history = (
            await harness.env.client.get_workflow_handle(run.workflow_id).fetch_history()
        ).to_json()
    assert result.status is RunStatus.COMPLETED, result.reason
    (leak,) = report.tool_calls
    assert leak.result == "your token is [REDACTED:oauth-token-0]"
    (token,) = (item["token"] for item in oauth_server.state()["issued"])
    assert not any(token in r.model_dump_json() for r in records)
    assert token not in history
    assert token not in "\n".join(payload_texts(json.loads(history)))
    assert not _files_holding(harness.home / "blobs", token.encode())
    # The model's request carried the redacted result only.
    assert token not in json.dumps(harness.fake.requests[1])


async def test_a_token_the_server_stops_accepting_is_replaced(
    oauth_harness: Harness, oauth_server: OAuthMcpServer
) -> None:
    harness = oauth_harness
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("crm__whoami", {})),
        Reply.text("first"),
        Reply.tool_calls(ToolCall("crm__whoami", {})),
        Reply.text("second"),
    )
    spec = agent(oauth_server).build()
    async with harness.worker():
        first = await harness.client.dispatch(spec, "one", scope=harness.scope)
        assert (await harness.client.result(first, scope=harness.scope)).status is (
            RunStatus.COMPLETED
        )
        oauth_server.revoke_all()
        second = await harness.client.dispatch(spec, "two", scope=harness.scope)
        result = await harness.client.result(second, scope=harness.scope)
        report = await harness.client.report(second, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert [call.result for call in report.tool_calls] == [CLIENT]
    state = oauth_server.state()
    old, new = (item["token"] for item in state["issued"])
    assert len(state["token_requests"]) == 2
    # The pooled session met a 401 with the revoked token and went on with a new one,
    # which replaced the old one in the store.
    assert state["bearers"][-1] == new
    stored = [p.read_bytes() for p in _token_records(harness.home / "tokens")]
    assert len(stored) == 1
    assert new.encode() in stored[0] and old.encode() not in stored[0]


async def test_an_expired_token_is_replaced(
    oauth_harness: Harness, oauth_server: OAuthMcpServer
) -> None:
    harness = oauth_harness
    oauth_server.set_lifetime(3)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("crm__whoami", {})),
        Reply.text("first"),
        Reply.tool_calls(ToolCall("crm__whoami", {})),
        Reply.text("second"),
    )
    spec = agent(oauth_server).build()
    async with harness.worker():
        for task in ("one", "two"):
            run = await harness.client.dispatch(spec, task, scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
            assert result.status is RunStatus.COMPLETED, result.reason
            await asyncio.sleep(3.5)  # past the lifetime of every token held
    state = oauth_server.state()
    assert state["calls"]["whoami"] == 2
    # The second Run could not use a token of the first: it got a new one, and every
    # token request succeeded (none was refused or retried with a stale secret).
    assert len(state["issued"]) >= 2
    assert all(request["ok"] for request in state["token_requests"])
    assert state["bearers"][-1] == state["issued"][-1]["token"]


async def test_a_token_the_server_refuses_as_soon_as_it_is_issued_is_named(
    oauth_harness: Harness, oauth_server: OAuthMcpServer
) -> None:
    """The authorization server issues tokens already expired (a clock ahead of the MCP
    server's, a token for another audience): the MCP server refuses each one. The Run fails
    saying so, not with the SDK's "Server returned an error response"; the worker asked
    for a token once per attempt to connect, no more."""
    harness = oauth_harness
    oauth_server.set_lifetime(0)
    harness.fake.enqueue(Reply.text("never"))
    async with harness.worker():
        run = await harness.client.dispatch(agent(oauth_server).build(), "go", scope=harness.scope)
        with pytest.raises(RunFailed) as failed:
            await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 60)
    reason = str(failed.value)
    assert "MCP server 'crm' is unreachable" in reason, reason
    assert "refused the OAuth token just obtained for it: HTTP 401 (invalid_token)" in reason
    assert "Server returned an error response" not in reason
    assert harness.fake.requests == []
    state = oauth_server.state()
    assert state["token_requests"] and all(request["ok"] for request in state["token_requests"])
    assert not any(issued["token"] in reason for issued in state["issued"])


async def test_subagents_and_workflow_tool_steps_use_the_token_too(
    oauth_harness: Harness, oauth_server: OAuthMcpServer
) -> None:
    harness = oauth_harness
    helper = agent(oauth_server, "helper").build()
    # A subagent may only use servers its parent has, in the same definition.
    lead = agent(oauth_server, "lead").subagent("helper", "Asks the CRM, for tests.", helper)
    transport = "sse" if oauth_server.transport == "sse" else "http"
    flow = WorkflowSpec.model_validate(
        {
            "name": "crm-flow",
            "mcp_servers": [
                {
                    "name": "crm",
                    "url": oauth_server.url,
                    "transport": transport,
                    "oauth": OAUTH.model_dump(),
                }
            ],
            "steps": [{"kind": "tool", "name": "who", "tool": "crm__whoami", "arguments": {}}],
        }
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delegate", {"agent": "helper", "task": "who?"})),
        Reply.tool_calls(ToolCall("crm__whoami", {})),
        Reply.text("the helper is psych-worker"),
        Reply.text("done"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(lead.build(), "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
        steps = await harness.client.dispatch(flow, "go", scope=harness.scope)
        flowed = await harness.client.result(steps, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    (child,) = report.children
    assert child.status == "completed"
    assert child.totals.tool_calls == 1
    assert flowed.status is RunStatus.COMPLETED, flowed.reason
    assert flowed.outputs is not None and flowed.outputs["who"] == CLIENT
    state = oauth_server.state()
    assert state["calls"]["whoami"] == 2
    # One Scope, one issuer, one client, one resource: one token served both Runs.
    assert len(state["issued"]) == 1


async def test_with_payload_keys_the_stored_token_is_sealed(
    oauth_harness: Harness, oauth_server: OAuthMcpServer
) -> None:
    """A worker whose client encrypts payloads seals the token store with the same keys:
    the record on disk holds no token, and the next Run of the tenant still reads it (no
    second token request)."""
    harness = oauth_harness
    keys = Keyring([Key("acme-1", "acme", os.urandom(32))], {"acme": "acme-1"})
    sealed_client = await connect(
        harness.env.client.service_client.config.target_host,
        namespace=harness.env.client.namespace,
        codec=PsychCodec(keys),
    )
    client = PsychClient(
        sealed_client,
        store=FileVersionStore(harness.home / "versions"),
        task_queue=harness.settings.task_queue,
        registry=harness.registry,
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("crm__whoami", {})),
        Reply.text("one"),
        Reply.tool_calls(ToolCall("crm__whoami", {})),
        Reply.text("two"),
    )
    spec = agent(oauth_server).build()
    async with run_worker(sealed_client, harness.settings):
        for task in ("one", "two"):
            run = await client.dispatch(spec, task, scope=harness.scope)
            result = await client.result(run, scope=harness.scope)
            assert result.status is RunStatus.COMPLETED, result.reason
    state = oauth_server.state()
    (token,) = (item["token"] for item in state["issued"])
    assert len(state["token_requests"]) == 1
    assert state["calls"]["whoami"] == 2
    stored = [p.read_bytes() for p in _token_records(harness.home / "tokens")]
    assert len(stored) == 1
    assert stored[0].startswith(b"psych-blob-v1\0")
    assert token.encode() not in stored[0]
    assert b"access_token" not in stored[0]


async def test_an_authorization_server_the_egress_policy_refuses_is_named_as_the_servers(
    harness: Harness,
) -> None:
    """The MCP server is allowed, its authorization server (named ``localhost`` here, on
    loopback like it) is denied by the tenant's rule: the Run fails saying that the
    authorization server of MCP server 'crm' was refused, with its host and rule; no token
    is asked for. (Before, the reason named the host and rule only, which read as if the
    MCP server itself were refused.)"""
    server = start_oauth_server("streamable-http", {CLIENT: SECRET}, as_host="localhost")
    try:
        harness.settings = dataclasses.replace(
            harness.settings,
            secrets=StaticSecretResolver({"crm_secret": SECRET}),
            mcp=McpSettings(oauth_issuers={"crm_secret": server.issuer}),
            egress=EgressSettings(
                rules=EgressRules.parse("127.0.0.1/32"),
                tenants={harness.scope.tenant: EgressRules.parse(deny="localhost")},
            ),
        )
        async with harness.worker():
            run = await harness.client.dispatch(agent(server).build(), "go", scope=harness.scope)
            with pytest.raises(RunFailed) as failed:
                await harness.client.result(run, scope=harness.scope)
        state = server.state()
    finally:
        server.stop()
    reason = str(failed.value)
    assert "MCP server 'crm' is unreachable" in reason, reason
    assert (
        "the authorization server of MCP server 'crm': egress refused: localhost: "
        f"denied by tenant {harness.scope.tenant!r}'s rule host localhost"
    ) in reason, reason
    assert state["token_requests"] == [] and state["issued"] == []
    assert harness.fake.requests == []
