"""A person who refuses consent at the authorization server (or an authorization server
that answers the redirect with another ``error``, RFC 6749 4.1.2.1) ends the Run's wait at
once: psych's callback answers the pending item with the refusal, the parked flow is
forgotten, and what needed the token learns why it cannot have it: a tool call is told
(the model reads it), a turn's or a workflow step's discovery fails the Run naming the
server and the refusal (or, the server optional, goes on without it). Real Runs on the dev
server against ``tests.mcp.consent_server`` (the SDK's own authorization server, made to
refuse), psych's worker and callback on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from psych_runtime.activities import McpSettings
from psych_runtime.activities.tokens import LocalTokenStore
from psych_runtime.specs import AgentBuilder, RunFailed, WorkflowBuilder, WorkflowSpec
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import Resumed, RunContinued, RunStatus, ToolCallFinished
from tests.mcp.consent_fixture import CLIENT, Consenting, consenting, record_files

from ._waiting import all_records, is_waiting, state_when
from .conftest import Harness
from .test_mcp_consent import Callback, agent, consent, consent_asked, oauth

pytestmark = pytest.mark.e2e

WAIT = 60.0
"""Wall seconds a Run gets to settle once its wait ended (the machine is shared)."""

REFUSALS = [
    ("access_denied", "The user denied the request", "access_denied: The user denied the request"),
    ("temporarily_unavailable", None, "temporarily_unavailable"),
]


@pytest.fixture
async def pair(harness: Harness) -> AsyncIterator[Consenting]:
    store = LocalTokenStore(harness.home / "tokens")
    async with consenting("streamable-http", harness.client, store) as consenting_pair:
        harness.settings.mcp = McpSettings(oauth_issuers={CLIENT: consenting_pair.server.issuer})
        yield consenting_pair


async def refusal_taken(harness: Harness, run: object, said: str) -> Resumed:
    """The Run's record of the refusal, there as soon as the callback's page is."""
    records = await all_records(harness.client, run, harness.scope)  # type: ignore[arg-type]
    resumed = [r for r in records if isinstance(r, Resumed)]
    # Before the fix: the page said "refused", and the Run went on waiting.
    assert [(r.outcome, r.by) for r in resumed] == [("rejected", "oauth-callback")], records
    assert resumed[0].detail is not None and said in resumed[0].detail
    return resumed[0]


@pytest.mark.parametrize(("error", "description", "said"), REFUSALS, ids=["denied", "other"])
async def test_a_refusal_at_the_turns_discovery_fails_the_run_at_once(
    harness: Harness, pair: Consenting, error: str, description: str | None, said: str
) -> None:
    server = pair.server
    server.refuse_consent(error, description)
    harness.fake.enqueue(Reply.text("never"))
    spec = agent(server, Callback(pair.callback_url)).build()
    async with harness.worker():
        run = await harness.client.dispatch(spec, "who am I?", scope=harness.scope)
        item = await consent_asked(harness, run, harness.scope)
        page = await consent(item)
        assert page.status_code == 400
        assert f"the authorization server refused: {said}" in page.text
        assert "the Run was told" in page.text
        await refusal_taken(harness, run, said)
        with pytest.raises(RunFailed) as failed:
            await asyncio.wait_for(harness.client.result(run, scope=harness.scope), WAIT)
        state = await harness.client.status(run, scope=harness.scope)
    assert state.status is RunStatus.FAILED
    reason = str(failed.value)
    assert "consent to MCP server 'crm' was refused" in reason, reason
    assert said in reason
    assert "code=" not in reason and "state=" not in reason
    # No model call was made, and nothing of the flow stays in the store.
    assert harness.fake.requests == []
    assert record_files(harness.home / "tokens") == []
    assert server.consents()["authorized"] == []


async def test_an_optional_server_refused_is_left_out_and_the_run_goes_on(
    harness: Harness, pair: Consenting
) -> None:
    server = pair.server
    server.refuse_consent("access_denied", None)
    spec = (
        AgentBuilder("consent-optional")
        .model("fake-model")
        .mcp_server("crm", server.url, oauth=oauth(Callback(pair.callback_url)), optional=True)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("crm__whoami", {}, id="call-1")),
        Reply.text("answered without the CRM"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "who am I?", scope=harness.scope)
        assert (await consent(await consent_asked(harness, run, harness.scope))).status_code == 400
        await refusal_taken(harness, run, "access_denied")
        result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), WAIT)
    assert result.status is RunStatus.COMPLETED, result.reason
    # Its tools were never offered, and the model was told so, as of an optional server
    # found unavailable (before: it was left out silently); the call it made anyway is told
    # why.
    first, second = harness.fake.requests
    assert not any(t["function"]["name"].startswith("crm__") for t in first.get("tools", []))
    assert [m["content"] for m in first["messages"] if m["role"] == "user"] == [
        "who am I?",
        "[runtime] consent to MCP server 'crm' was refused (the authorization server "
        "answered access_denied); the server is optional: the Run goes on without it, its "
        "tools not offered for the rest of the Run.",
    ]
    told = second["messages"][-1]
    assert told["tool_call_id"] == "call-1"
    assert (
        "MCP server 'crm' is not available: consent to MCP server 'crm' was refused"
        in (told["content"])
    )
    assert record_files(harness.home / "tokens") == []


async def test_a_refusal_at_a_tool_call_is_told_to_the_model(
    harness: Harness, pair: Consenting
) -> None:
    server = pair.server
    spec = agent(server, Callback(pair.callback_url)).build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("crm__whoami", {})),
        Reply.text("first"),
        Reply.tool_calls(ToolCall("crm__whoami", {}, id="call-2")),
        Reply.text("the CRM is not available to me"),
    )
    async with harness.worker():
        first = await harness.client.dispatch(spec, "one", scope=harness.scope)
        assert (await consent(await consent_asked(harness, first, harness.scope))).is_success
        done = await harness.client.result(first, scope=harness.scope)
        assert done.status is RunStatus.COMPLETED, done.reason
        # Revoked: the next Run's call meets a 401 (its catalogue is cached) and asks again.
        server.revoke_everything()
        server.refuse_consent("access_denied", "The user denied the request")
        second = await harness.client.dispatch(spec, "two", scope=harness.scope)
        item = await consent_asked(harness, second, harness.scope)
        assert item.call_id == "call-2"
        assert (await consent(item)).status_code == 400
        await refusal_taken(harness, second, "access_denied: The user denied the request")
        result = await asyncio.wait_for(harness.client.result(second, scope=harness.scope), WAIT)
        records = await all_records(harness.client, second, harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    (finished,) = [r for r in records if isinstance(r, ToolCallFinished)]
    assert finished.status == "rejected"
    told = harness.fake.requests[-1]["messages"][-1]
    assert told["tool_call_id"] == "call-2"
    assert "consent to MCP server 'crm' was refused" in told["content"]
    assert "access_denied: The user denied the request" in told["content"]
    assert server.state()["calls"]["whoami"] == 1
    # The parked flow is forgotten: only the first consent's token stays.
    assert len(record_files(harness.home / "tokens")) == 1


async def test_a_refusal_before_a_workflow_step_fails_the_run(
    harness: Harness, pair: Consenting
) -> None:
    server = pair.server
    server.refuse_consent("access_denied", None)
    flow = WorkflowSpec.model_validate(
        {
            "name": "consent-flow",
            "mcp_servers": [
                {
                    "name": "crm",
                    "url": server.url,
                    "oauth": oauth(Callback(pair.callback_url)).model_dump(),
                }
            ],
            "steps": [{"kind": "tool", "name": "who", "tool": "crm__whoami", "arguments": {}}],
        }
    )
    async with harness.worker():
        run = await harness.client.dispatch(flow, "go", scope=harness.scope)
        item = await consent_asked(harness, run, harness.scope)
        assert (await consent(item)).status_code == 400
        await refusal_taken(harness, run, "access_denied")
        with pytest.raises(RunFailed) as failed:
            await asyncio.wait_for(harness.client.result(run, scope=harness.scope), WAIT)
    assert "consent to MCP server 'crm' was refused" in str(failed.value)
    assert server.state()["calls"].get("whoami", 0) == 0
    assert record_files(harness.home / "tokens") == []


async def test_a_refusal_stands_after_the_run_continues_as_new(
    harness: Harness, pair: Consenting
) -> None:
    # An optional server refused, then the Run continues as new after every turn: the
    # executions after the cut do not ask the person again (they refused), nor wait on it.
    server = pair.server
    server.refuse_consent("access_denied", None)

    @harness.registry.register
    def step(n: int) -> str:
        """One step."""
        return f"step {n} done"

    spec = (
        AgentBuilder("consent-continued", registry=harness.registry)
        .model("fake-model")
        .tool("step")
        .mcp_server("crm", server.url, oauth=oauth(Callback(pair.callback_url)), optional=True)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("step", {"n": 1}, id="call-1")),
        Reply.tool_calls(ToolCall("crm__whoami", {}, id="call-2")),
        Reply.text("answered without the CRM"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(
            spec, "who am I?", scope=harness.scope, continue_after_events=1
        )
        assert (await consent(await consent_asked(harness, run, harness.scope))).status_code == 400
        await refusal_taken(harness, run, "access_denied")
        settled_or_asked = await state_when(
            harness.client,
            run,
            harness.scope,
            lambda state: state.status.terminal or is_waiting(state),
            what="the Run to settle (or ask again)",
            within=WAIT,
        )
        records = await all_records(harness.client, run, harness.scope)
    # Before the fix: the continued execution's discovery asked the person again, and the
    # Run waited on that consent (a day by default) before settling ABANDONED.
    assert settled_or_asked.pending == (), settled_or_asked.pending
    assert settled_or_asked.status is RunStatus.COMPLETED, settled_or_asked.reason
    assert any(isinstance(r, RunContinued) for r in records), records
    told = harness.fake.requests[-1]["messages"][-1]
    assert told["tool_call_id"] == "call-2"
    assert "consent to MCP server 'crm' was refused" in told["content"]
    assert not any(
        t["function"]["name"].startswith("crm__")
        for body in harness.fake.requests
        for t in body.get("tools", [])
    )


@pytest.mark.parametrize("continued", [False, True], ids=["one-execution", "continued"])
async def test_an_optional_server_refused_before_a_workflow_step_is_left_out(
    harness: Harness, pair: Consenting, continued: bool
) -> None:
    # As in an agent's turn: a workflow goes on without an optional server a person
    # refused, as without one that is down; its steps that need none of its tools run.
    # Continuing as new between its steps, the execution after the cut does not ask the
    # person again.
    server = pair.server
    server.refuse_consent("access_denied", None)

    @harness.registry.register
    def tick(n: int) -> dict[str, int]:
        """Count one."""
        return {"n": n}

    flow = (
        WorkflowBuilder("consent-optional-flow", registry=harness.registry)
        .tool("tick")
        .mcp_server("crm", server.url, oauth=oauth(Callback(pair.callback_url)), optional=True)
        .tool_step("first", "tick", {"n": 1})
        .tool_step("second", "tick", {"n": 2})
        .build()
    )
    async with harness.worker():
        run = await harness.client.dispatch(
            flow, "go", scope=harness.scope, continue_after_events=1 if continued else None
        )
        assert (await consent(await consent_asked(harness, run, harness.scope))).status_code == 400
        await refusal_taken(harness, run, "access_denied")
        settled_or_asked = await state_when(
            harness.client,
            run,
            harness.scope,
            lambda state: state.status.terminal or is_waiting(state),
            what="the Run to settle (or ask again)",
            within=WAIT,
        )
        records = await all_records(harness.client, run, harness.scope)
    # Before the fixes: the refusal failed the workflow ("MCP discovery failed: consent to
    # MCP server 'crm' was refused"), its server optional; and the WorkflowRun's carry left
    # the refusal out, so after a continue-as-new the second step's discovery asked the
    # person again and the Run waited on that consent.
    assert settled_or_asked.pending == (), settled_or_asked.pending
    assert settled_or_asked.status is RunStatus.COMPLETED, settled_or_asked.reason
    assert any(isinstance(r, RunContinued) for r in records) is continued, records
    assert server.state()["calls"].get("whoami", 0) == 0
    assert record_files(harness.home / "tokens") == []
