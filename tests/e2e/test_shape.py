"""A new Run records one patch marker, the newest of the patches every Run asks at its
start (``psych-unpermitted-told``, which stands for the older
``psych-a2a-cards-failure-settles``, ``psych-workflow-outputs-bounded``,
``psych-children-bounded``, ``psych-batch-accounting``, ``psych-catalog-failure-settles``
and ``psych-local-resolution-safe``:
workflows/kernel/_patches.py), an AgentRun as a WorkflowRun: the baseline asked none
(each marker costs two events and a visibility write), and a later change adds one only as
tests/workflows/histories/README.md, "Compatibility policy", says. It goes when the
policy's step 3 removes it."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from .conftest import Harness


async def lookup_order(order_id: str) -> str:
    """Look up an order.

    Args:
        order_id: The order.
    """
    return f"order {order_id}: delivered"


async def test_a_new_run_records_only_the_local_resolution_patch(harness: Harness) -> None:
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
    markers = [
        e.marker_recorded_event_attributes.marker_name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    ]
    # The patch first, before anything is scheduled; the catalogue is a local activity.
    assert markers == ["core_patch", "core_local_activity"]
    upserts = [
        e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields[
            "TemporalChangeVersion"
        ].data
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
        and "TemporalChangeVersion"
        in e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
    ]
    assert upserts == [b'["psych-unpermitted-told"]']
