"""A2A ListTasks describes only the closed executions its page may show: telling whether
one is its Run's latest (``_list_tasks.TaskLister._replaced``) costs a describe each, and
a status filtered after reading (failed) reads the listing 100 Runs at a time. Driven by
``a2a-sdk``'s own client against ``psych serve`` on loopback and the session's dev
server, the serve's Temporal client counting its describes (a client interceptor)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from a2a.types import ListTasksRequest, TaskState
from temporalio.client import (
    Client,
    DescribeWorkflowInput,
    Interceptor,
    OutboundInterceptor,
    WorkflowExecutionDescription,
)
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from psych_runtime.specs import AgentBuilder
from psych_runtime.workflows import PsychClient

from ._serve import ACME, served
from ._waiting import eventually
from .conftest import Harness
from .test_a2a_list_tasks import walk
from .test_a2a_serve import a2a_client

pytestmark = pytest.mark.e2e

FAILED = TaskState.TASK_STATE_FAILED


class Describes(Interceptor):
    """The workflow ids a client described, in order."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Counting(next, self.ids)


class _Counting(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, ids: list[str]) -> None:
        super().__init__(next)
        self._ids = ids

    async def describe_workflow(self, input: DescribeWorkflowInput) -> WorkflowExecutionDescription:
        self._ids.append(input.id)
        return await super().describe_workflow(input)


@pytest.mark.timeout(60)
async def test_a_page_of_failed_tasks_describes_only_the_tasks_it_shows(harness: Harness) -> None:
    # Four Runs an operator terminated (shown failed, each closed): a page of one failed
    # task described all four, every closed candidate of the 100 Runs read at once (up to
    # the scan's 1000 a request), to show one.
    agent = f"a2a_desc{uuid.uuid4().hex[:8]}"
    harness.client.publish(AgentBuilder(agent).model("fake-model").build())
    tenant = harness.scope.tenant
    ids: list[str] = []
    for index in range(4):
        attributes = [
            SearchAttributePair(SearchAttributeKey.for_keyword(name), value)
            for name, value in (
                ("PsychTenant", tenant),
                ("PsychAgent", agent),
                ("PsychStatus", "running"),
            )
        ]
        started = await harness.env.client.start_workflow(
            "AgentRun",
            id=f"psych-{tenant}-{agent}-{index}",
            task_queue=f"nobody-{agent}",
            search_attributes=TypedSearchAttributes(attributes),
        )
        await started.terminate("an operator's terminate")
        ids.append(started.id)
    closed = f"PsychAgent = '{agent}' AND ExecutionStatus = 'Terminated'"

    async def indexed() -> bool:
        return (await harness.env.client.count_workflows(closed)).count == 4

    await eventually(indexed, what="the terminated executions in visibility")
    describes = Describes()
    config: dict[str, Any] = {**harness.client.temporal.config(), "interceptors": [describes]}
    counted = PsychClient(
        Client(**config), store=harness.client.store, task_queue=harness.client.task_queue
    )
    async with (
        served(harness, client=counted) as base,
        a2a_client(base, agent, ACME, streaming=False) as client,
    ):
        first = await client.list_tasks(ListTasksRequest(page_size=1, status=FAILED))
        shown = [f"psych-{tenant}-{task.id}" for task in first.tasks]
        assert shown == ids[-1:]  # newest first
        assert describes.ids == shown
        # Page after page, every task once, each described once.
        describes.ids.clear()
        pages, listed = await walk(client, 1, FAILED)
    assert listed == [workflow_id.split("-", 2)[2] for workflow_id in ids[::-1]]
    assert sorted(describes.ids) == sorted(ids)
    assert [len(page.tasks) for page in pages] == [1, 1, 1, 1]
