"""The process's one replay-safe global tracer provider, shared by the e2e modules that trace.

OpenTelemetry accepts one global tracer provider per process and ignores later ones, and
xdist may run any of these modules after another in one process: each attaches its own
in-memory exporter to whichever replay-safe provider is already there (installing it if
none is), once, instead of installing its own.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider, create_tracer_provider

_ATTACHED: set[tuple[int, int]] = set()
"""(provider, exporter) pairs already joined, by id."""


def exporting_to(exporter: InMemorySpanExporter) -> ReplaySafeTracerProvider:
    """The global replay-safe provider, with ``exporter`` receiving its spans.

    Raises:
        AssertionError: the global provider is one of another kind (a test set it).
    """
    current = trace.get_tracer_provider()
    if isinstance(current, ReplaySafeTracerProvider):
        provider = current
    else:
        assert isinstance(current, trace.ProxyTracerProvider), current
        provider = create_tracer_provider()
        trace.set_tracer_provider(provider)
    if (id(provider), id(exporter)) not in _ATTACHED:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        _ATTACHED.add((id(provider), id(exporter)))
    return provider
