"""An A2A task whose Run completed with an answer the model cut at its output limit tells
the peer so: its status message is the Run's reason (``answered, cut short: ...``) and its
answer artifact carries ``{"cut_short": true}``, in GetTask, a blocking send, a stream and
ListTasks' ``includeArtifacts``. Before, the task read ``completed`` with the cut text as
its whole answer and no message; only ``psych status`` showed the reason."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from a2a.types import Artifact, GetTaskRequest, ListTasksRequest, Task, TaskState, TaskStatus
from google.protobuf.json_format import MessageToDict

from psych_runtime.activities.secrets import StaticSecretResolver
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from ._serve import ACME, served
from ._waiting import eventually
from .conftest import Harness
from .test_a2a_serve import a2a_client, collect, final_task, last_status, user

pytestmark = pytest.mark.e2e

CUT_TEXT = "The three steps are: first, open the"
WHOLE = "Order 42 ships today."


def told(status: TaskStatus) -> str:
    """The text of a task status's message (empty: none)."""
    return "".join(part.text for part in status.message.parts)


def answers(artifacts: list[Artifact]) -> list[tuple[str, dict[str, object]]]:
    """Each answer artifact's text and metadata."""
    return [
        ("".join(p.text for p in a.parts), MessageToDict(a.metadata))
        for a in artifacts
        if a.artifact_id == "answer"
    ]


async def test_a_task_whose_answer_was_cut_says_so(harness: Harness) -> None:
    spec = (
        AgentBuilder("a2a_cut_explainer")
        .model("fake-model")
        .description("Explains things step by step.")
        .instructions("Explain.")
        .build()
    )
    harness.client.publish(spec)
    harness.fake.enqueue(
        Reply.text(CUT_TEXT, cut_off=True),
        Reply.text(CUT_TEXT, cut_off=True),
        Reply.text(WHOLE),
    )
    async with harness.worker(), served(harness) as base:
        async with a2a_client(base, "a2a_cut_explainer", ACME, streaming=False) as client:
            (sent,) = await collect(client.send_message(user("How?")))
            cut = sent.task
            got = await client.get_task(GetTaskRequest(id=cut.id))
        async with a2a_client(base, "a2a_cut_explainer", ACME) as client:
            events = await collect(client.send_message(user("How, streamed?")))
        async with a2a_client(base, "a2a_cut_explainer", ACME, streaming=False) as client:
            (sent_whole,) = await collect(client.send_message(user("When?")))
            whole = sent_whole.task

            async def listed() -> list[Task]:
                page = await client.list_tasks(ListTasksRequest(include_artifacts=True))
                return list(page.tasks)

            async def all_listed() -> bool:
                return len(await listed()) == 3

            await eventually(all_listed, within=60, what="the three tasks to be listed")
            tasks = {task.id: task for task in await listed()}
    # Completed, the cut text kept as the answer, and the peer told it is cut: the status
    # message is the Run's reason, and the artifact is marked.
    for task in (cut, got):
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert told(task.status).startswith("answered, cut short: the model stopped at its")
        assert "max_output_tokens" in told(task.status)
        assert answers(list(task.artifacts)) == [(CUT_TEXT, {"cut_short": True})]
    # A stream's answer update and its last status say so alike.
    streamed = [
        e.artifact_update.artifact
        for e in events
        if e.HasField("artifact_update") and e.artifact_update.artifact.name == "answer"
    ]
    if not streamed:  # settled before the stream began: the task it starts with holds it
        streamed = list(final_task(events).artifacts)
    assert answers(streamed) == [(CUT_TEXT, {"cut_short": True})]
    assert last_status(events).state == TaskState.TASK_STATE_COMPLETED
    assert told(last_status(events)).startswith("answered, cut short:")
    # ListTasks' includeArtifacts marks it too.
    assert answers(list(tasks[cut.id].artifacts)) == [(CUT_TEXT, {"cut_short": True})]
    # A whole answer: no message, no mark, as before.
    assert whole.status.state == TaskState.TASK_STATE_COMPLETED
    assert not whole.status.HasField("message")
    assert answers(list(whole.artifacts)) == [(WHOLE, {})]
    assert answers(list(tasks[whole.id].artifacts)) == [(WHOLE, {})]


async def test_a_psych_peers_cut_answer_is_told_to_the_callers_model(harness: Harness) -> None:
    # A psych agent calls one served over A2A whose answer was cut: the tool result the
    # caller's model reads notes, before the answer artifact, that it is cut (the artifact's
    # metadata), beside the task's status message (the served Run's reason).
    harness.client.publish(
        AgentBuilder("a2a_cut_desk")
        .description("Explains things step by step.")
        .model("fake-other")
        .build()
    )
    harness.settings = dataclasses.replace(
        harness.settings, secrets=StaticSecretResolver({"desk-key": "acme-key-e2e"})
    )
    harness.fake.enqueue(Reply.text(CUT_TEXT, cut_off=True), model="fake-other")
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("desk__a2a_cut_desk", {"message": "How?"})),
        Reply.text("The desk's answer stops short."),
        model="fake-model",
    )
    async with harness.worker(), served(harness) as base:
        caller = (
            AgentBuilder("cut_caller")
            .model("fake-model")
            .a2a_peer("desk", f"{base}/a2a/a2a_cut_desk", credential="desk-key")
            .build()
        )
        run = await harness.client.dispatch(caller, "Ask the desk", scope=harness.scope)
        result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 90)
    assert result.status is RunStatus.COMPLETED, result.reason
    (last,) = [
        body
        for body in harness.fake.requests
        if body.get("model") == "fake-model" and body["messages"][-1]["role"] == "tool"
    ]
    shown = str(last["messages"][-1]["content"])
    note = (
        '[runtime] Artifact "answer" was cut short: the peer\'s model stopped at its output '
        "token limit, so it is incomplete and may stop mid-sentence.\n"
        f'Artifact "answer":\n{CUT_TEXT}'
    )
    assert note in shown, shown
