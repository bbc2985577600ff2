"""A Run whose workflow execution Temporal closed without it settling (an operator's
``temporal workflow terminate``) answers its status as ``result()`` ends it and the
listing lists it, failed, not in the state the execution was cut in: through
``PsychClient.status`` (and the report), ``GET /v1/runs/{id}`` and A2A GetTask
(CancelTask then finds it ended), and an approval sent to it says so. Against
``psych serve`` on loopback and the session dev server."""

from __future__ import annotations

import re

import httpx
import pytest
from a2a.types import CancelTaskRequest, GetTaskRequest, TaskState
from a2a.utils.errors import TaskNotCancelableError

from psych_runtime.specs import Refused, RunFailed
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from ._listing import approval_agent
from ._serve import ACME, served
from ._waiting import is_suspended, state_when
from .conftest import Harness
from .test_a2a_serve import a2a_client

pytestmark = pytest.mark.e2e

REASON = "Temporal closed the Run's workflow execution (terminated) before the Run settled"


async def test_a_terminated_waiting_run_answers_its_status_failed(harness: Harness) -> None:
    agent, spec = approval_agent(harness, "cut")
    scope = harness.scope
    async with harness.worker():
        harness.fake.enqueue(Reply.tool_calls(ToolCall("delete_order", {"order_id": "1"})))
        handle = await harness.client.dispatch(spec.build(), "delete it", scope=scope)
        waiting = await state_when(harness.client, handle, scope, is_suspended, what="approval")
        (item,) = waiting.pending
        await harness.env.client.get_workflow_handle(handle.workflow_id).terminate(
            reason="terminated by an operator"
        )
        with pytest.raises(RunFailed, match="terminated by an operator"):
            await harness.client.result(handle, scope=scope)

        state = await harness.client.status(handle, scope=scope)
        assert (state.status, state.pending) == (RunStatus.FAILED, ())
        assert state.reason == f"{REASON}: terminated by an operator"
        # What it was otherwise stays as the execution left it.
        assert (state.run_id, state.turn, state.last_seq) == (
            waiting.run_id,
            waiting.turn,
            waiting.last_seq,
        )
        report = await harness.client.report(handle, scope=scope)
        assert (report.status, report.reason) == (RunStatus.FAILED, state.reason)
        with pytest.raises(Refused, match=re.escape(f"has settled failed: {REASON}")):
            await harness.client.approve(handle, item.id, scope=scope)

        async with served(harness) as base:
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                answer = await http.get(f"/v1/runs/{handle.workflow_id}", headers=ACME)
            assert answer.status_code == 200, answer.text
            shown = answer.json()
            assert (shown["status"], shown["pending"]) == ("failed", [])
            assert shown["reason"] == state.reason

            async with a2a_client(base, agent, ACME, streaming=False) as client:
                task = await client.get_task(GetTaskRequest(id=handle.run_id))
                assert task.status.state == TaskState.TASK_STATE_FAILED
                assert task.status.message.parts[0].text == state.reason
                with pytest.raises(TaskNotCancelableError, match="has already ended"):
                    await client.cancel_task(CancelTaskRequest(id=handle.run_id))


async def test_a_terminated_runs_status_with_no_worker_says_what_its_close_event_tells(
    harness: Harness,
) -> None:
    # Its close event (and PsychStatus) says it did not settle, and why: the 503 says what
    # is missing, the rest of its state (a worker's to answer), not that the close event
    # does not tell how it settled.
    _, spec = approval_agent(harness, "cut_unread")
    scope = harness.scope
    async with harness.worker():
        harness.fake.enqueue(Reply.tool_calls(ToolCall("delete_order", {"order_id": "1"})))
        handle = await harness.client.dispatch(spec.build(), "delete it", scope=scope)
        await state_when(harness.client, handle, scope, is_suspended, what="approval")
        await harness.env.client.get_workflow_handle(handle.workflow_id).terminate(
            reason="terminated by an operator"
        )
        with pytest.raises(RunFailed, match="terminated by an operator"):
            await harness.client.result(handle, scope=scope)
    async with (
        served(harness, query_timeout_seconds=2.0) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        answer = await http.get(f"/v1/runs/{handle.workflow_id}", headers=ACME)
    assert answer.status_code == 503, answer.text
    problem = answer.json()
    assert problem["type"] == "urn:psych:problem:no-worker"
    assert problem["detail"] == (
        "no worker answered for the Run in time; its workflow execution closed (terminated) "
        "before the Run settled, as its close event says, but the rest of its state (what the "
        "Run did until then) is only in the workflow's memory, which a worker answers "
        "replaying it"
    )
