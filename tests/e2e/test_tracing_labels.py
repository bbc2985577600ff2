"""What a real Run's spans carry, and what they do not send: the Run's labels on every
span psych makes (an HTTP tool's request too), the tool call's status on a cancelled call's
span, each execution's mark on a Run continued as new, a failed Run's reason on its span only
with contents on, and none of the Run's baggage in what goes to an MCP server."""

from __future__ import annotations

import asyncio
import itertools
import uuid

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from psych_runtime.specs import AgentBuilder, RunFailed, Scope, WorkflowBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import install_telemetry
from psych_runtime.workers._worker import run_worker
from psych_runtime.workflows import PsychClient, RunStatus
from tests.mcp.fixture import McpTestServer

from ._http_server import CountingServer, refund_tool
from .conftest import Harness
from .test_tracing import (  # noqa: F401 (pytest finds fixtures by name)
    Traced,
    _children,
    _one,
    orders_api,
    traced,
    traced_client,
)

pytestmark = pytest.mark.e2e

_LABELS = ("psych.run_id", "psych.tenant", "psych.agent", "psych.version", "psych.turn")


async def test_an_http_tools_request_span_carries_the_runs_labels(
    harness: Harness,
    traced: Traced,  # noqa: F811 (the fixture)
    traced_client: PsychClient,  # noqa: F811 (the fixture)
    orders_api: CountingServer,  # noqa: F811 (the fixture)
) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    scope = Scope(tenant=tenant)
    spec = (
        AgentBuilder("refunder", registry=harness.registry)
        .model("fake-model")
        .http_tool(
            "refund",
            **refund_tool(orders_api.url),
            input_schema={
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        )
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("refund", {"order_id": "42"}, id="c-r")), Reply.text("done")
    )
    async with run_worker(traced_client.temporal, harness.settings):
        run = await traced_client.dispatch(spec, "refund 42", scope=scope)
        result = await traced_client.result(run, scope=scope)
    assert result.status is RunStatus.COMPLETED
    every = traced.spans.get_finished_spans()
    tool = _one(
        [s for s in every if s.attributes and s.attributes.get("psych.tenant") == tenant],
        "execute_tool refund",
    )
    assert tool.attributes is not None
    (post,) = _children(every, tool)
    assert post.name == "POST" and post.attributes is not None
    labels = {key: post.attributes.get(key) for key in _LABELS}
    assert labels == {key: tool.attributes[key] for key in _LABELS}
    assert labels["psych.run_id"] == run.run_id and labels["psych.turn"] == 1
    # Nothing of the trace went to the HTTP tool's server, nor to the model provider.
    trace_headers = {"traceparent", "tracestate", "baggage"}
    (seen,) = orders_api.seen
    assert not trace_headers & set(seen.headers)
    assert harness.fake.headers, "the model calls' headers were recorded"
    assert not any(trace_headers & set(headers) for headers in harness.fake.headers)


async def test_a_cancelled_tool_calls_span_says_cancelled(
    harness: Harness,
    traced: Traced,  # noqa: F811 (the fixture)
    traced_client: PsychClient,  # noqa: F811 (the fixture)
) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    scope = Scope(tenant=tenant)
    started = asyncio.Event()

    @harness.registry.register
    async def export_orders() -> str:
        """Export every order (slow)."""
        started.set()
        await asyncio.Event().wait()  # until cancelled
        return "exported"

    spec = (
        AgentBuilder("exporter", registry=harness.registry)
        .model("fake-model")
        .tool("export_orders")
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("export_orders", {}, id="c-exp")), Reply.text("never")
    )
    async with run_worker(traced_client.temporal, harness.settings):
        run = await traced_client.dispatch(spec, "export", scope=scope)
        await asyncio.wait_for(started.wait(), 30)
        await traced_client.abort(run, scope=scope, reason="wrong customer")
        result = await traced_client.result(run, scope=scope)
    assert result.status is RunStatus.ABORTED
    every = traced.spans.get_finished_spans()
    mine = [s for s in every if s.attributes and s.attributes.get("psych.tenant") == tenant]
    tool = _one(mine, "execute_tool export_orders")
    assert tool.attributes is not None
    assert tool.attributes.get("psych.tool.status") == "cancelled"
    root = _one(mine, "invoke_agent exporter")
    assert root.attributes is not None and root.attributes["psych.status"] == "aborted"


async def test_an_mcp_server_gets_none_of_the_runs_baggage(
    harness: Harness,
    traced: Traced,  # noqa: F811 (the fixture)
    traced_client: PsychClient,  # noqa: F811 (the fixture)
    mcp_http_server: McpTestServer,
) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    scope = Scope(tenant=tenant)
    spec = (
        AgentBuilder("mcp-labels")
        .model("fake-model")
        .mcp_server("tools", mcp_http_server.url)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("tools__echo", {"text": "hi"})), Reply.text("done")
    )
    async with run_worker(traced_client.temporal, harness.settings):
        run = await traced_client.dispatch(spec, "hello", scope=scope)
        result = await traced_client.result(run, scope=scope)
    assert result.status is RunStatus.COMPLETED
    meta = mcp_http_server.meta_keys()
    assert "tools/call" in meta, meta
    sent = {key for keys in meta.values() for key in keys}
    assert "baggage" not in sent, meta
    # The call is still traced: the SDK's client span nests in the tool call's.
    every = traced.spans.get_finished_spans()
    tool = _one(
        [s for s in every if s.attributes and s.attributes.get("psych.tenant") == tenant],
        "execute_tool tools__echo",
    )
    assert [s.name for s in _children(every, tool)] == ["MCP send tools/call echo"]


async def test_a_run_continued_as_new_marks_each_execution_that_did_not_settle(
    harness: Harness,
    traced: Traced,  # noqa: F811 (the fixture)
    traced_client: PsychClient,  # noqa: F811 (the fixture)
) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    scope = Scope(tenant=tenant)

    @harness.registry.register
    def lookup(term: str) -> str:
        """Look a term up."""
        return f"{term} = 42"

    spec = AgentBuilder("chain", registry=harness.registry).model("fake-model").tool("lookup")
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup", {"term": "a"})),
        Reply.tool_calls(ToolCall("lookup", {"term": "b"})),
        Reply.text("done"),
    )
    async with run_worker(traced_client.temporal, harness.settings):
        run = await traced_client.dispatch(
            spec.build(), "look a and b up", scope=scope, continue_after_events=1
        )
        result = await traced_client.result(run, scope=scope)
    assert result.status is RunStatus.COMPLETED
    every = traced.spans.get_finished_spans()
    mine = [s for s in every if s.attributes and s.attributes.get("psych.tenant") == tenant]
    runs = sorted(
        (s for s in mine if s.name == "invoke_agent chain"), key=lambda s: s.start_time or 0
    )
    assert len(runs) == 3, [s.name for s in mine]  # one execution per turn
    *continued, settled = runs
    for span in continued:
        assert span.attributes is not None
        assert span.attributes.get("psych.continued_as_new") is True
        assert "psych.status" not in span.attributes
    assert settled.attributes is not None
    assert settled.attributes["psych.status"] == "completed"
    assert "psych.continued_as_new" not in settled.attributes
    # Each execution's Run span nests in the turn the one before it ended with.
    for before, after in itertools.pairwise(runs):
        (turn,) = _children(mine, before)
        assert after.parent is not None and turn.context is not None
        assert after.parent.span_id == turn.context.span_id


async def test_a_failed_runs_reason_is_on_its_span_only_with_contents_on(
    harness: Harness,
    traced: Traced,  # noqa: F811 (the fixture)
    traced_client: PsychClient,  # noqa: F811 (the fixture)
) -> None:
    @harness.registry.register
    def create_account(plan: str) -> str:
        """Create an account on a plan."""
        raise ValueError(f"card 4111 1111 1111 1111 of Ada Lovelace declined for {plan}")

    spec = (
        WorkflowBuilder("signup", registry=harness.registry)
        .tool("create_account")
        .tool_step("create", "create_account", {"plan": "gold"})
        .build()
    )

    def run_span(tenant: str) -> ReadableSpan:
        every = traced.spans.get_finished_spans()
        mine = [s for s in every if s.attributes and s.attributes.get("psych.tenant") == tenant]
        span = _one(mine, "invoke_workflow signup")
        assert span.attributes is not None and span.attributes["psych.status"] == "failed"
        assert span.status.status_code.name == "ERROR"
        return span

    # Contents off (the default): the tool's error text is on no span.
    scope = Scope(tenant=f"t{uuid.uuid4().hex[:8]}")
    async with run_worker(traced_client.temporal, harness.settings):
        run = await traced_client.dispatch(spec, "sign Ada up", scope=scope)
        with pytest.raises(RunFailed, match="4111"):
            await traced_client.result(run, scope=scope)
    every = traced.spans.get_finished_spans()
    for span in every:
        assert "4111" not in (span.status.description or ""), span.name
        assert not any("4111" in str(v) for v in (span.attributes or {}).values()), span.name
    assert "4111" not in (run_span(scope.tenant).status.description or "")

    # Contents on: the reason is the Run span's status description, as it is the Run's.
    install_telemetry(
        tracer_provider=traced.telemetry.tracer_provider,
        meter_provider=traced.telemetry.meter_provider,
        content=True,
    )
    scope = Scope(tenant=f"t{uuid.uuid4().hex[:8]}")
    async with harness.worker():  # a worker adds the plugins of the telemetry installed
        run = await harness.client.dispatch(spec, "sign Ada up", scope=scope)
        with pytest.raises(RunFailed):
            await harness.client.result(run, scope=scope)
    assert "4111" in (run_span(scope.tenant).status.description or "")
