"""``PsychClient.closed`` of a Run cancelled after an operator's reset handed it a steer
again: Temporal reapplies an update taken after the reset point as an ``UpdateAdmitted``
event holding the request, and the ``UpdateAccepted`` that follows holds none. The steer
was taken all the same (its reason counts it undelivered), so the history does not say how
the Run settled: ``closed`` leaves it to the state (None), never the cancellation's reason
without its note. Real dev server and worker."""

from __future__ import annotations

import uuid

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import WorkflowExecutionStatus

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus
from psych_runtime.workflows.contract._contract import CANCELLED_REASON

from ._waiting import eventually
from .conftest import Harness

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(90)
async def test_a_steer_a_reset_reapplied_leaves_a_cancelled_run_to_its_state(
    harness: Harness,
) -> None:
    spec = (
        AgentBuilder(f"reapplied{uuid.uuid4().hex[:8]}")
        .model("fake-model")
        .suspension(may_ask_questions=True)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which day?"}, id="q1"))
    )
    temporal = harness.client.temporal
    async with harness.worker():
        run = await harness.client.dispatch(spec, "book it", scope=harness.scope)
        handle = temporal.get_workflow_handle(run.workflow_id)

        async def asking() -> bool:
            state = await harness.client.status(run, scope=harness.scope)
            return state.status is RunStatus.SUSPENDED

        await eventually(asking, what="the Run to ask")
        await harness.client.steer(run.workflow_id, "Friday, please", scope=harness.scope)
        # Reset to the workflow task that took the steer: the update is reapplied.
        events = (await handle.fetch_history()).events
        accepted = next(
            i
            for i, e in enumerate(events)
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
        )
        task = next(
            e.event_id
            for e in reversed(events[:accepted])
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        )
        await temporal.workflow_service.reset_workflow_execution(
            ResetWorkflowExecutionRequest(
                namespace=temporal.namespace,
                workflow_execution=WorkflowExecution(workflow_id=run.workflow_id),
                reason="an operator's reset",
                workflow_task_finish_event_id=task,
                request_id=str(uuid.uuid4()),
            )
        )
        latest = temporal.get_workflow_handle(run.workflow_id)

        async def steer_taken_again() -> bool:
            types = [e.event_type for e in (await latest.fetch_history()).events]
            return EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED in types

        await eventually(steer_taken_again, what="the reset execution to take the steer")
        await latest.cancel()

        async def closed() -> bool:
            return (await latest.describe()).status is WorkflowExecutionStatus.CANCELED

        await eventually(closed, what="the workflow to end cancelled")
        state = await harness.client.status(run, scope=harness.scope)
    types = [e.event_type for e in (await latest.fetch_history()).events]
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ADMITTED in types  # as reapplied
    # Its state: the steer taken, no model read it.
    assert state.status is RunStatus.ABORTED
    assert (state.reason or "").startswith(CANCELLED_REASON + "; 1 message")
    # Not shown with no worker: the cancellation's reason alone would drop the note.
    assert await harness.client.closed(run, scope=harness.scope) is None
