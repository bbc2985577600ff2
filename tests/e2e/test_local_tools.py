"""Quick tools safe to repeat run as local activities (issue 27): a call longer than the
worker's heartbeat interval still completes in one attempt, and a turn of such calls is one
workflow task (no tool activity, no task of its own)."""

from __future__ import annotations

import asyncio

from temporalio.api.enums.v1 import EventType

from psych_runtime.activities.contract import MODEL_CALL, TOOL_RUN_CODE
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from .conftest import Harness


async def weigh_parcel(parcel: str) -> str:
    """Weigh a parcel (slower than the tool activity's 1 s heartbeat interval).

    Args:
        parcel: The parcel.
    """
    await asyncio.sleep(1.5)
    return f"{parcel}: 2 kg"


async def test_a_local_call_longer_than_a_heartbeat_interval_completes_in_one_attempt(
    harness: Harness,
) -> None:
    harness.registry.register(weigh_parcel, idempotent=True, read_only=True, local_seconds=5.0)
    # A tool call heartbeats every second (ToolActivities' heartbeat_seconds): this one does.
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("weigh_parcel", {"parcel": "a"}), ToolCall("weigh_parcel", {"parcel": "b"})
        ),
        Reply.text("2 kg each."),
    )
    spec = (
        AgentBuilder("weigher-local", registry=harness.registry)
        .model("fake-model")
        .tool("weigh_parcel")
        .build()
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Weigh both.", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert [(c.status, c.result) for c in report.tool_calls] == [
        ("ok", "a: 2 kg"),
        ("ok", "b: 2 kg"),
    ]
    history = await harness.env.client.get_workflow_handle(run.workflow_id).fetch_history()
    events = list(history.events)
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert scheduled == [MODEL_CALL, MODEL_CALL]
    markers = [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]
    assert len(markers) == 3  # the catalogue and the two calls (not the start's patch)
    attempts = [
        e.marker_recorded_event_attributes.details["data"].payloads[0].data for e in markers[1:]
    ]
    assert all(b'"attempt":1' in data and TOOL_RUN_CODE.encode() in data for data in attempts)
    # One workflow task per turn: start (catalogue, first model call), turn 1 (both calls
    # and the second model call), turn 2 (the answer).
    completed = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED]
    assert len(completed) == 3


async def count_slowly(sku: str) -> str:
    """Count an item's stock (slower than the local_seconds it is registered with).

    Args:
        sku: The item.
    """
    await asyncio.sleep(5)
    return f"{sku}: 12"


async def test_a_local_call_past_its_local_seconds_tells_the_model_which_bound(
    harness: Harness,
) -> None:
    harness.registry.register(count_slowly, idempotent=True, read_only=True, local_seconds=0.25)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("count_slowly", {"sku": "bolt"})), Reply.text("No count.")
    )
    spec = (
        AgentBuilder("counter-slow-local", registry=harness.registry)
        .model("fake-model")
        .tool("count_slowly")
        .build()
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Count bolts.", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    [call] = report.tool_calls
    assert call.status == "error"
    # Not the SDK's bare "Activity timed out": the bound, and where it is set.
    assert call.result == (
        "the tool call failed: count_slowly did not finish within the 0.25 s its "
        "registration gives each attempt (local_seconds), in 3 attempts"
    )
    told = harness.fake.requests[-1]["messages"][-1]
    assert (told["role"], told["content"]) == ("tool", call.result)
