"""``psych dev`` with the OpenTelemetry variables: its worker's Runs are traced, and the
variables meant for psych do not configure the embedded Temporal server as well."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests._ports import free_port
from tests._upstream import Answer, Request, Upstream

from .conftest import TOOLS_REF, Cli, psych, read_until, spawn
from .test_cli_processes import script_lookup, stop

PSYCH = (sys.executable, "-m", "psych_runtime.workers.cli")


def _exported(requests: list[Request]) -> list[tuple[str, str]]:
    """(service.name, span name) of every span the receiver was sent."""
    spans: list[tuple[str, str]] = []
    for request in list(requests):
        if request.path != "/v1/traces":
            continue
        for resource in ExportTraceServiceRequest.FromString(request.body).resource_spans:
            service = next(
                (
                    a.value.string_value
                    for a in resource.resource.attributes
                    if a.key == "service.name"
                ),
                "",
            )
            for scope in resource.scope_spans:
                spans += [(service, span.name) for span in scope.spans]
    return spans


async def _run_on(port: int, cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", str(cli.spec_file), "--input", "Where is order 7?"]
    argv += ["--address", f"127.0.0.1:{port}", "--tools", TOOLS_REF]
    argv += ["--store", str(cli.home / "versions")]
    status, out, err = await psych(capsys, *argv)
    assert status == 0, out + err


async def test_dev_exports_its_runs_spans_over_otlp(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    # Its worker was never traced: nothing installed the telemetry the variables ask for.
    script_lookup(cli)
    port = free_port()
    run_span = threading.Event()

    def respond(request: Request) -> Answer:
        if ("psych", "invoke_agent support") in _exported([request]):
            run_span.set()
        return Answer(200, b"", "application/x-protobuf")

    with Upstream(respond=respond) as receiver:
        env = cli.child_env(
            PSYCH_TOOLS=TOOLS_REF,
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
            OTEL_METRICS_EXPORTER="none",
            OTEL_BSP_SCHEDULE_DELAY="50",
        )
        child = await spawn([*PSYCH, "dev", "--port", str(port)], env, cli.home)
        assert child.stdout is not None
        try:
            await read_until(child.stdout, "Ctrl-C to stop")
            await _run_on(port, cli, capsys)
            assert await asyncio.to_thread(run_span.wait, 30), "no span of the Run exported"
        finally:
            code, _, errors = await stop(child, signal.SIGTERM)
        assert code == 0, errors
        services = {service for service, _ in _exported(receiver.requests)}
    assert services == {"psych"}


async def test_dev_prints_spans_with_the_console_exporter_its_server_does_not_know(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    # The Temporal server it starts read the same variables, and refused to start on
    # OTEL_TRACES_EXPORTER=console ("unsupported OTEL exporter"), which psych ships.
    script_lookup(cli)
    port = free_port()
    env = cli.child_env(
        PSYCH_TOOLS=TOOLS_REF, OTEL_TRACES_EXPORTER="console", OTEL_BSP_SCHEDULE_DELAY="50"
    )
    child = await spawn([*PSYCH, "dev", "--port", str(port)], env, cli.home)
    assert child.stdout is not None
    try:
        await read_until(child.stdout, "Ctrl-C to stop")
        await _run_on(port, cli, capsys)
        await read_until(child.stdout, '"name": "invoke_agent support"')
    finally:
        code, _, errors = await stop(child, signal.SIGTERM)
    assert code == 0, errors
