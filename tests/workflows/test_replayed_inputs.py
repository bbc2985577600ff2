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


DIVERGENT = {
    # A local tool call cut at its local_seconds says so (b7c9549): the tool message the
    # model reads changed with no patch ("Activity timed out" before).
    "local_tool_timed_out": "the tool call failed: slow_count did not finish within",
    # The repeat guard's refusal says "not run:" (9d584e2), "refused:" before, no patch.
    "repeat_guard_refusal": "not run: you called lookup_order with these arguments",
}
"""Histories whose model-call inputs today's code replays otherwise, by changes made before
this gate without a patch: each a Run in flight then, replayed, continues a conversation
head never stored (its next model call fails on the missing blob). The words the replayed
input has that the recorded one lacks; an entry goes once its change is patched."""

COMMITTED = sorted(HISTORIES.glob("*.json"))


@pytest.fixture(scope="module")
def replayed() -> tuple[Replayer, _Scheduled]:
    scheduled = _Scheduled()
    replayer = Replayer(
        workflows=[AgentRun, WorkflowRun],
        plugins=[PsychPlugin()],
        interceptors=[scheduled],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    return replayer, scheduled


@pytest.mark.parametrize("path", COMMITTED, ids=lambda path: path.stem)
async def test_a_replayed_run_sends_each_model_call_what_its_history_recorded(
    replayed: tuple[Replayer, _Scheduled], path: Path
) -> None:
    # From a review: the note telling the model of an optional server whose consent was
    # refused was added with no patch ("only the attempt's input changes"), but a Run
    # recorded before it (mcp_consent_refused_optional_at_turn), replayed, took the note
    # as sent: the conversation head it derived for that call's answer (which the next
    # call continues, and its records name) was one never stored.
    replayer, scheduled = replayed
    scheduled.inputs.clear()
    result = await replayer.replay_workflow(load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None
    recorded = _recorded(path)
    divergent = DIVERGENT.get(path.stem)
    if divergent is None:
        assert scheduled.inputs == recorded
    else:
        differ = [json.dumps(a) for a, b in zip(scheduled.inputs, recorded, strict=True) if a != b]
        assert differ and all(divergent in text for text in differ), "patched? drop the entry"


def test_both_branches_of_the_refusal_note_have_a_history() -> None:
    # The one recorded before psych-consent-refused-note, and the one with it.
    noted = [
        _recorded(HISTORIES / f"mcp_consent_refused_optional_at_turn{tail}.json")[1]
        for tail in ("", "_noted")
    ]
    assert [len(call["new_messages"]) for call in noted] == [1, 2]
