"""A Run that continues as new while a paged listing reads on is not skipped: its new
execution starts at the head of the listing (before the cursor), and the execution it
went on from leaves its place. Through ``PsychClient.list_page`` (what ``psych list
--cursor`` and ``GET /v1/runs`` read) and A2A ListTasks, on the session dev server."""

from __future__ import annotations

import pytest
from a2a.types import ListTasksRequest, TaskState

from psych_runtime.testing import Reply, ToolCall

from ._listing import approval_agent, started_runs
from ._serve import ACME, served
from ._waiting import eventually, is_waiting, state_when
from .conftest import Harness
from .test_a2a_list_tasks import walk
from .test_a2a_serve import a2a_client

pytestmark = pytest.mark.e2e


async def test_a_run_continuing_as_new_between_pages_is_listed(harness: Harness) -> None:
    agent, spec = approval_agent(harness, "cont")
    harness.client.publish(spec.build())
    scope = harness.scope
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "1"}, id="c1")),
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "2"}, id="c2")),
    )
    async with harness.worker():
        run = await harness.client.dispatch(
            spec.build(), "delete two", scope=scope, continue_after_events=1
        )

        async def waits_on(call_id: str) -> None:
            await state_when(
                harness.client,
                run,
                scope,
                lambda s: is_waiting(s) and s.pending[0].id == call_id,
                what=f"the Run to wait on {call_id}",
            )

        await waits_on("c1")
        try:
            async with (
                started_runs(harness, scope.tenant, agent, 2, first=1) as newer,
                served(harness) as base,
                a2a_client(base, agent, ACME, streaming=False) as a2a,
            ):
                first = await harness.client.list_page(scope=scope, agent=agent, limit=1)
                assert [r.workflow_id for r in first.runs] == [newer[1]]
                assert first.next_cursor is not None
                working = TaskState.TASK_STATE_WORKING
                page = await a2a.list_tasks(ListTasksRequest(page_size=1, status=working))
                assert [task.id for task in page.tasks] == [newer[1].split("-", 2)[2]]
                # Between the pages the older Run goes on as a new execution, and waits.
                await harness.client.approve(run, "c1", scope=scope)
                await waits_on("c2")
                executions = f"WorkflowId = '{run.workflow_id}'"

                async def continued() -> bool:
                    went_on = await harness.env.client.count_workflows(
                        f"{executions} AND ExecutionStatus = 'ContinuedAsNew'"
                    )
                    open_ = await harness.env.client.count_workflows(
                        f"{executions} AND ExecutionStatus = 'Running'"
                    )
                    return went_on.count >= 1 and open_.count == 1

                await eventually(continued, what="the continued Run in visibility")
                rest = await harness.client.list_page(
                    scope=scope, agent=agent, limit=10, cursor=first.next_cursor
                )
                assert [r.workflow_id for r in rest.runs] == [newer[0], run.workflow_id]
                _, tasks = await walk(a2a, 1, working, page.next_page_token)
                assert tasks == [newer[0].split("-", 2)[2], run.run_id]
                # A listing from the start holds it once (its execution that goes on).
                whole = await harness.client.list(scope=scope, agent=agent)
                assert [r.workflow_id for r in whole] == [run.workflow_id, *newer[::-1]]
                assert await harness.client.count(scope=scope, agent=agent) == 3
        finally:
            await harness.env.client.get_workflow_handle(run.workflow_id).terminate("test over")
