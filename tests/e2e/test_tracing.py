"""Traces and metrics of real Runs on the dev server: the span tree, no duplicates on replay.

The tracer provider is the process's global one (OpenTelemetry allows one), installed once
for these tests with an in-memory exporter; the Runs run on workers that keep no workflow
in cache (``max_cached_workflows=0``: every workflow task replays the whole history), and
the worker is stopped and another started while the Run is suspended.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import AgentBuilder, RunFailed, Scope
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import PsychPlugin, Telemetry, install_telemetry, uninstall_telemetry
from psych_runtime.workers._worker import run_worker
from psych_runtime.workflows import PsychClient, RunStatus
from tests.mcp.fixture import McpTestServer

from ._global_tracer import exporting_to
from ._http_server import CountingServer, refund_tool
from ._waiting import eventually, is_suspended, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e


@dataclass
class Traced:
    telemetry: Telemetry
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader


_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def traced() -> Iterator[Traced]:
    reader = InMemoryMetricReader()
    telemetry = install_telemetry(
        tracer_provider=exporting_to(_EXPORTER),
        meter_provider=MeterProvider(metric_readers=[reader]),
    )
    _EXPORTER.clear()
    try:
        yield Traced(telemetry, _EXPORTER, reader)
    finally:
        uninstall_telemetry()


@pytest.fixture
def orders_api() -> Iterator[CountingServer]:
    server = CountingServer(respond=lambda seen: (200, json.dumps({"refunded": True}))).start()
    yield server
    server.stop()


@pytest.fixture
async def traced_client(
    traced: Traced, dev_env: WorkflowEnvironment, harness: Harness
) -> PsychClient:
    config = dev_env.client.service_client.config
    client = await Client.connect(
        config.target_host,
        namespace=dev_env.client.namespace,
        plugins=[PsychPlugin(), *traced.telemetry.plugins()],
    )
    return PsychClient(
        client,
        store=FileVersionStore(harness.home / "traced-versions"),
        task_queue=harness.settings.task_queue,
        registry=harness.registry,
    )


def _children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    parent_id = parent.context.span_id if parent.context else None
    return sorted(
        (s for s in spans if s.parent is not None and s.parent.span_id == parent_id),
        key=lambda s: s.start_time or 0,
    )


def _one(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, f"{len(found)} spans named {name!r}: {[s.name for s in spans]}"
    return found[0]


def _points(data: MetricsData | None, name: str) -> list[tuple[dict[str, Any], Any]]:
    assert data is not None
    out: list[tuple[dict[str, Any], Any]] = []
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    out += [(dict(p.attributes or {}), p) for p in metric.data.data_points]
    return out


async def test_span_tree_of_a_run_with_tools_a_suspension_and_a_child(
    harness: Harness,
    traced: Traced,
    traced_client: PsychClient,
    orders_api: CountingServer,
) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    scope = Scope(tenant=tenant, principal="tester")

    @harness.registry.register
    def lookup(term: str) -> str:
        """Look a term up."""
        return f"{term} = 42"

    researcher = AgentBuilder("researcher", registry=harness.registry).model("fake-model")
    lead = (
        AgentBuilder("lead", registry=harness.registry)
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
        .tool("lookup")
        .subagent(
            "researcher", "Finds facts with the lookup tool.", researcher.tool("lookup").build()
        )
        .build()
    )

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        tools = [t["function"]["name"] for t in body.get("tools", [])]
        answered = sum(1 for m in messages if m["role"] == "tool")
        if "delegate" in tools:  # the lead: refund, then delegate, then answer
            if answered == 0:
                return Reply.tool_calls(ToolCall("refund", {"order_id": "42"}, id="c-refund"))
            if answered == 1:
                return Reply.tool_calls(
                    ToolCall("delegate", {"agent": "researcher", "task": "what is x?"})
                )
            return Reply.text("done")
        if answered == 0:  # the researcher
            return Reply.tool_calls(ToolCall("lookup", {"term": "x"}))
        return Reply.text(messages[-1]["content"])

    harness.fake.responder = respond
    harness.settings.policy = RulePolicy(tools={"refund": "ask"})
    client = traced_client
    async with run_worker(client.temporal, harness.settings, max_cached_workflows=0):
        run = await client.dispatch(lead, "Refund order 42", scope=scope)
        await state_when(client, run, scope, is_suspended, what="the approval")

        async def suspended_counted() -> bool:
            data = await asyncio.to_thread(traced.metrics.get_metrics_data)
            return any(
                a.get("psych.task_queue") == harness.settings.task_queue and p.value >= 1
                for a, p in _points(data, "psych.runs.suspended")
            )

        await eventually(suspended_counted, what="psych.runs.suspended to count the Run")
    # Another worker (a restart) takes the Run over from its history.
    async with run_worker(client.temporal, harness.settings, max_cached_workflows=0):
        await client.approve(run, "c-refund", scope=scope)
        result = await client.result(run, scope=scope)
        version = (await client.status(run, scope=scope)).version_hash
    assert result.status is RunStatus.COMPLETED and result.answer == "done"
    assert orders_api.count("POST", "/orders/42/refund") == 1

    spans = traced.spans.get_finished_spans()
    assert len({s.context.span_id for s in spans if s.context}) == len(spans), "a span twice"
    root = _one(spans, "invoke_agent lead")
    assert root.attributes is not None
    assert root.attributes["psych.tenant"] == tenant
    assert root.attributes["psych.version"] == version
    assert root.attributes["psych.status"] == "completed"
    assert [s.name for s in _children(spans, root)] == ["turn 1", "turn 2", "turn 3"]
    turn1, turn2, turn3 = _children(spans, root)
    for turn in (turn1, turn2, turn3):  # the Run's attributes are on every span
        assert turn.attributes is not None
        assert turn.attributes["psych.version"] == version
        assert turn.attributes["psych.tenant"] == tenant
    assert [s.name for s in _children(spans, turn1)] == ["chat fake-model", "execute_tool refund"]
    chat, refund = _children(spans, turn1)
    assert chat.attributes is not None
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "fake-model"
    assert chat.attributes["gen_ai.response.model"] == "fake-model"
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert isinstance(chat.attributes["gen_ai.usage.input_tokens"], int)
    assert chat.attributes["gen_ai.usage.output_tokens"] > 0  # type: ignore[operator]
    assert "gen_ai.usage.cache_read.input_tokens" in chat.attributes
    assert chat.attributes["psych.agent"] == "lead"
    assert chat.attributes["psych.version"] == version
    assert chat.attributes["psych.turn"] == 1
    assert chat.attributes["psych.tenant"] == tenant
    assert "gen_ai.input.messages" not in chat.attributes  # contents are off by default
    assert refund.attributes is not None
    assert refund.attributes["gen_ai.tool.name"] == "refund"
    assert refund.attributes["psych.tool.status"] == "ok"
    assert refund.attributes["psych.turn"] == 1
    assert "gen_ai.tool.call.arguments" not in refund.attributes
    (post,) = _children(spans, refund)
    assert post.name == "POST" and post.attributes is not None
    assert post.attributes["http.response.status_code"] == 200
    # The child Run nests under the turn that started it.
    names2 = [s.name for s in _children(spans, turn2)]
    assert names2 == ["chat fake-model", "invoke_agent researcher"]
    child = _children(spans, turn2)[1]
    assert [s.name for s in _children(spans, child)] == ["turn 1", "turn 2"]
    child_turn1 = _children(spans, child)[0]
    lookup_span = _children(spans, child_turn1)[1]
    assert lookup_span.name == "execute_tool lookup"
    assert lookup_span.attributes is not None
    assert lookup_span.attributes["psych.agent"] == "researcher"
    assert [s.name for s in _children(spans, turn3)] == ["chat fake-model"]
    # Every span of the Run is in one trace.
    assert {s.context.trace_id for s in spans if s.context and s.name != "POST"} >= {
        root.context.trace_id if root.context else 0
    }

    data = traced.metrics.get_metrics_data()
    tokens = {
        (a["gen_ai.token.type"], a["gen_ai.request.model"])
        for a, _ in _points(data, "gen_ai.client.token.usage")
        if a.get("psych.tenant") == tenant
    }
    assert tokens == {("input", "fake-model"), ("output", "fake-model")}
    operations = {
        a["gen_ai.operation.name"]: p.count
        for a, p in _points(data, "gen_ai.client.operation.duration")
        if a.get("psych.tenant") == tenant and "gen_ai.tool.name" not in a
    }
    assert operations == {"chat": 5}
    calls = {
        (a["gen_ai.tool.name"], a["psych.tool.status"]): p.value
        for a, p in _points(data, "psych.tool.calls")
        if a.get("psych.tenant") == tenant
    }
    assert calls == {("refund", "ok"): 1, ("lookup", "ok"): 1}
    settled = {
        (a["psych.kind"], a["psych.status"]): p.value
        for a, p in _points(data, "psych.runs.settled")
        if a.get("psych.tenant") == tenant
    }
    assert settled == {("AgentRun", "completed"): 2}


async def test_a_client_without_the_plugins_still_gets_a_traced_worker(
    harness: Harness, traced: Traced
) -> None:
    # harness.env.client carries PsychPlugin only, as the embedded dev server's does.
    plugins = [p.name() for p in harness.env.client.config()["plugins"]]
    assert "OpenTelemetryPlugin" not in plugins
    tenant = f"t{uuid.uuid4().hex[:8]}"
    scope = Scope(tenant=tenant)
    spec = AgentBuilder("solo", registry=harness.registry).model("fake-model").build()
    harness.fake.enqueue(Reply.text("hi"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hello", scope=scope)
        result = await harness.client.result(run, scope=scope)
    assert result.status is RunStatus.COMPLETED
    every = traced.spans.get_finished_spans()
    root = _one(
        [s for s in every if s.attributes and s.attributes.get("psych.tenant") == tenant],
        "invoke_agent solo",
    )
    assert root.context is not None
    spans = [s for s in every if s.context and s.context.trace_id == root.context.trace_id]
    (turn,) = _children(spans, root)
    assert [s.name for s in _children(spans, turn)] == ["chat fake-model"]


async def test_an_mcp_call_is_an_execute_tool_span_with_the_sdk_client_span_under_it(
    harness: Harness, traced: Traced, mcp_http_server: McpTestServer
) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    scope = Scope(tenant=tenant)
    spec = (
        AgentBuilder("mcp-traced")
        .model("fake-model")
        .mcp_server("tools", mcp_http_server.url)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("tools__echo", {"text": "traced"})), Reply.text("done")
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hello", scope=scope)
        result = await harness.client.result(run, scope=scope)
    assert result.status is RunStatus.COMPLETED
    every = traced.spans.get_finished_spans()
    root = _one(
        [s for s in every if s.attributes and s.attributes.get("psych.tenant") == tenant],
        "invoke_agent mcp-traced",
    )
    assert root.context is not None
    spans = [s for s in every if s.context and s.context.trace_id == root.context.trace_id]
    first_turn = _children(spans, root)[0]
    names = [s.name for s in _children(spans, first_turn)]
    assert names == ["chat fake-model", "execute_tool tools__echo"]
    tool = _one(spans, "execute_tool tools__echo")
    assert tool.attributes is not None
    assert tool.attributes.get("gen_ai.tool.type") == "extension"
    assert tool.attributes.get("psych.mcp.server") == "tools"
    # The mcp SDK's own client span of the request.
    assert [s.name for s in _children(spans, tool)] == ["MCP send tools/call echo"]


async def test_a_worker_without_telemetry_records_no_spans_whatever_the_global_provider(
    harness: Harness, traced: Traced
) -> None:
    # The process's global tracer provider stays replay-safe (set once by this module),
    # but a worker built with nothing installed is not traced.
    uninstall_telemetry()
    tenant = f"t{uuid.uuid4().hex[:8]}"
    scope = Scope(tenant=tenant)
    spec = AgentBuilder("quiet", registry=harness.registry).model("fake-model").build()
    harness.fake.enqueue(Reply.text("hi"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hello", scope=scope)
        result = await harness.client.result(run, scope=scope)
    assert result.status is RunStatus.COMPLETED
    names = [s.name for s in traced.spans.get_finished_spans()]
    assert "invoke_agent quiet" not in names
    assert not any(n.startswith("turn ") or n.startswith("chat ") for n in names)


async def test_a_failed_run_is_counted_failed_and_its_span_is_an_error(
    harness: Harness, traced: Traced, traced_client: PsychClient
) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    scope = Scope(tenant=tenant)
    spec = AgentBuilder("doomed", registry=harness.registry).model("fake-model").build()
    harness.fake.enqueue(Reply.error(400))
    async with run_worker(traced_client.temporal, harness.settings):
        run = await traced_client.dispatch(spec, "hello", scope=scope)
        with pytest.raises(RunFailed):
            await traced_client.result(run, scope=scope)
    root = _one(traced.spans.get_finished_spans(), "invoke_agent doomed")
    assert root.attributes is not None and root.attributes["psych.status"] == "failed"
    assert root.status.status_code.name == "ERROR"
    settled = {
        (a["psych.kind"], a["psych.status"]): p.value
        for a, p in _points(traced.metrics.get_metrics_data(), "psych.runs.settled")
        if a.get("psych.tenant") == tenant
    }
    assert settled == {("AgentRun", "failed"): 1}
