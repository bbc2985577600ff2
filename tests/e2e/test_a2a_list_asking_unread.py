"""A2A ListTasks of many input-required tasks no worker answers: each listed task's
question is read as GetTask reads it, a query that waits for a worker up to the query
timeout. Those reads went ``ANSWERS_AT_ONCE`` (8) at a time, each waiting the whole
timeout, so a page of 100 such tasks took 13 query timeouts (over two minutes at the
default 10 s) before it was answered. A page's reads now wait one query timeout in all:
what was not read by then is shown as one that could not be read."""

from __future__ import annotations

import time
import uuid

import pytest
from a2a.types import ListTasksRequest, TaskState
from google.protobuf.json_format import MessageToDict

from psych_runtime.specs import AgentBuilder

from ._listing import started_runs
from ._serve import ACME, served
from .conftest import Harness
from .test_a2a_serve import a2a_client

pytestmark = pytest.mark.e2e

INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
ASKING = 17
"""Three rounds of ``ANSWERS_AT_ONCE`` (8) reads before: at least three query timeouts."""
QUERY_TIMEOUT = 4.0
"""Long beside the listing's own reads, so the bound below holds under a loaded machine
(CI's two shared cores): one timeout is 4 s, the three before were 12 s at least."""


async def test_a_page_of_unanswered_asking_tasks_waits_one_query_timeout(
    harness: Harness,
) -> None:
    agent = f"a2a_asking{uuid.uuid4().hex[:8]}"
    harness.client.publish(AgentBuilder(agent).model("fake-model").build())
    shown = [("suspended", "question")] * ASKING
    async with (
        started_runs(harness, harness.scope.tenant, agent, ASKING, shown),
        served(harness, query_timeout_seconds=QUERY_TIMEOUT) as base,
        a2a_client(base, agent, ACME, streaming=False) as client,
    ):
        for request in (
            ListTasksRequest(page_size=ASKING + 3, status=INPUT_REQUIRED),
            ListTasksRequest(page_size=ASKING + 3),
        ):
            began = time.monotonic()
            page = await client.list_tasks(request)
            took = time.monotonic() - began
            # One query timeout and the listing's own reads; before, three timeouts (12 s).
            assert took < 2 * QUERY_TIMEOUT, took
            assert len(page.tasks) == ASKING and not page.next_page_token
            for task in page.tasks:
                assert task.status.state == INPUT_REQUIRED
                said = task.status.message.parts[0].text
                assert "what it asks could not be read now" in said, said
                assert "no worker answered" in said, said
                unread = MessageToDict(task.status.message.parts[1].data)["unread"]
                assert unread == {"type": "urn:psych:problem:no-worker", "status": "503"}
