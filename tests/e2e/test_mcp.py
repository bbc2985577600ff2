"""MCP servers end to end: real Runs on the dev server against real MCP servers.

The servers are ``tests.mcp.server`` processes on loopback (the official SDK's server), over
streamable HTTP and SSE; the worker is psych's own (``run_worker``), so discovery, naming,
narrowing, calls, cancellation and credentials go through the code a user runs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from psych_runtime.activities import McpSettings
from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, RunFailed, Scope, WorkflowSpec
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import (
    McpDiscovered,
    RunSettled,
    RunStatus,
    ToolCallFinished,
    ToolWithheld,
)
from tests._ports import free_port
from tests.mcp.fixture import McpTestServer, start_mcp_server
from tests.mcp.published import start_published_mcp_server

from ._waiting import eventually, is_suspended, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

SPEC_TRANSPORT: dict[str, Literal["http", "sse"]] = {"streamable-http": "http", "sse": "sse"}


@pytest.fixture(params=["streamable-http", "sse"])
def mcp(request: pytest.FixtureRequest) -> McpTestServer:
    """The test server over each transport (reset before the test)."""
    name = "mcp_http_server" if request.param == "streamable-http" else "mcp_sse_server"
    server: McpTestServer = request.getfixturevalue(name)
    return server


@pytest.fixture
def mcp_bearer_server() -> Iterator[McpTestServer]:
    """A server that refuses requests without a bearer token, and logs each session's."""
    server = start_mcp_server("streamable-http", require_bearer=True)
    yield server
    server.stop()


@pytest.fixture
def mcp_filler_server() -> Iterator[McpTestServer]:
    """A server whose catalogue (20 tools of 1,000-character descriptions) is over the
    worker's default preload budget (16,000 characters)."""
    server = start_mcp_server("streamable-http", filler=20)
    yield server
    server.stop()


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on."""
    return free_port()


def offered(request: dict[str, Any]) -> list[str]:
    """The tool names one model request offered (but ``read_tool_output``, always there)."""
    names = (tool["function"]["name"] for tool in request.get("tools", []))
    return sorted(name for name in names if name != "read_tool_output")


def agent(server: McpTestServer, **grant: Any) -> AgentBuilder:
    return (
        AgentBuilder("mcp-agent")
        .instructions("Use the tools.")
        .model("fake-model")
        .mcp_server("tools", server.url, transport=SPEC_TRANSPORT[server.transport], **grant)
    )


async def test_discovery_and_a_call_with_text_and_structured_content(
    harness: Harness, mcp: McpTestServer
) -> None:
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("tools__lookup", {"id": "42"})),
        Reply.tool_calls(ToolCall("tools__echo", {"text": "hello"})),
        Reply.text("Record 42 is active."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(agent(mcp).build(), "Look up 42", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.answer == "Record 42 is active."
    names = offered(harness.fake.requests[0])
    assert {"tools__echo", "tools__lookup", "tools__charge", "tools__wipe"} <= set(names)
    lookup, echo = report.tool_calls
    assert (lookup.tool, lookup.status) == ("tools__lookup", "ok")
    assert "record 42" in (lookup.result or "")
    assert '"status": "active"' in (lookup.result or "") or '"status":"active"' in (
        lookup.result or ""
    )
    assert (echo.status, echo.result) == ("ok", "hello")
    assert mcp.calls("lookup") == 1 and mcp.calls("echo") == 1
    # One discovery per turn; the first asked the server, later ones were cached.
    assert [d.turn for d in report.mcp] == [1, 2, 3]
    assert all(d.status == "ok" and d.server == "tools" for d in report.mcp)
    assert report.mcp[0].cached is False and report.mcp[-1].cached is True
    assert len({d.catalog_hash for d in report.mcp}) == 1
    # The model saw the tool results in order.
    last = harness.fake.requests[2]["messages"]
    assert [m["role"] for m in last][-2:] == ["assistant", "tool"]


async def test_allow_narrows_what_is_offered_and_callable(
    harness: Harness, mcp_http_server: McpTestServer
) -> None:
    server = mcp_http_server
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("tools__charge", {"amount": 5})),
        Reply.text("I cannot charge."),
    )
    spec = agent(server, allow=["echo", "look*"]).build()
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Charge 5", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    assert offered(harness.fake.requests[0]) == ["tools__echo", "tools__lookup"]
    [call] = report.tool_calls
    assert call.status == "error" and "unknown tool 'tools__charge'" in (call.result or "")
    assert server.calls("charge") == 0
    assert report.mcp[0].tools == 2


async def test_an_allow_entry_naming_no_tool_is_recorded_in_the_run(
    harness: Harness, mcp_http_server: McpTestServer
) -> None:
    # An entry naming no tool the server offers granted nothing and the Run said nothing:
    # only the count of tools offered hinted at it. Each turn's discovery now names it.
    spec = agent(mcp_http_server, allow=["echo", "nope*", "tools__charge"]).build()
    harness.fake.enqueue(Reply.text("done"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    assert offered(harness.fake.requests[0]) == ["tools__echo"]
    [discovery] = report.mcp
    assert (discovery.tools, discovery.unmatched) == (1, ("nope*", "tools__charge"))
    [record] = [r for r in records if isinstance(r, McpDiscovered)]
    assert record.unmatched == ("nope*", "tools__charge")


async def test_is_error_counts_toward_the_failure_streak(
    harness: Harness, mcp_http_server: McpTestServer
) -> None:
    spec = agent(mcp_http_server).limits(failure_streak_threshold=2).build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("tools__fail", {"reason": "first"})),
        Reply.tool_calls(ToolCall("tools__fail", {"reason": "second"})),
        Reply.text("The tool keeps failing."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Try", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED
    finished = [r for r in records if isinstance(r, ToolCallFinished)]
    assert [r.status for r in finished] == ["error", "error"]
    assert "second" in finished[1].content
    assert any(isinstance(r, ToolWithheld) and r.tool == "tools__fail" for r in records)
    assert "tools__fail" not in offered(harness.fake.requests[2])


async def test_a_tool_added_mid_run_is_offered_the_next_turn(
    harness: Harness, mcp: McpTestServer
) -> None:
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("tools__slow", {"seconds": 3})),
        Reply.tool_calls(ToolCall("tools__fresh", {"text": "new"})),
        Reply.text("Used the new tool."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(agent(mcp).build(), "Go", scope=harness.scope)

        async def slow_running() -> bool:
            return mcp.calls("slow") == 1

        await eventually(slow_running, within=30, what="the slow call to reach the server")
        assert mcp.add_tool("fresh") >= 1
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert "tools__fresh" not in offered(harness.fake.requests[0])
    assert "tools__fresh" in offered(harness.fake.requests[1])
    fresh = report.tool_calls[1]
    assert (fresh.tool, fresh.status) == ("tools__fresh", "ok")
    assert "new" in (fresh.result or "")
    # The notification dropped the cache: turn 2 asked the server again.
    assert report.mcp[1].cached is False
    assert report.mcp[0].catalog_hash != report.mcp[1].catalog_hash


async def test_a_tool_keeps_its_own_name_when_a_tool_sanitised_alike_is_added_mid_run(
    harness: Harness, mcp_http_server: McpTestServer
) -> None:
    # x.y sanitises to tools__x_y, the name x_y already had. Collisions went to the first
    # by original name ("x.y" < "x_y"), so once x.y appeared the model's tools__x_y, which
    # had called x_y, called x.y instead; a name needing no change now always keeps it.
    server = mcp_http_server
    server.add_tool("x_y")
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("tools__x_y", {"text": "one"}), ToolCall("tools__slow", {"seconds": 3})
        ),
        Reply.tool_calls(ToolCall("tools__x_y", {"text": "two"})),
        Reply.text("done"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(agent(server).build(), "Go", scope=harness.scope)

        async def slow_running() -> bool:
            return server.calls("slow") == 1

        await eventually(slow_running, within=30, what="the slow call to reach the server")
        assert server.add_tool("x.y") >= 1
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    assert (server.calls("x_y"), server.calls("x.y")) == (2, 0)
    first, _, second = report.tool_calls
    assert (first.result, second.result) == ("x_y: one", "x_y: two")
    names = offered(harness.fake.requests[1])
    [dotted] = [name for name in names if name.startswith("tools__x_y-")]
    assert "tools__x_y" in names
    discovered = [r for r in records if isinstance(r, McpDiscovered) and r.turn == 2]
    assert [r.renamed for r in discovered] == [((dotted, "tools", "x.y"),)]


async def test_annotations_drive_the_policy_a_destructive_tool_waits_for_approval(
    harness: Harness, mcp_http_server: McpTestServer
) -> None:
    server = mcp_http_server
    harness.settings.policy = RulePolicy(destructive="ask")  # what --ask-destructive builds
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("tools__wipe", {}, id="call-wipe")),
        Reply.tool_calls(ToolCall("tools__echo", {"text": "read-only runs at once"})),
        Reply.text("Wiped."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(agent(server).build(), "Wipe", scope=harness.scope)
        state = await state_when(
            harness.client, run, harness.scope, is_suspended, what="the Run to suspend"
        )
        (pending,) = state.pending
        assert (pending.reason, pending.tool, pending.id) == (
            "approval",
            "tools__wipe",
            "call-wipe",
        )
        assert server.calls("wipe") == 0  # nothing ran while waiting
        await harness.client.approve(run, "call-wipe", scope=harness.scope, note="ok")
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    assert server.calls("wipe") == 1 and server.calls("echo") == 1


async def test_a_tool_added_while_its_session_is_closed_is_offered_the_next_turn(
    harness: Harness, mcp_http_server: McpTestServer, mcp_sse_server: McpTestServer
) -> None:
    # One pooled session for two servers: after each discovery one session is closed, and
    # nobody hears that server's tools/list_changed. Its listing stayed cached (for the
    # 300 s TTL), so a tool it added was not offered the next turn, as promised.
    harness.settings.mcp = McpSettings(max_sessions=1)
    harness.settings.policy = RulePolicy(destructive="ask")
    spec = agent(mcp_http_server).mcp_server("other", mcp_sse_server.url, transport="sse").build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("tools__wipe", {}, id="call-wipe")),
        Reply.tool_calls(ToolCall("tools__fresh", {"text": "a"})),
        Reply.text("done"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Go", scope=harness.scope)
        await state_when(harness.client, run, harness.scope, is_suspended, what="a suspension")
        mcp_http_server.add_tool("fresh")
        mcp_sse_server.add_tool("fresh")
        await harness.client.approve(run, "call-wipe", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert {"tools__fresh", "other__fresh"} <= set(offered(harness.fake.requests[1]))
    assert mcp_http_server.calls("fresh") == 1


async def test_an_optional_unreachable_server_is_left_out_and_the_model_told(
    harness: Harness, closed_port: int
) -> None:
    spec = (
        AgentBuilder("opt")
        .model("fake-model")
        .mcp_server("down", f"http://127.0.0.1:{closed_port}/mcp", optional=True)
        .build()
    )
    harness.fake.enqueue(Reply.text("Answered without the server."))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Hi", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED
    said = " ".join(m.get("content") or "" for m in harness.fake.requests[0]["messages"])
    assert "MCP server 'down' is unavailable" in said
    [seen] = [r for r in records if isinstance(r, McpDiscovered)]
    assert seen.status == "unavailable" and seen.error


async def test_a_required_unreachable_server_fails_the_run_naming_it(
    harness: Harness, closed_port: int
) -> None:
    spec = (
        AgentBuilder("req")
        .model("fake-model")
        .mcp_server("crm", f"http://127.0.0.1:{closed_port}/mcp")
        .build()
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Hi", scope=harness.scope)
        with pytest.raises(RunFailed, match="MCP server 'crm' is unreachable"):
            await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert harness.fake.requests == []
    # The attempt made no request: it is neither a model call nor a step in the totals.
    settled = records[-1]
    assert isinstance(settled, RunSettled) and settled.status is RunStatus.FAILED
    assert (settled.totals.model_calls, settled.totals.steps) == (0, 0)


async def test_abort_during_a_slow_call_reaches_the_server_as_a_cancellation(
    harness: Harness, mcp: McpTestServer
) -> None:
    harness.fake.enqueue(Reply.tool_calls(ToolCall("tools__slow", {"seconds": 60})))
    async with harness.worker():
        run = await harness.client.dispatch(agent(mcp).build(), "Wait", scope=harness.scope)

        async def slow_running() -> bool:
            return mcp.calls("slow") == 1

        await eventually(slow_running, within=30, what="the slow call to reach the server")
        await harness.client.abort(run, scope=harness.scope, reason="enough")
        result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 30)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.ABORTED
    assert report.tool_calls[0].status == "aborted"

    async def cancelled() -> bool:
        return "slow" in mcp.interrupted()

    await eventually(cancelled, within=15, what="the server to see the cancellation")
    assert any(c.get("tool") == "slow" for c in mcp.cancellations())


class PerTenantSecrets:
    """A SecretResolver that resolves a credential per tenant, as a vault would."""

    def __init__(self, secrets: dict[str, str]) -> None:
        self._secrets = secrets

    async def resolve(self, scope: Scope, name: str) -> str:
        return self._secrets[f"{scope.tenant}/{name}"]


async def test_tenants_with_different_credentials_never_share_a_session(
    harness: Harness,
    mcp_bearer_server: McpTestServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = mcp_bearer_server
    secrets = {"acme/crm-token": "acme-SECRET-1111", "globex/crm-token": "globex-SECRET-2222"}
    harness.settings.secrets = PerTenantSecrets(secrets)
    spec = agent(server, credential="crm-token").build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("tools__echo", {"text": "a"})),
        Reply.text("done a"),
        Reply.tool_calls(ToolCall("tools__echo", {"text": "b"})),
        Reply.text("done b"),
    )
    acme, globex = Scope(tenant="acme"), Scope(tenant="globex")
    caplog.set_level("DEBUG")
    async with harness.worker():
        first = await harness.client.dispatch(spec, "one", scope=acme)
        assert (await harness.client.result(first, scope=acme)).status is RunStatus.COMPLETED
        second = await harness.client.dispatch(spec, "two", scope=globex)
        assert (await harness.client.result(second, scope=globex)).status is RunStatus.COMPLETED
        records = [
            r.model_dump_json()
            for run, scope in ((first, acme), (second, globex))
            for r in (await harness.client.records(run, scope=scope)).records
        ]
        histories = [
            (
                await harness.env.client.get_workflow_handle(run.workflow_id).fetch_history()
            ).to_json()
            for run in (first, second)
        ]
    sessions = server.bearers()
    tokens = {token for seen in sessions.values() for token in seen}
    assert tokens == {"acme-SECRET-1111", "globex-SECRET-2222"}
    # Every session saw exactly one bearer: the two tenants' calls never shared one.
    assert all(len(set(seen)) == 1 for seen in sessions.values())
    for secret in secrets.values():
        assert not any(secret in text for text in records)
        assert not any(secret in text for text in histories)
        assert secret not in caplog.text
        assert not _stored_anywhere(harness.home / "blobs", secret.encode())


def _stored_anywhere(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


async def test_a_deferred_catalogue_is_searched_and_the_found_tool_called(
    harness: Harness, mcp_filler_server: McpTestServer
) -> None:
    server = mcp_filler_server
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("search_mcp_tools", {"query": "filler_007"})),
        Reply.tool_calls(ToolCall("tools__filler_007", {"text": "found"})),
        Reply.text("Called the found tool."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(agent(server).build(), "Find", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    first = offered(harness.fake.requests[0])
    assert "search_mcp_tools" in first
    assert not any(name.startswith("tools__filler") for name in first)
    assert "tools__filler_007" in offered(harness.fake.requests[1])
    search, found = report.tool_calls
    assert search.status == "ok" and "tools__filler_007" in (search.result or "")
    assert (found.tool, found.status) == ("tools__filler_007", "ok")
    assert "found" in (found.result or "")
    assert report.mcp[0].status == "deferred"


async def test_preload_false_defers_even_a_small_catalogue(
    harness: Harness, mcp_http_server: McpTestServer
) -> None:
    harness.fake.enqueue(Reply.text("ok"))
    async with harness.worker():
        spec = agent(mcp_http_server, preload=False).build()
        run = await harness.client.dispatch(spec, "Hi", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
    assert offered(harness.fake.requests[0]) == ["search_mcp_tools"]


@pytest.mark.parametrize("preload", [True, False])
async def test_a_workflow_tool_step_calls_an_mcp_tool(
    harness: Harness, mcp_http_server: McpTestServer, preload: bool
) -> None:
    # preload false defers the server's catalogue behind search_mcp_tools, which no
    # workflow calls: the tools its steps name are loaded for it.
    spec = WorkflowSpec.model_validate(
        {
            "name": "mcp-flow",
            "mcp_servers": [{"name": "tools", "url": mcp_http_server.url, "preload": preload}],
            "steps": [
                {
                    "kind": "tool",
                    "name": "greet",
                    "tool": "tools__echo",
                    "arguments": {"text": "hi"},
                },
                {"kind": "tool", "name": "find", "tool": "tools__lookup", "arguments": {"id": "7"}},
            ],
        }
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.outputs is not None
    assert result.outputs["greet"] == "hi"
    assert "record 7" in json.dumps(result.outputs["find"])


async def test_a_run_with_a_published_mcp_server_from_pypi(harness: Harness) -> None:
    # mcp-server-time behind fastmcp's proxy: a server nobody here wrote.
    server = await asyncio.to_thread(start_published_mcp_server, "streamable-http")
    try:
        # The proxy starts the time server on first connection: slow on a busy machine.
        harness.settings.mcp = McpSettings(connect_timeout_seconds=30.0)
        spec = AgentBuilder("clock").model("fake-model").mcp_server("time", server.url).build()
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("time__get_current_time", {"timezone": "UTC"})),
            Reply.text("It is now."),
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "What time is it?", scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
            report = await harness.client.report(run, scope=harness.scope)
    finally:
        server.stop()
    assert result.status is RunStatus.COMPLETED, result.reason
    assert {"time__convert_time", "time__get_current_time"} <= set(
        offered(harness.fake.requests[0])
    )
    [call] = report.tool_calls
    assert call.status == "ok", call.result
    assert "UTC" in (call.result or "")
