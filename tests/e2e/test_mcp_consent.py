"""MCP servers whose tokens need a person's consent (the ``authorization_code`` grant) end
to end: real Runs on the dev server against ``tests.mcp.consent_server`` (the SDK's own
authorization server and resource server, on loopback), psych's worker, and psych's OAuth
callback (``oauth_callback_app``) served on loopback.

A Run whose Scope holds no token suspends for authorization with the URL a person opens;
the test follows it as a browser would (the SDK's ``/authorize`` redirects to the
callback), the callback resumes the Run, the Run's activity exchanges the code, and the
tool call runs with the token. A token past its lifetime is refreshed; one revoked
suspends the Run again; a server naming another authorization server is refused; two
tenants never share a token, and none (nor the PKCE verifier or the code) is written to
history, records, blobs or logs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from psych_runtime.activities import McpSettings
from psych_runtime.activities.tokens import LocalTokenStore
from psych_runtime.specs import AgentBuilder, McpOAuth, RunFailed, Scope, WorkflowSpec
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import format_record
from psych_runtime.workflows import (
    Pending,
    Resumed,
    RunHandle,
    RunStatus,
    Suspended,
    SuspensionReason,
    ToolCallFinished,
)
from tests.mcp.consent_fixture import CLIENT, Consenting, consenting, follow, record_files
from tests.mcp.oauth_fixture import OAuthMcpServer

from ._waiting import is_waiting, only_pending, state_when
from .conftest import Harness
from .test_upstream_secrets import forms, payload_texts

pytestmark = pytest.mark.e2e

WAIT = 60.0
"""Wall seconds a Run gets to reach a state (the machine is shared)."""


@pytest.fixture(params=["streamable-http", "sse"])
async def consenting_pair(
    request: pytest.FixtureRequest, harness: Harness
) -> AsyncIterator[Consenting]:
    store = LocalTokenStore(harness.home / "tokens")
    async with consenting(request.param, harness.client, store) as pair:
        yield pair


@pytest.fixture
def consent_server(consenting_pair: Consenting) -> OAuthMcpServer:
    return consenting_pair.server


@pytest.fixture
def callback(consenting_pair: Consenting) -> Callback:
    return Callback(consenting_pair.callback_url)


@dataclass
class Callback:
    """psych's OAuth callback, served on loopback for one test."""

    url: str


@pytest.fixture
def consent_harness(
    harness: Harness, consent_server: OAuthMcpServer, callback: Callback
) -> Harness:
    harness.settings.mcp = McpSettings(oauth_issuers={CLIENT: consent_server.issuer})
    return harness


def oauth(callback: Callback) -> McpOAuth:
    return McpOAuth(
        grant="authorization_code", preregistered_client_id=CLIENT, redirect_uris=(callback.url,)
    )


def agent(server: OAuthMcpServer, callback: Callback, name: str = "consent-agent") -> AgentBuilder:
    transport: Literal["http", "sse"] = "sse" if server.transport == "sse" else "http"
    return (
        AgentBuilder(name)
        .instructions("Use the CRM.")
        .model("fake-model")
        .mcp_server("crm", server.url, transport=transport, oauth=oauth(callback))
    )


async def consent_asked(harness: Harness, run: RunHandle, scope: Scope) -> Pending:
    """The authorization item the Run suspends on."""
    state = await state_when(
        harness.client,
        run,
        scope,
        is_waiting,
        what="a consent to be asked",
        within=WAIT,
        unsettled=True,
    )
    item = only_pending(state)
    assert item.reason is SuspensionReason.AUTHORIZATION
    return item


async def consent(item: Pending) -> httpx.Response:
    """Open the item's URL as a person's browser would (to psych's callback)."""
    assert item.question is not None
    return await follow(item.question)


def _files_holding(root: Path, needle: bytes) -> list[Path]:
    if not root.exists():
        return []
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def held_tokens(home: Path) -> list[dict[str, object]]:
    """Every token record the worker's store holds (the local store is not sealed here)."""
    records = []
    for path in record_files(home / "tokens"):
        record = json.loads(path.read_bytes())
        if "token" in record:
            records.append(record)
    return records


async def test_a_run_suspends_for_consent_and_the_callback_resumes_it(
    consent_harness: Harness,
    consent_server: OAuthMcpServer,
    callback: Callback,
    caplog: pytest.LogCaptureFixture,
) -> None:
    harness = consent_harness
    caplog.set_level("DEBUG", logger="psych_runtime")
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("crm__whoami", {})),
        Reply.text("done acme"),
        Reply.tool_calls(ToolCall("crm__whoami", {})),
        Reply.text("done globex"),
    )
    # Three steps are what each Run takes (two model calls, one tool call): the attempt that
    # waited for consent used to count as one more and stop the Run at max_steps.
    spec = agent(consent_server, callback).limits(max_steps=3).build()
    acme, globex = Scope(tenant="acme", principal="ann"), Scope(tenant="globex")
    runs = []
    async with harness.worker():
        for scope in (acme, globex):
            run = await harness.client.dispatch(spec, "who am I?", scope=scope)
            item = await consent_asked(harness, run, scope)
            assert item.tool == "crm"
            assert item.question is not None
            assert item.question.startswith(f"{consent_server.issuer}/authorize?")
            # No model call yet: the turn's discovery needs the token first.
            page = await consent(item)
            assert page.status_code == 200, page.text
            assert "authorized" in page.text
            result = await harness.client.result(run, scope=scope)
            assert result.status is RunStatus.COMPLETED, result.reason
            runs.append((run, scope))
        records = [(await harness.client.records(run, scope=s)).records for run, s in runs]
        histories = [
            (
                await harness.env.client.get_workflow_handle(run.workflow_id).fetch_history()
            ).to_json()
            for run, _ in runs
        ]
        report = await harness.client.report(runs[0][0], scope=acme)
    (whoami,) = report.tool_calls
    assert whoami.result == CLIENT
    # The attempt that waited for consent made no call: the report lists it as such, and
    # the totals count only the calls made (it used to count as a model call and a step).
    assert report.totals is not None
    assert len(report.model_calls) == 3
    assert report.totals.model_calls == 2 and report.totals.steps == 3
    assert len(harness.fake.requests) == 4  # two Runs, two calls each
    asked_first = report.model_calls[0]
    assert (asked_first.turn, asked_first.attempt, asked_first.ok) == (1, 1, False)
    assert asked_first.error is not None and "consent was asked first" in asked_first.error
    assert [(c.turn, c.attempt, c.ok) for c in report.model_calls[1:]] == [
        (1, 2, True),
        (2, 1, True),
    ]
    for run_records in records:
        (asked,) = [r for r in run_records if isinstance(r, Suspended)]
        assert asked.pending.reason is SuspensionReason.AUTHORIZATION
        # What psych status, run, report and list --suspended show: the link to open.
        assert f"open {asked.pending.question}" in format_record(asked)
        (resumed,) = [r for r in run_records if isinstance(r, Resumed)]
        assert (resumed.outcome, resumed.by, resumed.detail) == (
            "authorized",
            "oauth-callback",
            None,
        )
        finished = [r for r in run_records if isinstance(r, ToolCallFinished)]
        assert [r.status for r in finished] == ["ok"]
    state = consent_server.state()
    tokens = [item["token"] for item in state["issued"]]
    assert len(tokens) == 2 and set(state["bearers"]) <= set(tokens)
    assert consent_server.consents()["authorized"] == [CLIENT, CLIENT]
    # One token per Scope, each under its own key, bound to the MCP server (RFC 8707).
    assert {item["resource"] for item in state["issued"]} == {consent_server.url}
    held = held_tokens(harness.home)
    by_scope = {(r["key"][0], r["key"][1]): r["token"]["access_token"] for r in held}  # type: ignore[index]
    assert by_scope == {("acme", "ann"): tokens[0], ("globex", None): tokens[1]}
    refresh = [r["token"]["refresh_token"] for r in held]  # type: ignore[index]
    # Nothing of the flow is left behind: no parked flow, index or code.
    assert len(record_files(harness.home / "tokens")) == 2
    # A history's payload data is base64 in its JSON: searched decoded too.
    decoded = ["\n".join(payload_texts(json.loads(history))) for history in histories]
    texts = [r.model_dump_json() for run_records in records for r in run_records]
    texts += histories + decoded
    for needle in (*tokens, *refresh):
        assert not any(needle in text for text in texts), needle
        assert needle not in caplog.text
        assert not _files_holding(harness.home / "blobs", needle.encode())


def parked_verifiers(home: Path) -> list[str]:
    """The PKCE verifier of every flow parked in the worker's store (unsealed here)."""
    flows = [json.loads(path.read_bytes()) for path in record_files(home / "tokens")]
    return [flow["verifier"] for flow in flows if "verifier" in flow]


def code_of(page: httpx.Response) -> str:
    """The authorization code the authorization server's redirect gave the callback."""
    codes: list[str] = [
        query["code"][0]
        for hop in page.history
        if "code" in (query := parse_qs(urlsplit(hop.headers.get("location", "")).query))
    ]
    (code,) = codes
    return code


async def test_the_code_and_the_pkce_verifier_never_enter_the_history(
    consent_harness: Harness,
    consent_server: OAuthMcpServer,
    callback: Callback,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The authorization code (in the callback's redirect) and the PKCE verifier (in the
    parked flow, sent only in the token request) appear nowhere in the Run's recorded
    history, its payloads decoded (payload data is base64 in a history's JSON: a plain
    search of it would miss a secret inside one), nor in its records, blobs or logs."""
    harness = consent_harness
    caplog.set_level("DEBUG", logger="psych_runtime")
    harness.fake.enqueue(Reply.tool_calls(ToolCall("crm__whoami", {})), Reply.text("done"))
    spec = agent(consent_server, callback, "consent-secrets").build()
    async with harness.worker():
        run = await harness.client.dispatch(spec, "who am I?", scope=harness.scope)
        item = await consent_asked(harness, run, harness.scope)
        (verifier,) = parked_verifiers(harness.home)
        page = await consent(item)
        assert page.status_code == 200, page.text
        code = code_of(page)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
        handle = harness.env.client.get_workflow_handle(run.workflow_id)
        history = json.loads((await handle.fetch_history()).to_json())
    assert result.status is RunStatus.COMPLETED, result.reason
    # The grant really ran: one consent, its code exchanged with this verifier for the
    # token the call carried.
    assert consent_server.consents()["authorized"] == [CLIENT]
    (issued,) = consent_server.state()["issued"]
    assert consent_server.state()["bearers"][-1] == issued["token"]
    raw = json.dumps(history)
    decoded = "\n".join(payload_texts(history))
    # The payloads are read: the authorization URL the Run suspended on is in one.
    assert item.question is not None and item.question in decoded
    assert any(isinstance(r, Resumed) and r.outcome == "authorized" for r in records)
    shown = "\n".join(r.model_dump_json() for r in records)
    for needle in (code, verifier):
        for form in forms(needle):
            assert form not in raw and form not in decoded, needle
        assert needle not in shown
        assert needle not in caplog.text
        assert not _files_holding(harness.home / "blobs", needle.encode())
    # Nothing of the flow is left behind in the token store: only the token.
    assert len(held_tokens(harness.home)) == len(record_files(harness.home / "tokens")) == 1


async def test_a_consent_nobody_gives_in_time_leaves_nothing_behind(
    consent_harness: Harness, consent_server: OAuthMcpServer, callback: Callback
) -> None:
    """The wait expires: the Run ends ABANDONED, the parked flow (PKCE verifier, client
    registration) and its index are gone from the token store, and the link opened
    afterwards is refused by psych's callback."""
    harness = consent_harness
    # Long enough that the wait is seen (and its flow parked) on a loaded machine.
    spec = agent(consent_server, callback, "consent-expires").suspension(approval_expires_seconds=8)
    async with harness.worker():
        run = await harness.client.dispatch(spec.build(), "go", scope=harness.scope)
        item = await consent_asked(harness, run, harness.scope)
        parked = record_files(harness.home / "tokens")
        assert len(parked) == 2  # the flow and its index, until the wait ends
        result = await harness.client.result(run, scope=harness.scope)
        assert result.status is RunStatus.ABANDONED, result.reason
        assert "suspension_expired" in (result.reason or "")
        left = record_files(harness.home / "tokens")
        assert left == []
        late = await consent(item)
    assert late.status_code == 400
    assert "no authorization waits on this state" in late.text
    assert held_tokens(harness.home) == []
    assert harness.fake.requests == []


async def test_an_expired_token_is_refreshed_and_a_revoked_one_asks_again(
    consent_harness: Harness, consent_server: OAuthMcpServer, callback: Callback
) -> None:
    harness = consent_harness
    consent_server.set_lifetime(2)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("crm__whoami", {})),
        Reply.text("first"),
        Reply.tool_calls(ToolCall("crm__whoami", {})),
        Reply.text("second"),
        Reply.tool_calls(ToolCall("crm__whoami", {})),
        Reply.text("third"),
    )
    spec = agent(consent_server, callback).build()
    scope = harness.scope
    async with harness.worker():
        first = await harness.client.dispatch(spec, "one", scope=scope)
        assert (await consent(await consent_asked(harness, first, scope))).status_code == 200
        assert (await harness.client.result(first, scope=scope)).status is RunStatus.COMPLETED
        await asyncio.sleep(2.5)  # past the token's lifetime
        consent_server.set_lifetime(3600)
        second = await harness.client.dispatch(spec, "two", scope=scope)
        result = await harness.client.result(second, scope=scope)
        assert result.status is RunStatus.COMPLETED, result.reason
        # Refreshed, not asked again (the first Run may already have refreshed it on a
        # loaded machine: the token lives 2 s).
        consents = consent_server.consents()
        assert consents["authorized"] == [CLIENT] and consents["refreshed"] >= 1
        state = consent_server.state()
        assert state["bearers"][-1] == state["issued"][-1]["token"]
        # Revoked (access and refresh token): the call meets a 401 and the Run asks again.
        consent_server.revoke_everything()
        third = await harness.client.dispatch(spec, "three", scope=scope)
        item = await consent_asked(harness, third, scope)
        assert (await consent(item)).status_code == 200
        result = await harness.client.result(third, scope=scope)
        report = await harness.client.report(third, scope=scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert [call.result for call in report.tool_calls] == [CLIENT]
    assert consent_server.consents()["authorized"] == [CLIENT, CLIENT]
    state = consent_server.state()
    assert state["calls"]["whoami"] == 3
    assert state["bearers"][-1] == state["issued"][-1]["token"]


async def test_two_workers_refreshing_one_key_together_ask_nobody_again(
    consent_harness: Harness, consent_server: OAuthMcpServer, callback: Callback
) -> None:
    # The consent server rotates refresh tokens: each is good once. Two workers (each its
    # own task queue and session pool, one token store) hold the same expired token and
    # refresh it at once. The server spends the refresh token on the first and answers it
    # late, as a slow server does; the second is refused at once, before the first has
    # stored its new token. The refused worker must take the token the first stores, not
    # ask a person for consent again.
    harness = consent_harness
    other = f"{harness.settings.task_queue}-2"
    second_client = harness.client_of(other)
    consent_server.set_lifetime(3)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("crm__whoami", {})),
        Reply.text("first"),
        Reply.tool_calls(ToolCall("crm__whoami", {})),
        Reply.text("second"),
    )
    spec = agent(consent_server, callback).build()
    scope = harness.scope
    async with harness.worker(), harness.worker(other):
        first = await harness.client.dispatch(spec, "one", scope=scope)
        assert (await consent(await consent_asked(harness, first, scope))).status_code == 200
        assert (await harness.client.result(first, scope=scope)).status is RunStatus.COMPLETED
        second = await second_client.dispatch(spec, "two", scope=scope)
        assert (await second_client.result(second, scope=scope)).status is RunStatus.COMPLETED
        await asyncio.sleep(3.5)  # past the token's lifetime: both workers hold it expired
        consent_server.set_lifetime(3600)
        consent_server.set_refresh_delay(1.5)
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("crm__whoami", {})),
            Reply.tool_calls(ToolCall("crm__whoami", {})),
            Reply.text("done"),
            Reply.text("done"),
        )
        handles = await asyncio.gather(
            harness.client.dispatch(spec, "three", scope=scope),
            second_client.dispatch(spec, "four", scope=scope),
        )
        results = await asyncio.wait_for(
            asyncio.gather(
                harness.client.result(handles[0], scope=scope),
                second_client.result(handles[1], scope=scope),
            ),
            60,
        )
    assert [r.status for r in results] == [RunStatus.COMPLETED] * 2, [r.reason for r in results]
    consents = consent_server.consents()
    assert consents["authorized"] == [CLIENT]  # one consent, given for the first Run
    assert consents["refreshed"] >= 1
    assert consents["refused"] >= 1  # the two refreshes met


async def test_a_server_naming_another_authorization_server_is_refused(
    harness: Harness, consent_server: OAuthMcpServer, callback: Callback
) -> None:
    # The operator names another issuer for this client: the server's own is refused
    # before any authorization URL is made, and nothing is asked of anyone.
    harness.settings.mcp = McpSettings(oauth_issuers={CLIENT: "http://127.0.0.1:9/"})
    harness.fake.enqueue(Reply.text("never"))
    async with harness.worker():
        run = await harness.client.dispatch(
            agent(consent_server, callback, "consent-wrong-issuer").build(),
            "go",
            scope=harness.scope,
        )
        with pytest.raises(RunFailed) as failed:
            await harness.client.result(run, scope=harness.scope)
    assert "MCP server 'crm' is unreachable" in str(failed.value)
    assert "not http://127.0.0.1:9/, the issuer configured for this client" in str(failed.value)
    assert consent_server.consents()["authorized"] == []
    assert harness.fake.requests == []


async def test_a_workflow_tool_step_waits_for_consent_too(
    consent_harness: Harness, consent_server: OAuthMcpServer, callback: Callback
) -> None:
    harness = consent_harness
    transport = "sse" if consent_server.transport == "sse" else "http"
    flow = WorkflowSpec.model_validate(
        {
            "name": "consent-flow",
            "mcp_servers": [
                {
                    "name": "crm",
                    "url": consent_server.url,
                    "transport": transport,
                    "oauth": oauth(callback).model_dump(),
                }
            ],
            "steps": [{"kind": "tool", "name": "who", "tool": "crm__whoami", "arguments": {}}],
        }
    )
    async with harness.worker():
        run = await harness.client.dispatch(flow, "go", scope=harness.scope)
        item = await consent_asked(harness, run, harness.scope)
        assert (await consent(item)).status_code == 200
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.outputs is not None and result.outputs["who"] == CLIENT


async def test_a_subagent_uses_the_token_one_consent_got(
    consent_harness: Harness, consent_server: OAuthMcpServer, callback: Callback
) -> None:
    """A subagent may only use its parent's servers, under the same Scope: the parent's
    discovery asks once, and the subagent's Run uses that token (no second consent)."""
    harness = consent_harness
    helper = agent(consent_server, callback, "consent-helper").build()
    lead = agent(consent_server, callback, "consent-lead").subagent(
        "helper", "Asks the CRM, for tests.", helper
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delegate", {"agent": "helper", "task": "who?"})),
        Reply.tool_calls(ToolCall("crm__whoami", {})),
        Reply.text("the helper is psych-agent"),
        Reply.text("done"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(lead.build(), "go", scope=harness.scope)
        # The lead's own discovery asks first; then, with the token held, the helper runs.
        item = await consent_asked(harness, run, harness.scope)
        assert item.run is None
        assert (await consent(item)).status_code == 200
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    (child,) = report.children
    assert child.status == "completed"
    assert consent_server.consents()["authorized"] == [CLIENT]
