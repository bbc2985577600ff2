"""Local tool calls replay (issue 27): concurrent local activities that finished in another
order than they started, and commands that followed them, come back the same on replay.

sdk-python issue 1578: live, concurrent local activities resolve in the order they
finished; on replay, in the order they started. The tool-call pipeline holds every call
until no local call runs and lets them go on in the order they started (``LocalHold``,
``workflows/kernel/_local_hold.py``), so what follows is the same either way. These
histories are real Runs (``record_histories.py``): here their shape is checked (so a
re-recording cannot quietly lose what makes them worth replaying) and they replay.
"""

from __future__ import annotations

import base64
import json

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.worker import Replayer

from psych_runtime.activities.contract import MODEL_CALL, TOOL_RUN_CODE
from psych_runtime.workers import PsychPlugin
from psych_runtime.workflows import AgentRun, WorkflowRun

from .record_histories import HISTORIES
from .test_replay import load


def _marker(event: HistoryEvent) -> dict[str, object]:
    data = event.marker_recorded_event_attributes.details["data"].payloads[0].data
    found: dict[str, object] = json.loads(data)
    return found


def _shape(name: str) -> list[str]:
    """The history's events, shortened: a local activity as ``local <type> #<seq>``, a
    scheduled activity as ``activity <type>``, anything else by its type's name."""
    out = []
    for event in load(HISTORIES / f"{name}.json").events:
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker = _marker(event)
            out.append(f"local {marker['activity_type']} #{marker['seq']}")
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            kind = event.activity_task_scheduled_event_attributes.activity_type.name
            out.append(f"activity {kind}")
        else:
            out.append(EventType.Name(event.event_type).removeprefix("EVENT_TYPE_"))
    return out


async def _replays(name: str) -> None:
    replayer = Replayer(workflows=[AgentRun, WorkflowRun], plugins=[PsychPlugin()])
    result = await replayer.replay_workflow(
        load(HISTORIES / f"{name}.json"), raise_on_replay_failure=False
    )
    assert result.replay_failure is None, f"{name} does not replay: {result.replay_failure}"


async def test_two_concurrent_local_calls_finished_out_of_order_replay() -> None:
    shape = _shape("local_tool_calls_concurrent")
    # Turn 1's calls: bolts (started first, seq 3, 0.6 s) finished after nuts (seq 4).
    turn_1 = shape.index(f"local {TOOL_RUN_CODE} #4")
    assert shape[turn_1 + 1] == f"local {TOOL_RUN_CODE} #3"
    assert shape[turn_1 + 2] == f"activity {MODEL_CALL}"
    # No tool activity, and one workflow task per turn: 3 model calls, 4 tasks in all (the
    # first also resolved the catalogue and scheduled the first model call).
    assert f"activity {TOOL_RUN_CODE}" not in shape
    assert shape.count(f"activity {MODEL_CALL}") == 3
    assert shape.count("WORKFLOW_TASK_COMPLETED") == 4
    await _replays("local_tool_calls_concurrent")


async def test_an_external_wait_beside_a_slower_local_call_waits_for_it_then_replays() -> None:
    shape = _shape("local_external_wait_beside_local_call")
    # The wait (hold_slot, seq 4) returned at once, count_stock (seq 3) 0.5 s later; the
    # wait's upsert and timer come after both markers, in the same workflow task.
    first, second = (
        shape.index(f"local {TOOL_RUN_CODE} #3"),
        shape.index(f"local {TOOL_RUN_CODE} #4"),
    )
    suspended = shape.index("UPSERT_WORKFLOW_SEARCH_ATTRIBUTES")
    assert max(first, second) < suspended
    assert "WORKFLOW_TASK_COMPLETED" not in shape[min(first, second) : suspended]
    await _replays("local_external_wait_beside_local_call")


async def test_local_shapes_replay() -> None:
    # A local call beside a normal activity, a local call timing out, a roles-apart Run (an
    # activity on the tools queue) and a WorkflowRun's local tool step.
    assert "activity psych.tool.run_code" in _shape("roles_apart_local_tool")
    assert "activity psych.tool.run_code" not in _shape("workflow_local_tool_step")
    timed_out = load(HISTORIES / "local_tool_timed_out.json").events
    [marker] = [
        _marker(e)
        for e in timed_out
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and _marker(e)["activity_type"] == TOOL_RUN_CODE
    ]
    assert marker["attempt"] == 3  # SAFE_TOOL_RETRY's attempts, each cut at local_seconds
    for name in (
        "local_and_activity_tool_calls",
        "local_tool_timed_out",
        "roles_apart_local_tool",
        "workflow_local_tool_step",
    ):
        await _replays(name)


def test_the_recorded_marker_payload_is_base64_json() -> None:
    # What _marker reads: the SDK's local activity marker data, JSON in a payload.
    text = (HISTORIES / "local_tool_calls_concurrent.json").read_text()
    events = json.loads(text)["events"]
    datas = [
        json.loads(
            base64.b64decode(
                e["markerRecordedEventAttributes"]["details"]["data"]["payloads"][0]["data"]
            )
        )
        for e in events
        if "markerRecordedEventAttributes" in e
    ]
    assert [d["activity_type"] for d in datas].count(TOOL_RUN_CODE) == 3
