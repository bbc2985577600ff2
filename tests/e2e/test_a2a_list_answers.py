"""A2A ListTasks' ``includeArtifacts`` of a settled task an operator's reset runs on with
since: the task is listed once, as the execution it runs on shows it, and nothing waits
for that execution's end, driven by ``a2a-sdk``'s own client against ``psych serve`` on
loopback and the session's dev server, with no worker polling when the page is read."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from a2a.types import ListTasksRequest, TaskState
from temporalio.client import WorkflowExecutionStatus

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply

from ._reset import reset_to_first_task
from ._serve import ACME, served
from ._waiting import eventually
from .conftest import Harness
from .test_a2a_serve import a2a_client

pytestmark = pytest.mark.e2e

WORKING = TaskState.TASK_STATE_WORKING


@pytest.mark.timeout(30)
async def test_a_settled_task_reset_by_an_operator_is_listed_as_it_runs_on_without_waiting(
    harness: Harness,
) -> None:
    # An operator reset a settled Run: its execution stays closed (completed), listed with
    # its answer, and the workflow runs on in a new one. The answer was read as the
    # workflow's result, which followed to the new execution and waited for it to close:
    # with no worker, for as long as the request was held.
    agent = f"a2a_reset{uuid.uuid4().hex[:8]}"
    version = harness.client.publish(AgentBuilder(agent).model("fake-model").build())
    harness.fake.enqueue(Reply.text("Monday."))
    async with harness.worker():
        run = await harness.client.dispatch(version, "which day?", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
    temporal = harness.client.temporal
    await reset_to_first_task(temporal, run.workflow_id)
    both = f"WorkflowId = '{run.workflow_id}'"

    async def indexed() -> bool:
        return (await temporal.count_workflows(both)).count == 2

    await eventually(indexed, what="both executions in visibility")
    assert (await temporal.get_workflow_handle(run.workflow_id).describe()).status is (
        WorkflowExecutionStatus.RUNNING
    )
    async with (
        served(harness, query_timeout_seconds=1) as base,
        a2a_client(base, agent, ACME, streaming=False) as client,
    ):
        async with asyncio.timeout(8):
            page = await client.list_tasks(ListTasksRequest(include_artifacts=True))
    # The task once, as the execution it runs on shows it (the one it settled in is not
    # its latest: not listed since 12-06, test_a2a_ending.py); nothing waited for.
    assert [
        (task.id, task.status.state, [part.text for a in task.artifacts for part in a.parts])
        for task in page.tasks
    ] == [(run.run_id, WORKING, [])]
