"""A task whose Run waits on a question its subagent asks, served over A2A: GetTask and
ListTasks both show it ``input-required`` with the question as its status message, and
the next message to the task answers it (through the parent Run, which forwards it to the
child). Until 12-06 the listing said ``input-required`` (its search attribute holds its
children's reasons) while GetTask said ``working`` (it counted only the Run's own items),
and a message to the task was refused as "not waiting for input": the question could be
found through the listing but neither read nor answered through A2A."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from a2a.types import (
    GetTaskRequest,
    ListTasksRequest,
    SendMessageConfiguration,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers.serve.a2a._child_polls import CHILD_POLL_SECONDS

from ._serve import ACME, served
from ._waiting import eventually
from .conftest import Harness
from .test_a2a_serve import a2a_client, collect, last_status, states, status_of, user

pytestmark = pytest.mark.e2e

INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
QUESTION = "Which warehouse should I check?"
LEAD = "a2a_child_lead"  # apart from the suite's other agents; its subagent: a2a_child_helper


def _who(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"]).split("You are ", 1)[1].split(".", 1)[0]


def _respond(body: dict[str, Any]) -> Reply:
    """A lead delegates, its helper asks, then each answers with what it was told."""
    told = [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]
    who = _who(body)
    if who.startswith("a2a_child_lead"):
        helper = who.replace("lead", "helper")
        if not told:
            return Reply.tool_calls(ToolCall("delegate", {"agent": helper, "task": "find 42"}))
        return Reply.text(f"lead: {told[-1]}")
    if not told:
        return Reply.tool_calls(ToolCall("ask_question", {"question": QUESTION}, id="q-child"))
    return Reply.text(f"helper was told {told[-1]}")


def _publish(harness: Harness, lead: str) -> None:
    """Agent ``lead``, whose subagent (``lead`` with ``helper`` for ``lead``) may ask."""
    helper = lead.replace("lead", "helper")
    asker = (
        AgentBuilder(helper)
        .model("fake-model")
        .instructions(f"You are {helper}.")
        .suspension(may_ask_questions=True)
        .build()
    )
    spec = (
        AgentBuilder(lead)
        .model("fake-model")
        .instructions(f"You are {lead}.")
        .subagent(helper, "Finds orders, for tests only.", asker)
        .build()
    )
    harness.client.publish(spec)
    harness.fake.responder = _respond


def _asks_the_question(task: Task) -> None:
    assert task.status.state == INPUT_REQUIRED, TaskState.Name(task.status.state)
    message = task.status.message
    assert message.parts[0].text == QUESTION
    pending = MessageToDict(message.parts[1].data)["pending"]
    assert pending["reason"] == "question" and pending["id"] == "q-child"
    assert pending["run"]  # the child Run that holds it


async def test_a_subagents_question_is_input_required_everywhere_and_answered_by_message(
    harness: Harness,
) -> None:
    _publish(harness, LEAD)
    async with (
        harness.worker(),
        served(harness) as base,
        a2a_client(base, LEAD, ACME, streaming=False) as client,
    ):
        sending = user("where is 42?")
        sending.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
        (sent,) = await collect(client.send_message(sending))
        task_id = sent.task.id

        async def listed_asking() -> bool:
            asking = ListTasksRequest(status=INPUT_REQUIRED)
            return [t.id for t in (await client.list_tasks(asking)).tasks] == [task_id]

        # The listing reads Temporal's visibility store, which lags on a loaded machine.
        await eventually(listed_asking, within=60, what="the task to be listed asking")
        got = await client.get_task(GetTaskRequest(id=task_id, history_length=5))
        _asks_the_question(got)
        assert not got.history  # historyLength is taken; a task carries no history
        for request in (ListTasksRequest(status=INPUT_REQUIRED), ListTasksRequest()):
            (listed,) = [t for t in (await client.list_tasks(request)).tasks if t.id == task_id]
            _asks_the_question(listed)
        (by_context,) = (await client.list_tasks(ListTasksRequest(context_id=task_id))).tasks
        _asks_the_question(by_context)

        (answered,) = await collect(client.send_message(user("the north one", task_id=task_id)))
        assert answered.task.status.state == TaskState.TASK_STATE_COMPLETED
        (answer,) = answered.task.artifacts
        assert "the north one" in answer.parts[0].text


async def test_a_stream_and_a_blocking_send_stop_at_a_subagents_question(
    harness: Harness,
) -> None:
    """A child's question reaches its parent by a signal, which writes no record there: a
    stream following the task read its state only from records, so a streaming send went
    on waiting (and a blocking one) until the question expired or the token did."""
    lead = "a2a_child_lead_streamed"
    _publish(harness, lead)
    async with harness.worker(), served(harness) as base:
        async with a2a_client(base, lead, ACME) as client, asyncio.timeout(60):
            asked = await collect(client.send_message(user("where is 42?")))
            task_id = asked[0].task.id
            assert states(asked)[-1] == INPUT_REQUIRED
            _asks_the_question(Task(id=task_id, status=last_status(asked)))
            answered = await collect(client.send_message(user("north", task_id=task_id)))
            assert states(answered)[-1] == TaskState.TASK_STATE_COMPLETED
        async with a2a_client(base, lead, ACME, streaming=False) as client, asyncio.timeout(60):
            (sent,) = await collect(client.send_message(user("where is 43?")))
            _asks_the_question(sent.task)


async def test_a_subscription_to_a_subagents_question_tells_it_once(harness: Harness) -> None:
    """SubscribeToTask on a task already at its subagent's question starts with the task
    (input-required, the question); its child poll then read the same question and sent it
    again as an update, as if the child asked anew: it started from `working`."""
    lead = "a2a_child_lead_subscribed"
    _publish(harness, lead)
    async with (
        harness.worker(),
        served(harness) as base,
        a2a_client(base, lead, ACME, streaming=False) as client,
        a2a_client(base, lead, ACME) as streaming,
    ):
        sending = user("where is 44?")
        sending.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
        (sent,) = await collect(client.send_message(sending))
        task_id = sent.task.id

        async def asking() -> bool:
            got = await client.get_task(GetTaskRequest(id=task_id))
            return got.status.state == INPUT_REQUIRED

        await eventually(asking, within=60, what="the subagent to ask")
        seen: list[StreamResponse] = []
        stream = streaming.subscribe(SubscribeToTaskRequest(id=task_id))
        assert isinstance(stream, AsyncGenerator)  # closed below, not left to the finalizer
        # Past two child polls of the subscription: each reads the question again.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.5 * CHILD_POLL_SECONDS):
                async for event in stream:
                    seen.append(event)
        await stream.aclose()
        assert seen and seen[0].HasField("task")
        _asks_the_question(seen[0].task)
        assert [status_of(e).state for e in seen[1:]] == [], seen[1:]

        (answered,) = await collect(client.send_message(user("the north one", task_id=task_id)))
        assert answered.task.status.state == TaskState.TASK_STATE_COMPLETED
