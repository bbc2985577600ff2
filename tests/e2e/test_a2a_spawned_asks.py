"""A task whose Run spawned a child that asks a person while the Run works on (its own model
call, not a wait on its children): GetTask shows it ``input-required`` with the child's
question, and a stream must too. Until 12-06 a stream read the Run's state only while the
Run waited on children (``delegate``, ``wait_children``): it stayed ``working`` while the
question stood, until the Run happened to wait on its children, or for ever."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from a2a.types import StreamResponse, SubscribeToTaskRequest, TaskState, TaskStatus
from google.protobuf.json_format import MessageToDict

from psych_runtime.activities.contract import workflow_id_for
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers.serve.a2a import _tasks
from psych_runtime.workflows import ChildSpawned, ToolCallStarted

from ._serve import ACME, served
from ._waiting import eventually
from .conftest import Harness
from .test_a2a_serve import a2a_client, collect, last_status, states, status_of, user

pytestmark = pytest.mark.e2e

INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
WORKING = TaskState.TASK_STATE_WORKING
QUESTION = "Which warehouse should I check?"
LEAD = "a2a_spawner"
ASKER = "a2a_spawned_asker"
POLL = 1.0
"""The serve's child poll here (3 s in production), so the test takes seconds, not tens."""
CHILD_SLOW = 4 * POLL
"""The child's first model call: it asks after a poll of the stream's first seconds found
the Run waiting on no children (the stream then stopped reading it)."""
LEAD_BUSY = 20.0
"""The lead's second model call: it works on while its child asks (it waits on its children
only after that, ``wait_children``)."""


def _who(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"]).split("You are ", 1)[1].split(".", 1)[0]


def _respond(body: dict[str, Any]) -> Reply:
    """The lead spawns its asker, works on (a slow model call), then collects it; the asker
    asks (after a slow call of its own), then answers with what it was told."""
    told = [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]
    if _who(body) == LEAD:
        if not told:
            spawn = {"name": ASKER, "instructions": f"You are {ASKER}.", "task": "find 42"}
            return Reply.tool_calls(ToolCall("spawn", spawn))
        if len(told) == 1:
            return Reply.stall(LEAD_BUSY, then=Reply.tool_calls(ToolCall("wait_children", {})))
        return Reply.text(f"lead: {told[-1]}")
    if not told:
        asking = ToolCall("ask_question", {"question": QUESTION}, id="q-child")
        return Reply.stall(CHILD_SLOW, then=Reply.tool_calls(asking))
    return Reply.text(f"{ASKER} was told {told[-1]}")


def _asks_the_question(status: TaskStatus) -> None:
    assert status.state == INPUT_REQUIRED, TaskState.Name(status.state)
    assert status.message.parts[0].text == QUESTION
    pending = MessageToDict(status.message.parts[1].data)["pending"]
    assert pending["reason"] == "question" and pending["id"] == "q-child"
    assert pending["run"].endswith("-spawn1")  # the spawned child holds it


async def test_a_stream_tells_a_spawned_childs_question_while_the_run_works_on(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_tasks, "CHILD_POLL_SECONDS", POLL)
    spec = (
        AgentBuilder(LEAD)
        .model("fake-model")
        .instructions(f"You are {LEAD}.")
        .spawn()
        .suspension(may_ask_questions=True)  # a spawned child's are its parent's
        .build()
    )
    harness.client.publish(spec)
    harness.fake.responder = _respond
    async with (
        harness.worker(),
        served(harness) as base,
        a2a_client(base, LEAD, ACME) as streaming,
        a2a_client(base, LEAD, ACME, streaming=False) as client,
        asyncio.timeout(120),
    ):
        stream = streaming.send_message(user("where is 42?"))
        first = await anext(stream)
        task_id = first.task.id
        # A subscription beside it, which follows the task through the question.
        seen: list[StreamResponse] = []

        async def subscribe() -> None:
            async for event in streaming.subscribe(SubscribeToTaskRequest(id=task_id)):
                seen.append(event)

        subscribed = asyncio.ensure_future(subscribe())
        asked = [first, *await collect(stream)]
        _asks_the_question(last_status(asked))
        assert states(asked).count(INPUT_REQUIRED) == 1, states(asked)
        # Told while the lead worked on: it had spawned the child and not waited on it.
        workflow_id = workflow_id_for(harness.scope.tenant, task_id)
        records = (await harness.client.records(workflow_id, scope=harness.scope)).records
        assert any(isinstance(r, ChildSpawned) for r in records)
        tools = [r.tool for r in records if isinstance(r, ToolCallStarted)]
        assert "wait_children" not in tools, tools

        async def subscription_asks() -> bool:  # it reads the Run apart from the send
            return any(status_of(e).state == INPUT_REQUIRED for e in seen)

        await eventually(subscription_asks, within=10 * POLL, what="the subscription to ask")
        (answered,) = await collect(client.send_message(user("the north one", task_id=task_id)))
        assert answered.task.status.state == TaskState.TASK_STATE_COMPLETED
        (answer,) = answered.task.artifacts
        assert "the north one" in answer.parts[0].text

        await subscribed
    statuses = [status_of(e) for e in seen if e.HasField("status_update") or e.HasField("task")]
    shown = [s.state for s in statuses]
    assert shown.count(INPUT_REQUIRED) == 1, shown  # told once
    asking = shown.index(INPUT_REQUIRED)
    _asks_the_question(statuses[asking])
    # Answered: back to working (the parent records nothing of a child's answer), then done.
    assert WORKING in shown[asking:], shown
    assert shown[-1] == TaskState.TASK_STATE_COMPLETED, shown
