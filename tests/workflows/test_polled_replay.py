"""A Run polled from its dispatch replays (the committed history keeps its shape).

``workflow_polled_from_dispatch`` is a real Run whose catalogue resolved in the workflow one
task after its marker (the SDK's race with the queries of the first task,
``tests/e2e/_local_split.py``), and whose first step then waited for approval. Before the
patch ``psych-local-resolution-safe`` the deadline timer was cancelled there, and a Run of
this shape did not replay (``tests/e2e/test_polled_from_dispatch.py`` fails without the
patch). Here the shape is checked, so a re-recording cannot quietly lose the race, and it
replays.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.worker import Replayer

from psych_runtime.workers import PsychPlugin
from psych_runtime.workflows import AgentRun, WorkflowRun
from tests.e2e._local_split import resolved_after_its_marker

from .record_histories import HISTORIES
from .test_replay import load

NAME = "workflow_polled_from_dispatch"
BEFORE = Path(__file__).parent / "sdk_race"
"""Runs of the race recorded on the code before the patch (not in the replay gate: they
cannot replay)."""


async def test_the_polled_workflow_replays_with_its_deadline_timer_never_cancelled() -> None:
    history = load(HISTORIES / f"{NAME}.json")
    assert resolved_after_its_marker(history)
    events = list(history.events)
    patches = [
        e.marker_recorded_event_attributes.details["patch-data"].payloads[0].data
        for e in events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_patch"
    ]
    assert patches == [b'{"id":"psych-local-resolution-safe","deprecated":false}']
    started = {
        e.event_id: e.timer_started_event_attributes.timer_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
    }
    # Timer 1 is the deadline clock's, started in the first task; 2 the approval's expiry,
    # cancelled by the answer.
    assert sorted(started.values()) == ["1", "2"]
    canceled = [
        started[e.timer_canceled_event_attributes.started_event_id]
        for e in events
        if e.event_type == EventType.EVENT_TYPE_TIMER_CANCELED
    ]
    assert canceled == ["2"]
    replayer = Replayer(workflows=[AgentRun, WorkflowRun], plugins=[PsychPlugin()])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{NAME} does not replay: {result.replay_failure}"


@pytest.mark.parametrize(
    ("name", "error"),
    [
        (
            "workflow_approval_first_step",
            "UpsertWorkflowSearchAttributesMachine does not handle HistoryEvent(id: 5, "
            "TimerStarted)",
        ),
        (
            "agent_catalogue_failed",
            "Fail workflow machine does not handle this event: HistoryEvent(id: 5, TimerStarted)",
        ),
    ],
)
async def test_a_run_of_the_race_recorded_before_the_patch_does_not_replay(
    name: str, error: str
) -> None:
    # The evidence: a WorkflowRun whose first step waited for approval and an AgentRun whose
    # catalogue failed (no code tool registered), each polled from its dispatch, recorded on
    # the code before the patch. The deadline timer (event 5) was cancelled in the task after
    # the catalogue's marker; a replay resolves the catalogue in the marker's task and drops
    # the timer's start and cancel. They cannot be made to replay (their history itself
    # disagrees with the replay); should one start to, the SDK changed how it resolves a
    # local activity on replay, and kernel/_deadline.py's reasoning needs a second look.
    # They go with the old branch (the policy's step 2).
    history = load(BEFORE / f"{name}.json")
    assert resolved_after_its_marker(history)
    replayer = Replayer(workflows=[AgentRun, WorkflowRun], plugins=[PsychPlugin()])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is not None
    assert error in str(result.replay_failure)
