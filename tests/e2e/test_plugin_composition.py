"""PsychPlugin composes with other Temporal plugins and a user's codec on a real server.

Each test runs a real AgentRun on a worker whose client (and worker) carry PsychPlugin
next to something else that configures the same settings, and checks that both survive.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, Plugin
from temporalio.contrib.opentelemetry import OpenTelemetryPlugin
from temporalio.converter import DataConverter, PayloadCodec
from temporalio.plugin import SimplePlugin
from temporalio.worker import Plugin as WorkerPlugin
from temporalio.worker import UnsandboxedWorkflowRunner, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from psych_runtime.activities import FileVersionStore
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply
from psych_runtime.workers import SANDBOX_PASSTHROUGH, PsychPlugin, run_worker
from psych_runtime.workflows import PsychClient, RunStatus

from ._global_tracer import exporting_to
from .conftest import Harness

pytestmark = pytest.mark.e2e

EXTRA_MODULE = "tests.e2e._http_server"
"""A module the other plugin passes through (any module name serves)."""


SPANS = InMemorySpanExporter()


@pytest.fixture(scope="module")
def tracing() -> None:
    """The replay-safe global tracer provider Temporal's tracing plugin requires, with
    ``SPANS`` on it (another module may have installed the provider in this process)."""
    exporting_to(SPANS)


@pytest.fixture
def spans(tracing: None) -> Iterator[InMemorySpanExporter]:
    SPANS.clear()
    yield SPANS
    SPANS.clear()


def extra_passthrough(runner: WorkflowRunner | None) -> WorkflowRunner:
    # A composing plugin written the way Temporal's contrib plugins are.
    assert isinstance(runner, SandboxedWorkflowRunner)
    return SandboxedWorkflowRunner(
        restrictions=runner.restrictions.with_passthrough_modules(EXTRA_MODULE),
        runner_class=runner.runner_class,
    )


def other_plugin(kind: str) -> SimplePlugin:
    if kind == "tracing":
        # Temporal's own tracing plugin: it adds "opentelemetry" to the passthrough list.
        return OpenTelemetryPlugin(add_temporal_spans=True)
    return SimplePlugin("tests.ExtraPassthrough", workflow_runner=extra_passthrough)


def passthrough_of(kind: str) -> str:
    return "opentelemetry" if kind == "tracing" else EXTRA_MODULE


async def run_hello(
    harness: Harness, client: Client, plugins: Sequence[WorkerPlugin], *, sandbox: bool = True
) -> tuple[str, WorkflowRunner]:
    """Run one AgentRun through ``client`` on a worker with extra ``plugins`` (in the
    workflow sandbox, or not: ``WorkerSettings.workflow_sandbox``); return its workflow id
    and the runner that worker used."""
    psych = PsychClient(
        client,
        store=FileVersionStore(harness.home / "versions"),
        task_queue=harness.settings.task_queue,
        registry=harness.registry,
    )
    spec = AgentBuilder("composed").model("fake-model").build()
    harness.fake.enqueue(Reply.text("hello"))
    settings = dataclasses.replace(harness.settings, workflow_sandbox=sandbox)
    async with run_worker(client, settings, plugins=list(plugins)) as worker:
        run = await psych.dispatch(spec, "hi", scope=harness.scope)
        result = await psych.result(run, scope=harness.scope)
        runner = worker.config(active_config=True)["workflow_runner"]
    assert result.status is RunStatus.COMPLETED
    assert result.answer == "hello"
    return run.workflow_id, runner


@pytest.mark.parametrize("kind", ["tracing", "extra"])
@pytest.mark.parametrize("order", ["psych-first", "psych-last", "other-on-worker"])
async def test_other_plugins_passthrough_survives(
    harness: Harness, spans: InMemorySpanExporter, kind: str, order: str
) -> None:
    other = other_plugin(kind)
    orders: dict[str, list[Plugin]] = {
        "psych-first": [PsychPlugin(), other],
        "psych-last": [other, PsychPlugin()],
        "other-on-worker": [PsychPlugin()],
    }
    client_plugins = orders[order]
    worker_plugins = [other] if order == "other-on-worker" else []
    base = harness.env.client
    client = Client(base.service_client, namespace=base.namespace, plugins=client_plugins)

    _, runner = await run_hello(harness, client, worker_plugins)

    assert isinstance(runner, SandboxedWorkflowRunner)
    passthrough = set(runner.restrictions.passthrough_modules)
    assert passthrough_of(kind) in passthrough
    assert set(SANDBOX_PASSTHROUGH) <= passthrough
    if kind == "tracing":
        # The tracing plugin still works inside the sandbox we share with it.
        assert "RunWorkflow:AgentRun" in {s.name for s in spans.get_finished_spans()}


@pytest.mark.parametrize("order", ["psych-first", "psych-last"])
async def test_tracing_plugin_traces_the_unsandboxed_default(
    harness: Harness, spans: InMemorySpanExporter, order: str
) -> None:
    # psych's workflows leave the sandbox by default (docs/decisions/workers.md, "The workflow
    # sandbox"): Temporal's tracing plugin keeps that runner and still traces the Run.
    plugins: list[Plugin] = [PsychPlugin(), other_plugin("tracing")]
    if order == "psych-last":
        plugins.reverse()
    base = harness.env.client
    client = Client(base.service_client, namespace=base.namespace, plugins=plugins)

    _, runner = await run_hello(harness, client, [], sandbox=False)

    assert isinstance(runner, UnsandboxedWorkflowRunner)
    assert "RunWorkflow:AgentRun" in {s.name for s in spans.get_finished_spans()}


class MarkingCodec(PayloadCodec):
    """A user's codec: wraps every payload under its own encoding, as encryption would."""

    encoding = b"binary/test-marked"

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [
            Payload(metadata={"encoding": self.encoding}, data=p.SerializeToString())
            for p in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        decoded = []
        for p in payloads:
            assert p.metadata["encoding"] == self.encoding, "payload missed the codec"
            decoded.append(Payload.FromString(p.data))
        return decoded


async def test_user_codec_is_kept_end_to_end(harness: Harness) -> None:
    base = harness.env.client
    client = Client(
        base.service_client,
        namespace=base.namespace,
        data_converter=DataConverter(payload_codec=MarkingCodec()),
        plugins=[PsychPlugin()],
    )

    workflow_id, _ = await run_hello(harness, client, [], sandbox=False)

    # What the server stored went through the codec (read raw, without decoding).
    history = await base.get_workflow_handle(workflow_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    assert [p.metadata["encoding"] for p in started.input.payloads] == [MarkingCodec.encoding]
