"""What an A2A stream costs and tells while a Run's children may ask (``_child_polls.py``).

- A stream of a new task (its Run has made no tool call, so no child of it can run from
  before the stream's first record) asks Temporal nothing of its children: until 12-07
  each stream that lived a poll (3 s) described the workflow once.

Driven by ``a2a-sdk``'s own client against ``psych serve`` on loopback and the session's
dev server, the serve's Temporal client counting the describes its child polls make."""

from __future__ import annotations

import asyncio
import traceback
from typing import Any

import pytest
from a2a.types import TaskState
from temporalio.client import (
    Client,
    DescribeWorkflowInput,
    Interceptor,
    OutboundInterceptor,
    WorkflowExecutionDescription,
)

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply
from psych_runtime.workers.serve.a2a import _tasks
from psych_runtime.workflows import PsychClient

from ._serve import ACME, served
from .conftest import Harness
from .test_a2a_serve import a2a_client, collect, last_status, states, user

pytestmark = pytest.mark.e2e

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
