"""Section 7: the per-turn cost of tracing and metrics (``OTEL_*`` configured) against none.

Two workers of the same code on one fast-dispatch server, each on its own task queue: one
built with no telemetry installed (what a worker is when no ``OTEL_*`` variable configures
an exporter), one whose client carries the telemetry plugins, recording every span (Run,
turns, model and tool calls, Temporal's context propagation) through a replay-safe tracer
provider and a batch span processor, and every metric through an SDK meter provider. The
exporters keep nothing and send nothing (a span exporter that counts, a metric reader that
is never collected), so the figure is what the process pays to record, not a collector's
network. Telemetry is installed before each traced Run and removed before each untraced
one (the activities' helpers are process-wide; the workflow side follows each worker's
plugins), and AgentRuns of section 1's length alternate between the two, which goes
first alternating as well.

The hot path of an untraced worker is timed on its own too: one model call's span helper
(``chat_span``: a global lookup returning the shared no-op) entered, given its result and
left, against the same steps on a plain object.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from temporalio.client import Client
from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider, create_tracer_provider
from temporalio.testing import WorkflowEnvironment

from bench._agent import SCOPE, AgentBench, responder
from bench._history import history_facts
from bench._sections import AGENT_MODEL_ACTIVITY, Settings
from bench._table import median, table
from psych_runtime.activities import FileVersionStore
from psych_runtime.activities.contract import (
    ChatMessage,
    Latency,
    ModelCallInput,
    ModelCallResult,
    Usage,
)
from psych_runtime.activities.telemetry import chat_span
from psych_runtime.specs import ModelRef
from psych_runtime.testing import FakeModel
from psych_runtime.workers import (
    PsychPlugin,
    install_telemetry,
    run_worker,
    uninstall_telemetry,
)
from psych_runtime.workflows import PsychClient

MODEL = "fake-model"
HOT_PATH_ROUNDS = 200_000


class _CountingExporter(SpanExporter):
    """Keeps a count of the spans it is handed, and nothing else."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


@dataclass(frozen=True)
class TracingSample:
    """One Run, per turn."""

    wall_ms_per_turn: float
    steady_ms_per_turn: float | None


@dataclass
class TracingResult:
    """Section 7: AgentRun untraced and traced, one Run at a time."""

    turns: int
    off: list[TracingSample] = field(default_factory=list)
    on: list[TracingSample] = field(default_factory=list)
    spans_per_turn: float = float("nan")
    """Spans the traced Runs exported, per turn."""
    off_hot_path_ns: float = float("nan")
    """An untraced model call's span helper, entered and left, nanoseconds."""
    plain_ns: float = float("nan")
    """The same steps on a plain object, nanoseconds."""


class _Plain:
    def __enter__(self) -> _Plain:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def done(self, result: object) -> object:
        return result


def _hot_path_ns() -> tuple[float, float]:
    call = ModelCallInput(
        run_id="r",
        turn=1,
        model=MODEL,
        params=ModelRef(model=MODEL),
        new_messages=(ChatMessage(role="user", content="hi"),),
        scope=SCOPE,
    )
    answer = ModelCallResult(
        model=MODEL,
        system_ref=None,
        context_ref="sha256:" + "0" * 64,
        text="hi",
        usage=Usage(),
        latency=Latency(queue_wait_ms=0.0, duration_ms=0.0),
    )
    plain = _Plain()
    started = time.perf_counter()
    for _ in range(HOT_PATH_ROUNDS):
        with chat_span(call) as span:
            span.done(answer)
    helper = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(HOT_PATH_ROUNDS):
        with plain as same:
            same.done(answer)
    bare = time.perf_counter() - started
    return helper / HOT_PATH_ROUNDS * 1e9, bare / HOT_PATH_ROUNDS * 1e9


@contextlib.asynccontextmanager
async def _bench(
    env: WorkflowEnvironment, home: Path, fake: FakeModel, plugins: list[Any]
) -> AsyncIterator[AgentBench]:
    bench = AgentBench(env, home, fake)
    config = env.client.service_client.config
    client = await Client.connect(
        config.target_host, namespace=env.client.namespace, plugins=[PsychPlugin(), *plugins]
    )
    bench.client = PsychClient(
        client,
        store=FileVersionStore(home / "versions"),
        task_queue=bench.task_queue,
        registry=bench.registry,
    )
    async with run_worker(client, bench.settings):
        yield bench


async def tracing_cost(
    env: WorkflowEnvironment,
    home: Path,
    settings: Settings,
    provider: ReplaySafeTracerProvider | None = None,
) -> TracingResult:
    """Alternate AgentRuns untraced and traced (after one warm-up Run of each).

    ``provider`` is the process's global tracer provider if one is already set (it can be
    set once); without, a replay-safe one is made and becomes it.
    """
    turns = settings.sequential_turns
    exporter = _CountingExporter()
    provider = provider or create_tracer_provider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])

    def traced() -> None:
        install_telemetry(tracer_provider=provider, meter_provider=meters)

    result = TracingResult(turns=turns)
    result.off_hot_path_ns, result.plain_ns = _hot_path_ns()
    async with FakeModel(models=(MODEL,), record=False) as fake:
        fake.responder = responder
        try:
            plugins = install_telemetry(tracer_provider=provider, meter_provider=meters).plugins()
            async with _bench(env, home / "on", fake, plugins) as on:
                # Built with nothing installed, as an unconfigured worker is.
                uninstall_telemetry()
                async with _bench(env, home / "off", fake, []) as off:
                    await off.run(turns)
                    traced()
                    await on.run(turns)
                    provider.force_flush()
                    exporter.spans = 0
                    for index in range(settings.sequential_runs):
                        pair = [(off, result.off, False), (on, result.on, True)]
                        # Which goes first alternates too: the second of a pair ran faster.
                        for bench, samples, on_ in pair if index % 2 == 0 else pair[::-1]:
                            if on_:
                                traced()
                            else:
                                uninstall_telemetry()
                            timing = await bench.run(turns)
                            facts = await history_facts(
                                bench.handle(timing.workflow_id), AGENT_MODEL_ACTIVITY
                            )
                            samples.append(
                                TracingSample(
                                    wall_ms_per_turn=timing.wall_ms / turns,
                                    steady_ms_per_turn=facts.turn_ms,
                                )
                            )
                    provider.force_flush()
                    result.spans_per_turn = exporter.spans / (turns * len(result.on) or 1)
                    traced()  # the traced worker stops with its telemetry in place
        finally:
            uninstall_telemetry()
    return result


def tracing_summary(result: TracingResult) -> dict[str, Any]:
    """Medians and ratios of section 8."""
    summary: dict[str, Any] = {
        "spans_per_turn": result.spans_per_turn,
        "off_hot_path_ns": result.off_hot_path_ns,
        "plain_ns": result.plain_ns,
    }
    for name, samples in (("off", result.off), ("on", result.on)):
        summary[f"{name}_ms_per_turn"] = median([s.wall_ms_per_turn for s in samples])
        summary[f"{name}_steady_ms_per_turn"] = median(
            [s.steady_ms_per_turn or 0.0 for s in samples]
        )
    for figure in ("ms_per_turn", "steady_ms_per_turn"):
        summary[f"{figure}_ratio"] = summary[f"on_{figure}"] / summary[f"off_{figure}"]
    return summary


def tracing_text(result: TracingResult) -> str:
    """Section 7 as printed."""
    s = tracing_summary(result)
    head = (
        f"8. Tracing and metrics, per turn ({result.turns} turns; median of {len(result.on)} "
        "Runs each, alternating, after one warm-up Run each; fast-dispatch server)"
    )
    rows = [
        [
            label,
            s[f"{name}_ms_per_turn"],
            s["ms_per_turn_ratio"] if name == "on" else 1.0,
            s[f"{name}_steady_ms_per_turn"],
            s["steady_ms_per_turn_ratio"] if name == "on" else 1.0,
        ]
        for label, name in (("AgentRun, untraced", "off"), ("AgentRun, traced", "on"))
    ]
    main = table(["", "ms/turn (wall)", "ratio", "ms/turn (steady)", "ratio"], rows)
    notes = (
        f"Traced Runs exported {s['spans_per_turn']:.1f} spans per turn (to an exporter that "
        "only counts; metrics recorded, never collected).\nUntraced hot path: a model call's "
        f"span helper costs {s['off_hot_path_ns']:.0f} ns (a plain object's same steps "
        f"{s['plain_ns']:.0f} ns; mean of {HOT_PATH_ROUNDS:,})."
    )
    return f"{head}\n{main}\n{notes}"
