"""Telemetry configuration from OTEL_*, the untraced path, and what spans may carry."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.contract import (
    ChatMessage,
    CodeToolCall,
    HttpToolCall,
    ModelCallInput,
)
from psych_runtime.activities.model import Endpoint, ModelActivities, ModelEndpoints
from psych_runtime.activities.telemetry import _spans
from psych_runtime.activities.tools import ToolActivities
from psych_runtime.specs import HttpTool, ModelRef, Scope, SpecError, ToolRegistry
from psych_runtime.testing import FakeModel, Reply
from psych_runtime.workers import _telemetry
from psych_runtime.workers._telemetry import (
    TelemetryConfig,
    _span_exporter,
    current_telemetry,
    telemetry_from_env,
    telemetry_plugins,
)
from tests._upstream import Answer, Request, Upstream

# --- configuration --------------------------------------------------------------------------


def test_nothing_configured_is_off() -> None:
    config = TelemetryConfig.from_env({})
    assert (config.traces, config.metrics, config.content) == (None, None, False)


def test_an_otlp_endpoint_turns_both_signals_on_over_http() -> None:
    config = TelemetryConfig.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert (config.traces, config.metrics) == ("otlp", "otlp")
    assert (config.traces_protocol, config.metrics_protocol) == ("http/protobuf",) * 2


def test_a_signal_endpoint_turns_that_signal_on_only() -> None:
    config = TelemetryConfig.from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c/v1/traces"})
    assert (config.traces, config.metrics) == ("otlp", None)


def test_none_and_sdk_disabled_turn_signals_off() -> None:
    base = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    config = TelemetryConfig.from_env({**base, "OTEL_METRICS_EXPORTER": "none"})
    assert (config.traces, config.metrics) == ("otlp", None)
    config = TelemetryConfig.from_env({**base, "OTEL_SDK_DISABLED": "true"})
    assert (config.traces, config.metrics) == (None, None)


def test_exporter_console_and_grpc_protocol_per_signal() -> None:
    config = TelemetryConfig.from_env(
        {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "console",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf",
            "PSYCH_OTEL_CONTENT": "1",
            "PSYCH_OTEL_TEMPORAL_SPANS": "1",
        }
    )
    assert (config.traces, config.metrics) == ("otlp", "console")
    assert (config.traces_protocol, config.metrics_protocol) == ("grpc", "http/protobuf")
    assert config.content and config.temporal_spans
    assert isinstance(_span_exporter("otlp", "grpc"), GrpcSpanExporter)
    assert isinstance(_span_exporter("otlp", "http/protobuf"), OTLPSpanExporter)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
        ({"PSYCH_OTEL_CONTENT": "maybe"}, "PSYCH_OTEL_CONTENT"),
        # No logs exporter: asked for, logs would not be exported, silently.
        (
            {"OTEL_LOGS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
            "OTEL_LOGS_EXPORTER='otlp': psych exports traces",
        ),
    ],
)
def test_what_psych_does_not_ship_is_refused_by_name(env: dict[str, str], named: str) -> None:
    with pytest.raises(SpecError, match=named):
        TelemetryConfig.from_env(env)


def test_a_logs_exporter_without_psychs_telemetry_is_the_embedding_apps() -> None:
    # A host app exporting its own logs connects psych's client (which installs nothing).
    config = TelemetryConfig.from_env({"OTEL_LOGS_EXPORTER": "otlp"})
    assert (config.traces, config.metrics) == (None, None)


def test_nothing_configured_installs_nothing() -> None:
    assert current_telemetry() is None
    assert telemetry_from_env({}) is None
    assert current_telemetry() is None
    assert telemetry_plugins() == []
    call = model_call()
    assert _spans.chat_span(call) is _spans.chat_span(call)  # the one shared no-op


# --- what spans carry -----------------------------------------------------------------------


@pytest.fixture
def recorded() -> Iterator[tuple[InMemorySpanExporter, InMemoryMetricReader]]:
    """Spans and metrics of the activities, through local providers (not the global one)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    _spans.instrument(
        tracer_provider=provider,
        meter_provider=MeterProvider(metric_readers=[reader]),
        content=False,
    )
    try:
        yield exporter, reader
    finally:
        _spans.uninstrument()
        assert _telemetry._current is None


@pytest.fixture
async def fake() -> AsyncIterator[FakeModel]:
    async with FakeModel(models=("fake-model",)) as model:
        yield model


def model_call() -> ModelCallInput:
    return ModelCallInput(
        run_id="r1",
        turn=2,
        model="fake-model",
        params=ModelRef(model="fake-model"),
        new_messages=(ChatMessage(role="user", content="my card is 4111"),),
        scope=Scope(tenant="acme"),
    )


def only(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    (span,) = [s for s in exporter.get_finished_spans() if s.name == name]
    return span


async def test_contents_go_on_spans_only_when_enabled(
    recorded: tuple[InMemorySpanExporter, InMemoryMetricReader], fake: FakeModel, tmp_path: Path
) -> None:
    exporter, _ = recorded
    async with httpx.AsyncClient() as http:
        acts = ModelActivities(
            endpoints=ModelEndpoints(default=Endpoint(fake.base_url, "k")),
            blobs=LocalBlobStore(tmp_path / "blobs"),
            http=http,
        )
        fake.enqueue(Reply.text("noted: 4111"), Reply.text("noted: 4111"))
        await ActivityEnvironment().run(acts.complete, model_call())
        off = only(exporter, "chat fake-model")
        exporter.clear()
        _spans.instrument(tracer_provider=_provider_of(exporter), meter_provider=None, content=True)
        await ActivityEnvironment().run(acts.complete, model_call())
        on = only(exporter, "chat fake-model")
    assert off.attributes is not None and on.attributes is not None
    assert "4111" not in json.dumps(dict(off.attributes), default=str)
    assert off.attributes["psych.turn"] == 2 and off.attributes["psych.run_id"] == "r1"
    assert "my card is 4111" in str(on.attributes["gen_ai.input.messages"])
    assert "noted: 4111" in str(on.attributes["gen_ai.output.messages"])


def _provider_of(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


async def test_a_failed_model_call_is_an_error_span_with_its_status(
    recorded: tuple[InMemorySpanExporter, InMemoryMetricReader], fake: FakeModel, tmp_path: Path
) -> None:
    exporter, reader = recorded
    async with httpx.AsyncClient() as http:
        acts = ModelActivities(
            endpoints=ModelEndpoints(default=Endpoint(fake.base_url, "k")),
            blobs=LocalBlobStore(tmp_path / "blobs"),
            http=http,
        )
        fake.enqueue(Reply.error(503))
        with pytest.raises(Exception, match="503"):
            await ActivityEnvironment().run(acts.complete, model_call())
    span = only(exporter, "chat fake-model")
    assert span.attributes is not None and span.attributes["error.type"] == "503"
    assert span.status.status_code.name == "ERROR"
    data = reader.get_metrics_data()
    assert data is not None
    points = [
        dict(p.attributes or {})
        for r in data.resource_metrics
        for s in r.scope_metrics
        for m in s.metrics
        if m.name == "gen_ai.client.operation.duration"
        for p in m.data.data_points
    ]
    assert [p["error.type"] for p in points] == ["503"]


async def test_tool_spans_carry_the_outcome_and_an_http_span_under_an_http_tool(
    recorded: tuple[InMemorySpanExporter, InMemoryMetricReader], tmp_path: Path
) -> None:
    exporter, reader = recorded
    registry = ToolRegistry()

    @registry.register
    def explode(x: int) -> str:
        """Always fails."""
        raise ValueError(f"no {x}")

    def respond(request: Request) -> Answer:
        return Answer(500 if "bad" in request.path else 200, b'{"ok": true}')

    with Upstream(respond=respond) as upstream:
        tools = ToolActivities(registry=registry, blobs=LocalBlobStore(tmp_path / "b"))
        env = ActivityEnvironment()
        scope = Scope(tenant="acme")
        await env.run(
            tools.code,
            CodeToolCall(
                run_id="r1",
                call_id="c1",
                tool="explode",
                arguments={"x": 1},
                large_result_bytes=1000,
                scope=scope,
            ),
        )
        for path in ("/good", "/bad"):
            await env.run(
                tools.http,
                HttpToolCall(
                    run_id="r1",
                    call_id=f"c{path}",
                    tool=HttpTool(
                        name="fetch", description="Fetch.", url=upstream.url + path, method="GET"
                    ),
                    arguments={},
                    large_result_bytes=1000,
                    scope=scope,
                ),
            )
        await tools.aclose()
    spans = exporter.get_finished_spans()
    explode_span = only(exporter, "execute_tool explode")
    assert explode_span.attributes is not None
    assert explode_span.attributes["psych.tool.status"] == "error"
    assert explode_span.status.status_code.name == "ERROR"
    fetches = [s for s in spans if s.name == "execute_tool fetch"]
    gets = [s for s in spans if s.name == "GET"]
    assert len(fetches) == 2 and len(gets) == 2
    for fetch, get in zip(fetches, gets, strict=True):
        assert get.parent is not None and fetch.context is not None
        assert get.parent.span_id == fetch.context.span_id
    assert [g.attributes["http.response.status_code"] for g in gets if g.attributes] == [200, 500]
    data = reader.get_metrics_data()
    assert data is not None
    counted = {
        (p.attributes["gen_ai.tool.name"], p.attributes["psych.tool.status"]): p.value
        for r in data.resource_metrics
        for s in r.scope_metrics
        for m in s.metrics
        if m.name == "psych.tool.calls"
        for p in m.data.data_points
        if p.attributes and isinstance(p, NumberDataPoint)
    }
    assert counted == {("explode", "error"): 1, ("fetch", "ok"): 1, ("fetch", "error"): 1}


async def test_an_http_spans_url_carries_path_arguments_only_with_contents_on(
    recorded: tuple[InMemorySpanExporter, InMemoryMetricReader], tmp_path: Path
) -> None:
    # The filled URL was on every span: an argument in the path is the user's data as
    # much as gen_ai.tool.call.arguments, which only PSYCH_OTEL_CONTENT=1 records.
    exporter, _ = recorded
    with Upstream(respond=lambda _: Answer(200, b"{}")) as upstream:
        url = upstream.url + "/cards/{number}?v=1"
        tool = HttpTool(name="card", description="A card.", url=url, method="GET")
        call = HttpToolCall(
            run_id="r1",
            call_id="c1",
            tool=tool,
            arguments={"number": "4111", "detail": "full"},
            large_result_bytes=1000,
            scope=Scope(tenant="acme"),
        )
        tools = ToolActivities(registry=ToolRegistry(), blobs=LocalBlobStore(tmp_path / "b"))
        await ActivityEnvironment().run(tools.http, call)
        off = only(exporter, "GET")
        exporter.clear()
        _spans.instrument(tracer_provider=_provider_of(exporter), meter_provider=None, content=True)
        await ActivityEnvironment().run(tools.http, call)
        on = only(exporter, "GET")
        await tools.aclose()
    assert [r.path for r in upstream.requests] == ["/cards/4111?v=1&detail=full"] * 2
    assert off.attributes is not None and on.attributes is not None
    assert "4111" not in json.dumps(dict(off.attributes), default=str)
    assert off.attributes["url.full"] == upstream.url + "/cards/{number}"
    assert off.attributes["url.template"] == "/cards/{number}"
    assert on.attributes["url.full"] == upstream.url + "/cards/4111"  # never the query


def test_a_tool_call_that_raises_is_failed_and_a_cancelled_one_cancelled(
    recorded: tuple[InMemorySpanExporter, InMemoryMetricReader],
) -> None:
    exporter, reader = recorded
    for tool, raised in (
        ("broken", ValueError("blob store down")),
        ("stopped", asyncio.CancelledError()),
    ):
        span = _spans.tool_span(tool=tool, call_id="c", run_id="r", tenant="acme", arguments={})
        with pytest.raises(type(raised)), span:
            raise raised
    broken = only(exporter, "execute_tool broken")
    assert broken.attributes is not None and broken.attributes["error.type"] == "ValueError"
    data = reader.get_metrics_data()
    assert data is not None
    counted = {
        p.attributes["gen_ai.tool.name"]: p.attributes["psych.tool.status"]
        for r in data.resource_metrics
        for s in r.scope_metrics
        for m in s.metrics
        if m.name == "psych.tool.calls"
        for p in m.data.data_points
        if p.attributes
    }
    assert counted == {"broken": "failed", "stopped": "cancelled"}


async def test_an_egress_refusal_is_counted_by_the_kind_of_rule(
    recorded: tuple[InMemorySpanExporter, InMemoryMetricReader],
) -> None:
    from psych_runtime.activities.egress import Egress, EgressDenied, EgressSettings

    _, reader = recorded
    egress = Egress(EgressSettings())
    with pytest.raises(EgressDenied):
        await egress.http("acme").get("http://127.0.0.1:9/")
    await egress.aclose()
    data = reader.get_metrics_data()
    assert data is not None
    points = [
        (dict(p.attributes or {}), getattr(p, "value", None))
        for r in data.resource_metrics
        for s in r.scope_metrics
        for m in s.metrics
        if m.name == "psych.egress.refused"
        for p in m.data.data_points
    ]
    assert points == [({"psych.egress.rule": "loopback"}, 1)]
