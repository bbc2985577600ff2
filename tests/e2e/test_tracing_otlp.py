"""A worker configured by OTEL_* alone exports a real Run's spans and metrics over OTLP/HTTP.

The worker runs in its own process (``tests.e2e._worker_proc``, connected with
``workers.connect``) with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at a loopback HTTP
server that decodes the protobuf requests it receives on ``/v1/traces`` and
``/v1/metrics``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Iterator

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus
from tests._upstream import Answer, Request, Upstream
from tests.forking import aio

from ._waiting import eventually
from ._worker_proc import READY, REPO, lookup_order
from .conftest import Harness

pytestmark = pytest.mark.e2e


class Receiver:
    """What the OTLP endpoint received: span names with attributes, metric names."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, dict[str, object]]] = []
        self.metrics: set[str] = set()
        self.service_names: set[str] = set()
        self._lock = threading.Lock()

    def respond(self, request: Request) -> Answer:
        if request.path == "/v1/traces":
            traces = ExportTraceServiceRequest.FromString(request.body)
            with self._lock:
                for resource in traces.resource_spans:
                    for attr in resource.resource.attributes:
                        if attr.key == "service.name":
                            self.service_names.add(attr.value.string_value)
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            values = {
                                a.key: getattr(a.value, a.value.WhichOneof("value") or "")
                                for a in span.attributes
                            }
                            self.spans.append((span.name, values))
        elif request.path == "/v1/metrics":
            data = ExportMetricsServiceRequest.FromString(request.body)
            with self._lock:
                for exported in data.resource_metrics:
                    for metrics in exported.scope_metrics:
                        self.metrics.update(m.name for m in metrics.metrics)
        else:
            return Answer(404, b"")
        return Answer(200, b"", "application/x-protobuf")


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, Upstream]]:
    got = Receiver()
    with Upstream(respond=got.respond) as upstream:
        yield got, upstream


async def test_otel_env_exports_a_runs_spans_and_metrics_over_otlp_http(
    harness: Harness, receiver: tuple[Receiver, Upstream]
) -> None:
    got, upstream = receiver
    target = harness.env.client.service_client.config.target_host
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": upstream.url,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_METRIC_EXPORT_INTERVAL": "200",
    }
    env.pop("OTEL_SERVICE_NAME", None)
    # Forked (tests.forking): the OTEL_* variables are read when telemetry is set up, after.
    proc = await aio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.e2e._worker_proc",
        target,
        harness.settings.task_queue,
        str(harness.home / "worker-blobs"),
        harness.fake.base_url,
        cwd=REPO,
        env=env,
        stdout=aio.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
        assert line.decode().strip() == READY, line
        harness.registry.register(lookup_order)  # what the worker process has
        spec = (
            AgentBuilder("support", registry=harness.registry)
            .model("fake-model")
            .tool("lookup_order")
            .build()
        )
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})),
            Reply.text("Order 42 was delivered."),
        )
        client = harness.client
        run = await client.dispatch(spec, "Where is order 42?", scope=harness.scope)
        result = await client.result(run, scope=harness.scope)
        assert result.status is RunStatus.COMPLETED

        wanted = {"invoke_agent support", "turn 1", "turn 2", "chat fake-model"}
        wanted |= {"execute_tool lookup_order"}

        async def exported() -> bool:
            names = {name for name, _ in got.spans}
            return wanted <= names and {"gen_ai.client.token.usage", "psych.runs.settled"} <= (
                got.metrics
            )

        await eventually(exported, within=20, what="the Run's spans and metrics at the receiver")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
    names = [name for name, _ in got.spans]
    assert names.count("invoke_agent support") == 1
    assert names.count("chat fake-model") == 2
    chat = next(attrs for name, attrs in got.spans if name == "chat fake-model")
    assert chat["psych.agent"] == "support"
    assert chat["psych.tenant"] == "acme"
    assert chat["gen_ai.request.model"] == "fake-model"
    assert got.service_names == {"psych"}
    assert {"gen_ai.client.operation.duration", "psych.tool.calls"} <= got.metrics
