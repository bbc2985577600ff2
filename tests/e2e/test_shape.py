"""A new Run records one patch marker, its shape, instead of one per change
(workflows/_shape.py): each marker costs two events and a visibility write."""

from __future__ import annotations

import json

from temporalio.api.enums.v1 import EventType

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus
from psych_runtime.workflows.kernel._shape import SHAPE_PATCH

from .conftest import Harness


async def lookup_order(order_id: str) -> str:
    """Look up an order.

    Args:
        order_id: The order.
    """
    return f"order {order_id}: delivered"


async def test_a_new_run_records_its_shape_and_no_other_patch(harness: Harness) -> None:
    harness.registry.register(lookup_order)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})),
        Reply.text("Order 42 was delivered."),
    )
    builder = AgentBuilder("shaped", registry=harness.registry).model("fake-model")
    spec = builder.tool("lookup_order").build()
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Where is 42?", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.totals.tool_calls == 1

    history = await harness.env.client.get_workflow_handle(run.workflow_id).fetch_history()
    patches = [
        json.loads(e.marker_recorded_event_attributes.details["patch-data"].payloads[0].data)["id"]
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_patch"
    ]
    # Before shapes this Run recorded psych-workflow-id, psych-roles-opt-in, psych-model-v2
    # (and the local catalogue would have added psych-local-catalog).
    assert patches == [SHAPE_PATCH]
    upserts = [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
        and "TemporalChangeVersion"
        in e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
    ]
    assert len(upserts) == 1
