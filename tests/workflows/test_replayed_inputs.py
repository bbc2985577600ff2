"""A history replayed schedules each model call with the input its history recorded.

Temporal's replay compares a command's kind and the activity's type and id, not its input:
a change to what a workflow sends a model call passes the replay gate (``test_replay``)
while the Run, replayed, believes the call was sent what it was not. What the workflow
derives from that input is then wrong: the conversation head of a call whose answer left
it out (``activities/contract/_slim.py``, ``expected_refs``: the hash of the call's new
messages), which the next call continues and the Run's records name."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.worker import (
    Interceptor,
    Replayer,
    StartActivityInput,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from psych_runtime.workers import PsychPlugin
from psych_runtime.workflows import AgentRun, WorkflowRun

from .record_histories import HISTORIES
from .test_replay import load

MODEL_CALL = "psych.model.call"


class _Scheduled(Interceptor):
    """Keeps each model call's input as the replayed workflow schedules it, encoded."""

    def __init__(self) -> None:
        self.inputs: list[Any] = []

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        inputs = self.inputs

        class Outbound(WorkflowOutboundInterceptor):
            def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
                if input.activity == MODEL_CALL:
                    payload = workflow.payload_converter().to_payloads(input.args)[0]
                    inputs.append(json.loads(payload.data))
                return super().start_activity(input)

        class Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                super().init(Outbound(outbound))

        return Inbound


def _recorded(path: Path) -> list[Any]:
    """Each model call's input as its history recorded it."""
    inputs = []
    for event in json.loads(path.read_text())["events"]:
        scheduled = event.get("activityTaskScheduledEventAttributes")
        if scheduled and scheduled["activityType"]["name"] == MODEL_CALL:
            data = scheduled["input"]["payloads"][0]["data"]
            inputs.append(json.loads(base64.b64decode(data)))
    return inputs


@pytest.mark.parametrize(
    "shape",
    [
        # Recorded before the note: the attempt made without the server was sent none.
        "mcp_consent_refused_optional_at_turn",
        # Recorded with it (patch psych-consent-refused-note).
        "mcp_consent_refused_optional_at_turn_noted",
    ],
)
async def test_a_run_refused_an_optional_server_replays_the_inputs_it_sent(shape: str) -> None:
    # From a review: the note telling the model of an optional server whose consent was
    # refused was added with no patch ("only the attempt's input changes"), but a Run
    # recorded before it, replayed, took the note as sent: the conversation head it
    # derived for that call's answer (which the next call continues, and its records
    # name) was one never stored.
    path = HISTORIES / f"{shape}.json"
    scheduled = _Scheduled()
    replayer = Replayer(
        workflows=[AgentRun, WorkflowRun],
        plugins=[PsychPlugin()],
        interceptors=[scheduled],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    result = await replayer.replay_workflow(load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None
    recorded = _recorded(path)
    assert len(recorded) == 2  # the attempt that asked for consent, the one without it
    assert scheduled.inputs == recorded
