"""OpenTelemetry for psych: configuration from ``OTEL_*``, providers, exporters, plugins.

``telemetry_from_env`` reads the standard variables and, when they configure an exporter,
installs a replay-safe tracer provider (Temporal's ``create_tracer_provider``) and a meter
provider with OTLP exporters (HTTP/protobuf or gRPC), hands them to the activities'
``gen_ai`` spans and metrics (``activities/telemetry/``), and makes ``telemetry_plugins``
return Temporal's ``OpenTelemetryPlugin`` (context propagation from client to workflow to
activity and child workflow; the workflow side's spans are in ``workflows/_tracing.py``)
and psych's Run metrics interceptor. With nothing configured, nothing is installed: no
provider, no plugin, and every span helper is a shared no-op.

What counts as configured: ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` set to
``otlp`` or ``console``, or an OTLP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT``, or the
signal's own ``..._TRACES_ENDPOINT`` / ``..._METRICS_ENDPOINT``); ``none`` turns a signal
off and ``OTEL_SDK_DISABLED=true`` both. The exporters read their own endpoint, headers,
timeout, compression and certificate variables; ``OTEL_EXPORTER_OTLP_PROTOCOL`` (or the
signal's ``..._PROTOCOL``) picks ``http/protobuf`` (the default) or ``grpc``. The resource
comes from ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` (service name ``psych``
when neither names one), the sampler from ``OTEL_TRACES_SAMPLER``.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from opentelemetry import context, trace
from opentelemetry.metrics import CallbackOptions, Counter, MeterProvider, Observation
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)
from temporalio import workflow
from temporalio.client import Client
from temporalio.contrib.opentelemetry import (
    OpenTelemetryPlugin,
    ReplaySafeTracerProvider,
    create_tracer_provider,
)
from temporalio.exceptions import FailureError
from temporalio.plugin import SimplePlugin
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from psych_runtime.activities.contract import ErrorType
from psych_runtime.activities.telemetry import carry_run_labels, instrument, uninstrument
from psych_runtime.specs import PsychError, SpecError, env_flag
from psych_runtime.workflows import TRACING_EXTERN

CONTENT_ENV = "PSYCH_OTEL_CONTENT"
TEMPORAL_SPANS_ENV = "PSYCH_OTEL_TEMPORAL_SPANS"
METER_NAME = "psych_runtime.workers"
Protocol = Literal["http/protobuf", "grpc"]
Exporter = Literal["otlp", "console"]


@dataclass(frozen=True)
class TelemetryConfig:
    """What the ``OTEL_*`` (and two ``PSYCH_OTEL_*``) variables ask for.

    Attributes:
        traces: the span exporter, or None for no tracing.
        metrics: the metric exporter, or None for no metrics.
        traces_protocol: the OTLP protocol of spans.
        metrics_protocol: the OTLP protocol of metrics.
        content: message contents, tool arguments and results go on spans
            (``PSYCH_OTEL_CONTENT=1``; off by default: they are the users' data).
        temporal_spans: Temporal's own spans too (``StartWorkflow``, ``RunActivity``,
            ``HandleQuery``, ...; ``PSYCH_OTEL_TEMPORAL_SPANS=1``). Off by default, so a
            trace is the Run's tree without one span per record poll.
    """

    traces: Exporter | None = None
    metrics: Exporter | None = None
    traces_protocol: Protocol = "http/protobuf"
    metrics_protocol: Protocol = "http/protobuf"
    content: bool = False
    temporal_spans: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TelemetryConfig:
        """The configuration the environment describes.

        Raises:
            SpecError: an exporter or protocol psych does not ship (``zipkin``,
                ``http/json``, ...; a logs exporter beside psych's traces or metrics),
                named with its variable.
        """
        env = os.environ if environ is None else environ
        # Read as every psych switch (OpenTelemetry's own reading takes only "true" for yes
        # and ignores what it does not know: OTEL_SDK_DISABLED=1 would leave it enabled).
        if env_flag(env, "OTEL_SDK_DISABLED"):
            return cls()
        config = cls(
            traces=_exporter(env, "TRACES"),
            metrics=_exporter(env, "METRICS"),
            traces_protocol=_protocol(env, "TRACES"),
            metrics_protocol=_protocol(env, "METRICS"),
            content=env_flag(env, CONTENT_ENV),
            temporal_spans=env_flag(env, TEMPORAL_SPANS_ENV),
        )
        logs = env.get("OTEL_LOGS_EXPORTER", "").strip()
        if (config.traces or config.metrics) and logs and logs.lower() != "none":
            # With psych's telemetry on, logs asked for would be silently absent (they go
            # to stderr). Without it the variable may be the embedding app's own.
            raise SpecError(
                f"OTEL_LOGS_EXPORTER={logs!r}: psych exports traces and metrics, not logs "
                "(its logs go to stderr); unset it or set it to none"
            )
        return config


def _exporter(env: Mapping[str, str], signal: str) -> Exporter | None:
    name = f"OTEL_{signal}_EXPORTER"
    text = env.get(name, "").strip().lower()
    if text == "none":
        return None
    if text in ("otlp", "console"):
        return "otlp" if text == "otlp" else "console"
    if text:
        raise SpecError(f"{name}={env[name]!r}: psych ships the otlp and console exporters")
    # Unset: the SDK's default (otlp) only when an endpoint says where to.
    endpoints = ("OTEL_EXPORTER_OTLP_ENDPOINT", f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")
    return "otlp" if any(env.get(e, "").strip() for e in endpoints) else None


def _protocol(env: Mapping[str, str], signal: str) -> Protocol:
    for name in (f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        text = env.get(name, "").strip()
        if not text:
            continue
        if text == "grpc":
            return "grpc"
        if text == "http/protobuf":
            return "http/protobuf"
        raise SpecError(f"{name}={text!r}: use http/protobuf or grpc")
    return "http/protobuf"


@dataclass
class Telemetry:
    """What is installed: the providers psych records through, and its Temporal plugins.

    Attributes:
        tracer_provider: spans (a ``ReplaySafeTracerProvider``, the process's global one),
            or None.
        meter_provider: metrics, or None.
        content: message contents go on spans.
        temporal_spans: Temporal's own spans are recorded too.
    """

    tracer_provider: ReplaySafeTracerProvider | None
    meter_provider: MeterProvider | None
    content: bool = False
    temporal_spans: bool = False
    _suspended: _SuspendedGauge | None = field(default=None, repr=False)

    def plugins(self) -> list[SimplePlugin]:
        """The Temporal plugins a client (and the workers built from it) needs."""
        plugins: list[SimplePlugin] = []
        if self.tracer_provider is not None:
            plugins.append(OpenTelemetryPlugin(add_temporal_spans=self.temporal_spans))
        if self.tracer_provider is not None or self.meter_provider is not None:
            plugins.append(
                _TelemetryPlugin(
                    self.meter_provider,
                    tracing=self.tracer_provider is not None,
                    content=self.content,
                )
            )
        return plugins

    def missing_from(self, client: Client) -> list[SimplePlugin]:
        """The plugins ``client`` does not carry, for a worker built from it to add (a
        client connected without them, such as the embedded dev server's)."""
        present = {plugin.name() for plugin in client.config()["plugins"]}
        return [plugin for plugin in self.plugins() if plugin.name() not in present]

    def watch_suspended(self, client: Client, task_queue: str) -> None:
        """Report ``psych.runs.suspended`` for ``task_queue``: the Runs whose
        ``PsychStatus`` is ``suspended`` in Temporal's visibility, counted at each metric
        collection (a no-op without metrics).

        Raises:
            PsychError: called outside a running event loop (the count is made through
                the loop that watched it).
        """
        if self._suspended is not None:
            self._suspended.watch(client, task_queue)

    def flush(self, timeout_millis: int = 10_000) -> None:
        """Export what is buffered (a process about to exit calls this)."""
        if self.tracer_provider is not None:
            self.tracer_provider.force_flush(timeout_millis)
        if isinstance(self.meter_provider, SdkMeterProvider):
            self.meter_provider.force_flush(timeout_millis)


_current: Telemetry | None = None


def current_telemetry() -> Telemetry | None:
    """What ``install_telemetry`` (or ``telemetry_from_env``) installed, if anything."""
    return _current


def telemetry_plugins() -> list[SimplePlugin]:
    """The plugins of the installed telemetry (none when nothing is installed). A client
    connected without ``psych_runtime.workers.connect`` adds them itself:
    ``Client.connect(..., plugins=[PsychPlugin(), *telemetry_plugins()])``."""
    return [] if _current is None else _current.plugins()


def install_telemetry(
    *,
    tracer_provider: ReplaySafeTracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    content: bool = False,
    temporal_spans: bool = False,
) -> Telemetry:
    """Record psych's spans and metrics through these providers (replacing what was).

    The tracer provider becomes the process's global one, which Temporal's plugin and the
    workflow side use: it must be replay-safe (``create_tracer_provider``), or workflow
    spans would be exported again on every replay.

    Raises:
        SpecError: another global tracer provider is already set (OpenTelemetry allows one
            per process).
    """
    global _current
    if tracer_provider is not None and trace.get_tracer_provider() is not tracer_provider:
        if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            raise SpecError(
                "a global OpenTelemetry tracer provider is already set: install psych's "
                "before it, or pass that one (made with temporalio.contrib.opentelemetry."
                "create_tracer_provider) to install_telemetry"
            )
        trace.set_tracer_provider(tracer_provider)
    instrument(tracer_provider=tracer_provider, meter_provider=meter_provider, content=content)
    suspended = None if meter_provider is None else _SuspendedGauge(meter_provider)
    _current = Telemetry(tracer_provider, meter_provider, content, temporal_spans, suspended)
    return _current


def uninstall_telemetry() -> None:
    """Stop recording psych's spans and metrics and forget the installed telemetry. The
    global tracer provider stays (OpenTelemetry sets it once per process), but a client
    connected from now on gets no plugin."""
    global _current
    uninstrument()
    _current = None


def telemetry_from_env(environ: Mapping[str, str] | None = None) -> Telemetry | None:
    """Install telemetry as the ``OTEL_*`` variables configure it, once per process.

    Returns what is installed (what an earlier call or ``install_telemetry`` installed,
    if one did), or None when the environment configures no exporter.

    Raises:
        SpecError: see ``TelemetryConfig.from_env``.
    """
    if _current is not None:
        return _current
    config = TelemetryConfig.from_env(environ)
    if config.traces is None and config.metrics is None:
        return None
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "psych"}))
    tracer_provider = None
    if config.traces is not None:
        tracer_provider = create_tracer_provider(resource=resource)
        exporter = _span_exporter(config.traces, config.traces_protocol)
        tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    meter_provider = None
    if config.metrics is not None:
        reader: MetricReader = PeriodicExportingMetricReader(
            _metric_exporter(config.metrics, config.metrics_protocol)
        )
        meter_provider = SdkMeterProvider(resource=resource, metric_readers=[reader])
    return install_telemetry(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        content=config.content,
        temporal_spans=config.temporal_spans,
    )


def _span_exporter(kind: Exporter, protocol: Protocol) -> SpanExporter:
    if kind == "console":
        return ConsoleSpanExporter()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return GrpcSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def _metric_exporter(kind: Exporter, protocol: Protocol) -> MetricExporter:
    if kind == "console":
        return ConsoleMetricExporter()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetricExporter,
        )

        return GrpcMetricExporter()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter()


# --- Run metrics -----------------------------------------------------------------------------


class _TelemetryPlugin(SimplePlugin):
    """Marks the worker's workflows as traced and counts settled Runs
    (``psych.runs.settled``) on it."""

    def __init__(
        self, meter_provider: MeterProvider | None, *, tracing: bool, content: bool = False
    ) -> None:
        settled = None
        if meter_provider is not None:
            settled = meter_provider.get_meter(METER_NAME).create_counter(
                "psych.runs.settled",
                unit="{run}",
                description="Runs that settled, by psych.status (completed, failed, aborted, ...).",
            )
        super().__init__(
            "psych_runtime.Telemetry",
            interceptors=[_TelemetryInterceptor(settled, tracing, content)],
        )


def _traced_with_content() -> bool:
    return True


def _traced_without_content() -> bool:
    return False


class _TelemetryInterceptor(Interceptor):
    def __init__(self, settled: Counter | None, tracing: bool, content: bool) -> None:
        self._settled = settled
        self._tracing = tracing
        self._content = content

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _RunLabels(next) if self._tracing else next

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        if self._tracing:
            # What it answers: whether contents (a failed Run's reason) go on the Run's spans.
            traced = _traced_with_content if self._content else _traced_without_content
            input.unsafe_extern_functions[TRACING_EXTERN] = traced
        if self._settled is None:
            return None
        settled: Counter = self._settled

        class _Settled(WorkflowInboundInterceptor):
            # The workflow's return (or failure) is only seen live once: a replay that
            # reaches it is the task that settles the Run, whose earlier attempts failed.
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                try:
                    result = await super().execute_workflow(input)
                except FailureError as err:
                    if _is_run_failure(err):
                        _count(settled, "failed")
                    raise
                status = getattr(result, "status", None)
                if status is not None:
                    _count(settled, str(getattr(status, "value", status)))
                return result

        return _Settled


class _RunLabels(ActivityInboundInterceptor):
    """Runs each activity without the baggage Temporal's tracing interceptor (outside this
    one) extracted from its headers, its Run labels kept for psych's spans: a library that
    propagates the context in its requests (the MCP SDK, in each request's ``_meta``)
    sends none of them to a server."""

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        token = context.attach(carry_run_labels())
        try:
            return await super().execute_activity(input)
        finally:
            context.detach(token)


def _is_run_failure(err: FailureError) -> bool:
    # A settled FAILED Run raises ApplicationError type RunFailed (workflows/_run_base.py).
    return getattr(err, "type", None) == ErrorType.RUN_FAILED


def _count(counter: Counter, status: str) -> None:
    if workflow.unsafe.is_replaying():
        return
    info = workflow.info()
    parts = info.workflow_id.split("-", 2)
    tenant = parts[1] if len(parts) == 3 and parts[0] == "psych" else ""
    counter.add(
        1, {"psych.status": status, "psych.kind": info.workflow_type, "psych.tenant": tenant}
    )


class _SuspendedGauge:
    """``psych.runs.suspended``: each watched task queue's suspended Runs, from visibility.

    Counted at collection, in the metric reader's thread, through the event loop that
    watched it: visibility is what every worker of the fleet agrees on, through crashes
    and replays, where a count kept in memory per worker would drift. Every worker of a
    queue reports the same number (aggregate with max, not sum)."""

    def __init__(self, meter_provider: MeterProvider) -> None:
        self._watched: dict[
            tuple[str, str], tuple[weakref.ref[Client], asyncio.AbstractEventLoop]
        ] = {}
        meter_provider.get_meter(METER_NAME).create_observable_gauge(
            "psych.runs.suspended",
            callbacks=[self._observe],
            unit="{run}",
            description="Runs waiting for a person or a system, per task queue.",
        )

    def watch(self, client: Client, task_queue: str) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise PsychError(
                "build the worker inside its event loop: psych.runs.suspended is counted "
                "through the loop that built it"
            ) from None
        self._watched[(client.namespace, task_queue)] = (weakref.ref(client), loop)

    def _observe(self, options: CallbackOptions) -> Iterable[Observation]:
        observed: list[Observation] = []
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for (namespace, queue), (ref, loop) in list(self._watched.items()):
            client = ref()
            if client is None or loop.is_closed():
                del self._watched[(namespace, queue)]
                continue
            if loop is running:
                # A collection made on the loop itself (a flush at shutdown) cannot wait
                # for a coroutine of that loop: it would block until its timeout.
                continue
            query = f"TaskQueue = '{queue}' AND PsychStatus = 'suspended'"
            future = asyncio.run_coroutine_threadsafe(client.count_workflows(query), loop)
            count = future.result(timeout=options.timeout_millis / 1000)
            observed.append(
                Observation(count.count, {"psych.task_queue": queue, "psych.namespace": namespace})
            )
        return observed
