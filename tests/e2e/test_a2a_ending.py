"""A2A requests that meet a task ending: a stream of a task whose Run's workflow an
operator terminated while no worker polls ends at once, failed, as the listing shows it
(it was held open for minutes), and a subscription after it is refused at once, the task
read from the closed execution as ended; CancelTask of a task that settled after it was read is
TaskNotCancelableError; a task cancelled, then reset, is listed once, as GetTask reads
it. Driven by ``a2a-sdk``'s own client (both bindings) against ``psych serve`` on
loopback and the session's dev server."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta

import pytest
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, UnsupportedOperationError
from temporalio.client import WorkflowExecutionStatus

from psych_runtime.specs import AgentBuilder, Scope
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import ClosedRun, PsychClient, RunHandle, RunState

from ._reset import reset_to_first_task
from ._serve import ACME, asking_agent, served
from ._waiting import eventually, is_waiting, state_when
from .conftest import Harness
from .test_a2a_serve import a2a_client, collect, last_status, user

pytestmark = pytest.mark.e2e

CANCELED = TaskState.TASK_STATE_CANCELED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED


class ReadBefore(PsychClient):
    """A client whose next read of a Run in ``held`` answers the state kept there: a
    request that read the Run just before it settled (its execution open then)."""

    held: dict[str, RunState]

    async def status(
        self, run: RunHandle | str, *, scope: Scope, query_timeout: timedelta | None = None
    ) -> RunState:
        if isinstance(run, str) and run in self.held:
            return self.held.pop(run)
        return await super().status(run, scope=scope, query_timeout=query_timeout)

    async def closed(
        self, run: RunHandle | str, *, scope: Scope, rpc_timeout: timedelta | None = None
    ) -> ClosedRun | None:
        if isinstance(run, str) and run in self.held:
            return None  # read while its execution was open
        return await super().closed(run, scope=scope, rpc_timeout=rpc_timeout)


@pytest.mark.parametrize("rest", [False, True], ids=["jsonrpc", "rest"])
async def test_cancelling_a_task_that_settled_meanwhile_is_not_cancelable(
    harness: Harness, rest: bool
) -> None:
    # The task read as waiting, then its Run settled before the abort reached it: the Run
    # refused the abort, and the caller was told its request was invalid
    # (InvalidParamsError, REST's "refused"), not that the task can no longer be canceled.
    agent = asking_agent(harness, "a2a_race")
    reading = ReadBefore(
        harness.client.temporal, store=harness.client.store, task_queue=harness.client.task_queue
    )
    reading.held = {}
    async with (
        harness.worker(),
        served(harness, client=reading) as base,
        a2a_client(base, agent, ACME, rest=rest) as client,
    ):
        asked = await collect(client.send_message(user("book it")))
        task_id = asked[0].task.id
        workflow_id = f"psych-acme-{task_id}"
        reading.held[workflow_id] = await harness.client.status(workflow_id, scope=harness.scope)
        await harness.client.abort(workflow_id, scope=harness.scope, reason="settled first")
        await harness.client.result(workflow_id, scope=harness.scope)
        with pytest.raises(TaskNotCancelableError) as refused:
            await client.cancel_task(CancelTaskRequest(id=task_id))
    assert not reading.held  # the stale read was the one CancelTask made
    assert "has settled aborted" in refused.value.message
    assert refused.value.data == {"type": "urn:psych:problem:refused", "status": "409"}


@pytest.mark.timeout(60)
async def test_a_stream_of_a_task_terminated_with_no_worker_ends_failed_at_once(
    harness: Harness,
) -> None:
    # Its workflow terminated while the stream followed it and no worker ran: the stream
    # asked for records no worker answered, for as long as it was held (seen past 250 s).
    agent = asking_agent(harness, "a2a_term")
    async with (
        served(harness, query_timeout_seconds=2) as base,
        a2a_client(base, agent, ACME) as client,
    ):
        async with harness.worker():
            asked = await collect(client.send_message(user("book it")))
            task_id = asked[0].task.id
            stream = client.subscribe(SubscribeToTaskRequest(id=task_id))
            first = await anext(stream)
        assert first.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        handle = harness.client.temporal.get_workflow_handle(f"psych-acme-{task_id}")
        await handle.terminate(reason="an operator's terminate")
        started = time.monotonic()
        async with asyncio.timeout(15):
            rest = await collect(stream)
        # The records get the query timeout (2 s) to come once the execution closed.
        assert time.monotonic() - started < 8
    end = last_status(rest)
    assert end.state == TaskState.TASK_STATE_FAILED
    assert end.message.parts[0].text == (
        "Temporal closed the Run's workflow execution (terminated) before the Run settled: "
        "an operator's terminate"
    )


@pytest.mark.timeout(60)
async def test_a_cancelled_then_reset_task_is_listed_once_as_get_task_reads_it(
    harness: Harness,
) -> None:
    # Temporal cancelled the Run's workflow, then an operator reset it: visibility holds
    # both executions under one workflow id, and ListTasks listed the task twice, its old
    # execution as canceled, while GetTask (and every message, every cancel) reads the
    # execution it runs on.
    agent = f"a2a_rerun{uuid.uuid4().hex[:8]}"
    version = harness.client.publish(
        AgentBuilder(agent).model("fake-model").suspension(may_ask_questions=True).build()
    )
    harness.fake.enqueue(
        Reply.stall(30, after_chunks=1),
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which day?"}, id="q1")),
    )
    temporal = harness.client.temporal
    async with harness.worker():
        run = await harness.client.dispatch(version, "book it", scope=harness.scope)

        async def calling() -> bool:
            return len(harness.fake.requests) == 1

        await eventually(calling, what="the model call")
        handle = temporal.get_workflow_handle(run.workflow_id)
        await handle.cancel()

        async def cancelled() -> bool:
            return (await handle.describe()).status is WorkflowExecutionStatus.CANCELED

        await eventually(cancelled, what="the workflow to end cancelled")
        await reset_to_first_task(temporal, run.workflow_id)
        await state_when(harness.client, run, harness.scope, is_waiting, what="the question")
        both = f"WorkflowId = '{run.workflow_id}'"

        async def indexed() -> bool:
            return (await temporal.count_workflows(both)).count == 2

        await eventually(indexed, what="both executions in visibility")
        async with (
            served(harness) as base,
            a2a_client(base, agent, ACME, streaming=False) as client,
        ):
            got = await client.get_task(GetTaskRequest(id=run.run_id))
            page = await client.list_tasks(ListTasksRequest())
            canceled = await client.list_tasks(ListTasksRequest(status=CANCELED))
    assert got.status.state == INPUT_REQUIRED
    assert [(task.id, task.status.state) for task in page.tasks] == [(run.run_id, INPUT_REQUIRED)]
    assert list(canceled.tasks) == []


@pytest.mark.timeout(60)
async def test_subscribing_to_a_task_terminated_with_no_worker_is_refused_at_once_as_ended(
    harness: Harness,
) -> None:
    # Subscribing once the workflow was terminated, with no worker: the task is read from
    # the closed execution (``PsychClient.closed``), ended, and the subscription refused at
    # once, as with a worker; before 12-06 its state was asked of a worker, and the caller
    # told after the query timeout that none answered.
    agent = asking_agent(harness, "a2a_gone")
    async with (
        served(harness, query_timeout_seconds=5) as base,
        a2a_client(base, agent, ACME) as client,
    ):
        async with harness.worker():
            asked = await collect(client.send_message(user("book it")))
        task_id = asked[0].task.id
        handle = harness.client.temporal.get_workflow_handle(f"psych-acme-{task_id}")
        await handle.terminate(reason="an operator's terminate")
        started = time.monotonic()
        with pytest.raises(UnsupportedOperationError) as refused:
            async with asyncio.timeout(15):
                await collect(client.subscribe(SubscribeToTaskRequest(id=task_id)))
        assert time.monotonic() - started < 5
    assert refused.value.message == f"task {task_id} has ended: read it with GetTask"
