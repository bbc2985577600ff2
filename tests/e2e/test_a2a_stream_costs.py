"""What an A2A stream costs and tells while a Run's children may ask (``_child_polls.py``).

- A stream of a new task (its Run has made no tool call, so no child of it can run from
  before the stream's first record) asks Temporal nothing of its children: until 12-07
  each stream that lived a poll (3 s) described the workflow once.
- Two spawned children ask, with the same item id (their models' call ids): a stream
  tells the first asker's question, then, once a reply answered it, the second's. Until
  12-07 both were the message ``<task>.ask.q-child``: the second question was never told,
  the stream still showing the first, answered.

Driven by ``a2a-sdk``'s own client against ``psych serve`` on loopback and the session's
dev server, the serve's Temporal client counting the describes its child polls make."""

from __future__ import annotations

import asyncio
import traceback
from typing import Any

import pytest
from a2a.types import StreamResponse, SubscribeToTaskRequest, TaskState, TaskStatus
from google.protobuf.json_format import MessageToDict
from temporalio.client import (
    Client,
    DescribeWorkflowInput,
    Interceptor,
    OutboundInterceptor,
    WorkflowExecutionDescription,
)

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers.serve.a2a import _tasks
from psych_runtime.workflows import PsychClient

from ._serve import ACME, served
from ._waiting import eventually
from .conftest import Harness
from .test_a2a_serve import a2a_client, collect, last_status, states, status_of, user

pytestmark = pytest.mark.e2e

INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
COMPLETED = TaskState.TASK_STATE_COMPLETED
POLL = 1.0
"""The serve's child poll here (3 s in production), so the test takes seconds, not tens."""


class ChildPollDescribes(Interceptor):
    """How many describes a client made for a stream's child poll (``_tasks.children``)."""

    def __init__(self) -> None:
        self.count = 0

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Counting(next, self)


class _Counting(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, counts: ChildPollDescribes) -> None:
        super().__init__(next)
        self._counts = counts

    async def describe_workflow(self, input: DescribeWorkflowInput) -> WorkflowExecutionDescription:
        frames = traceback.extract_stack()
        if any(f.name == "children" and f.filename.endswith("a2a/_tasks.py") for f in frames):
            self._counts.count += 1
        return await super().describe_workflow(input)


async def test_a_new_tasks_stream_asks_temporal_nothing_of_its_children(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_tasks, "CHILD_POLL_SECONDS", POLL)
    agent = "a2a_costs_plain"
    harness.client.publish(AgentBuilder(agent).model("fake-model").build())
    harness.fake.enqueue(Reply.stall(4 * POLL, then=Reply.text("done")))
    describes = ChildPollDescribes()
    config: dict[str, Any] = {**harness.client.temporal.config(), "interceptors": [describes]}
    counted = PsychClient(
        Client(**config), store=harness.client.store, task_queue=harness.client.task_queue
    )
    async with (
        harness.worker(),
        served(harness, client=counted) as base,
        a2a_client(base, agent, ACME) as streaming,
        asyncio.timeout(60),
    ):
        events = await collect(streaming.send_message(user("hello")))
    assert last_status(events).state == COMPLETED, states(events)
    # Measured: 1 before 12-07 (the stream lived 4 polls), 0 now.
    assert describes.count == 0, describes.count


LEAD = "a2a_costs_lead"
ASKERS = {"a2a_costs_one": "Which warehouse?", "a2a_costs_two": "Which shelf?"}


def _who(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"]).split("You are ", 1)[1].split(".", 1)[0]


def _respond(body: dict[str, Any]) -> Reply:
    """The lead spawns two askers and waits on them; each asks (the same call id), then
    answers with what it was told."""
    told = [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]
    who = _who(body)
    if who == LEAD:
        if not told:
            spawns = [
                ToolCall("spawn", {"name": name, "instructions": f"You are {name}.", "task": "t"})
                for name in ASKERS
            ]
            return Reply.tool_calls(*spawns)
        if len(told) == 2:
            return Reply.tool_calls(ToolCall("wait_children", {}))
        return Reply.text(f"lead: {told[-1]}")
    if not told:
        asks = Reply.tool_calls(ToolCall("ask_question", {"question": ASKERS[who]}, id="q-child"))
        # The first spawned asks a second later, so usually last: the order the CI found.
        return Reply.stall(POLL, then=asks) if who == "a2a_costs_one" else asks
    return Reply.text(f"{who} was told {told[-1]}")


def _question(status: TaskStatus) -> str | None:
    if status.state != INPUT_REQUIRED:
        return None
    pending = MessageToDict(status.message.parts[1].data)["pending"]
    assert pending["id"] == "q-child" and pending["run"], pending
    return status.message.parts[0].text


async def test_a_second_childs_question_with_the_same_id_is_told_once_the_first_is_answered(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_tasks, "CHILD_POLL_SECONDS", POLL)
    spec = (
        AgentBuilder(LEAD)
        .model("fake-model")
        .instructions(f"You are {LEAD}.")
        .spawn()
        .suspension(may_ask_questions=True)
        .build()
    )
    harness.client.publish(spec)
    harness.fake.responder = _respond
    seen: list[StreamResponse] = []

    def asked() -> list[str]:
        return [q for e in seen if (q := _question(status_of(e))) is not None]

    async with (
        harness.worker(),
        served(harness) as base,
        a2a_client(base, LEAD, ACME) as streaming,
        a2a_client(base, LEAD, ACME, streaming=False) as client,
        asyncio.timeout(120),
    ):
        first = await anext(streaming.send_message(user("find 42")))
        task_id = first.task.id

        async def subscribe() -> None:
            async for event in streaming.subscribe(SubscribeToTaskRequest(id=task_id)):
                seen.append(event)

        subscribed = asyncio.ensure_future(subscribe())

        async def shown_last(question: str) -> bool:
            return asked()[-1:] == [question]

        # Both children ask; the one shown is the one a reply answers: the first to ask
        # (the Run's pending items list its children's in the order they began waiting;
        # which child asks first races).
        async def askers() -> list[str]:
            state = await harness.client.status(
                f"psych-{harness.scope.tenant}-{task_id}", scope=harness.scope
            )
            return [p.question or "" for p in state.pending if p.run is not None]

        async def both_ask() -> bool:
            return len(await askers()) == 2

        await eventually(both_ask, within=30, what="both children to ask")
        one, two = await askers()
        assert {one, two} == set(ASKERS.values())
        await eventually(lambda: shown_last(one), within=10 * POLL, what="the first question")
        await collect(client.send_message(user("north", task_id=task_id)))
        await eventually(lambda: shown_last(two), within=10 * POLL, what="the second question")
        assert asked()[-2:] == [one, two], asked()
        (done,) = await collect(client.send_message(user("top", task_id=task_id)))
        assert done.task.status.state == COMPLETED, done.task.status
        await subscribed
    assert states(seen)[-1] == COMPLETED, states(seen)
