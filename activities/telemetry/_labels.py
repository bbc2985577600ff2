"""The Run's labels on the activities' spans: where they come from, and that they go no
further than psych's spans.

The workflow side sends them as OpenTelemetry baggage (``workflows/kernel/_tracing.py``),
which Temporal's tracing interceptor carries into each activity's context. Baggage is
what propagators put in outbound requests, so each activity runs in ``carry_run_labels``'s
context instead: the labels under a key of psych's own, no baggage.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import baggage, context
from opentelemetry.context import Context
from opentelemetry.util.types import AttributeValue

RUN_ATTRIBUTES = ("psych.run_id", "psych.tenant", "psych.agent", "psych.version", "psych.turn")
"""The Run attributes of every psych span; the workflow side sends the last three (and the
first two) as baggage under these names."""

RUN_LABELS = context.create_key("psych_runtime.run_labels")
"""The context key of the Run's labels where only psych's spans read them (no propagator
does): ``carry_run_labels`` puts those of the baggage there, a call's span its own."""


def _labels_of(items: Mapping[str, object]) -> dict[str, AttributeValue]:
    labels: dict[str, AttributeValue] = {}
    for key, value in items.items():
        if key in RUN_ATTRIBUTES and isinstance(value, str):
            labels[key] = int(value) if key == "psych.turn" and value.isdigit() else value
    return labels


def carry_run_labels(ctx: Context | None = None) -> Context:
    """``ctx`` (default: the current context) without its baggage, the Run's labels the
    baggage carried kept under a key only psych's spans read.

    What an activity runs in (``psych_runtime.workers`` attaches it around each one): a
    library that propagates the current context in its requests (the MCP SDK puts it in
    each request's ``_meta``) then sends no Run id, tenant, agent or Version to a server.
    """
    current = context.get_current() if ctx is None else ctx
    return context.set_value(
        RUN_LABELS, _labels_of(baggage.get_all(current)), baggage.clear(current)
    )


def carried_labels() -> dict[str, AttributeValue]:
    """The Run's labels of the current context: those a call's span or
    ``carry_run_labels`` kept, else the baggage's."""
    carried = context.get_value(RUN_LABELS)
    if isinstance(carried, dict):
        return dict(carried)
    return _labels_of(baggage.get_all())


def run_attributes(run_id: str, tenant: str, turn: int | None = None) -> dict[str, AttributeValue]:
    """The ``psych.*`` attributes of a span of this Run: the labels the workflow sent as
    baggage (kept by ``carry_run_labels``, or the baggage itself), with the activity
    input's run id, tenant and turn (when it has one) taking precedence."""
    attributes = carried_labels()
    attributes["psych.run_id"] = run_id
    attributes["psych.tenant"] = tenant
    if turn is not None:
        attributes["psych.turn"] = turn
    return attributes
