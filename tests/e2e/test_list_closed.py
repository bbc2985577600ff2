"""A Run whose workflow execution Temporal closed without it settling (an operator's
``temporal workflow terminate``) lists as ``result()`` ends it, failed, not by the
``PsychStatus`` it last upserted: through the client (``list``, ``list_page`` with its
cursor, ``count``), ``GET /v1/runs`` and A2A ListTasks, and every status filter agrees
with what is shown. Against ``psych serve`` on loopback and the session dev server."""

from __future__ import annotations

import httpx
import pytest
from a2a.types import ListTasksRequest, TaskState

from psych_runtime.specs import RunFailed
from psych_runtime.testing import Reply, ToolCall

from ._listing import approval_agent, started_runs
from ._serve import ACME, served
from ._waiting import eventually, is_suspended, state_when
from .conftest import Harness
from .test_a2a_serve import a2a_client

pytestmark = pytest.mark.e2e


async def test_a_terminated_waiting_run_lists_failed_under_every_filter(harness: Harness) -> None:
    agent, spec = approval_agent(harness, "cut")
    harness.client.publish(spec.build())
    scope = harness.scope
    async with harness.worker():
        harness.fake.enqueue(Reply.tool_calls(ToolCall("delete_order", {"order_id": "1"})))
        handle = await harness.client.dispatch(spec.build(), "delete it", scope=scope)
        await state_when(harness.client, handle, scope, is_suspended, what="approval")
        # Two Runs beside it, cheaply: one still running, one that settled failed.
        async with started_runs(
            harness, scope.tenant, agent, 2, [("running", None), ("failed", None)], first=1
        ) as (running, failed):
            temporal = harness.env.client.get_workflow_handle(handle.workflow_id)
            await temporal.terminate(reason="terminated by an operator")

            async def closed() -> bool:
                query = f"PsychAgent = '{agent}' AND ExecutionStatus = 'Terminated'"
                return (await harness.env.client.count_workflows(query)).count == 1

            await eventually(closed, what="the terminated Run in visibility")
            with pytest.raises(RunFailed, match="terminated by an operator"):
                await harness.client.result(handle, scope=scope)

            (shown,) = [
                run
                for run in await harness.client.list(scope=scope, agent=agent)
                if run.workflow_id == handle.workflow_id
            ]
            assert (shown.status, shown.suspension, shown.closed_as) == (
                "failed",
                None,
                "terminated",
            )
            assert shown.closed_at is not None

            async def listed(
                status: str | None = None, suspended: bool = False, waiting_on: tuple[str, ...] = ()
            ) -> list[str]:
                client = harness.client
                runs = await client.list(
                    scope=scope,
                    agent=agent,
                    status=status,
                    suspended=suspended,
                    waiting_on=waiting_on,
                )
                counted = await client.count(
                    scope=scope,
                    agent=agent,
                    status=status,
                    suspended=suspended,
                    waiting_on=waiting_on,
                )
                assert counted == len(runs)
                return [run.workflow_id for run in runs]

            assert await listed(status="failed") == [failed, handle.workflow_id]
            assert await listed(status="running") == [running]
            assert await listed(status="suspended") == []
            assert await listed(suspended=True) == []
            assert await listed(waiting_on=("approval",)) == []

            # The failed listing a page at a time: its cursor reads on under the same query.
            first = await harness.client.list_page(
                scope=scope, agent=agent, status="failed", limit=1
            )
            assert [run.workflow_id for run in first.runs] == [failed]
            assert first.next_cursor is not None
            rest = await harness.client.list_page(
                scope=scope, agent=agent, status="failed", limit=1, cursor=first.next_cursor
            )
            assert [run.workflow_id for run in rest.runs] == [handle.workflow_id]
            assert rest.runs[0].closed_as == "terminated"
            assert rest.next_cursor is None

            async with served(harness) as base:
                async with httpx.AsyncClient(base_url=base, timeout=30) as http:

                    async def over_http(query: str) -> list[dict[str, object]]:
                        answer = await http.get(f"/v1/runs?agent={agent}{query}", headers=ACME)
                        assert answer.status_code == 200, answer.text
                        runs: list[dict[str, object]] = answer.json()["runs"]
                        return runs

                    (run,) = await over_http("&status=failed&limit=1&cursor=" + first.next_cursor)
                    assert (run["workflow_id"], run["status"], run["closed_as"]) == (
                        handle.workflow_id,
                        "failed",
                        "terminated",
                    )
                    assert [r["workflow_id"] for r in await over_http("&status=running")] == [
                        running
                    ]
                    assert await over_http("&status=suspended") == []
                    assert await over_http("&waiting=true") == []
                    whole = {r["workflow_id"]: r["status"] for r in await over_http("")}
                    assert whole[handle.workflow_id] == "failed"

                async with a2a_client(base, agent, ACME, streaming=False) as client:
                    task = handle.workflow_id.split("-", 2)[2]

                    async def tasks(state: TaskState) -> tuple[list[str], int]:
                        page = await client.list_tasks(ListTasksRequest(status=state))
                        return [t.id for t in page.tasks], page.total_size

                    settled = failed.split("-", 2)[2]
                    assert await tasks(TaskState.TASK_STATE_FAILED) == ([settled, task], 2)
                    working, counted = await tasks(TaskState.TASK_STATE_WORKING)
                    assert (task not in working, counted) == (True, 1)
                    assert await tasks(TaskState.TASK_STATE_INPUT_REQUIRED) == ([], 0)
