"""A2A reads of a task whose Run's workflow execution closed, with no worker polling: GetTask
(and ListTasks by its context id, and SubscribeToTask's and CancelTask's first read)
answers at once what Temporal holds of the closed execution (its close event), the task
its state showed when a worker answered (as the serve read it before: a query); they
waited the query timeout for a worker to replay the execution and answered no-worker. A
workflow Temporal cancelled is read from its history (the Run settled ABORTED as it was
cancelled; ``test_a2a_closed_state_only.py``: where only its state says how it settled).
One whose result the serve cannot decode (a key it does not hold) is read from its state.
Driven by ``a2a-sdk``'s own client against ``psych serve`` on
loopback and the session's dev server."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta

import pytest
from a2a.client import Client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, UnsupportedOperationError
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowExecutionStatus
from temporalio.converter import PayloadCodec

from psych_runtime.specs import AccessDenied, AgentBuilder, Scope
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import ClosedRun, PsychClient, RunHandle

from ._serve import ACME, asking_agent, served
from ._waiting import eventually
from .conftest import Harness
from .test_a2a_closing_codec import _with_codec
from .test_a2a_serve import a2a_client, collect, user

pytestmark = pytest.mark.e2e

QUERY_TIMEOUT = 6.0
"""The serve's query timeout: a read that waits for a worker takes this long at least."""


class QueriesOnly(PsychClient):
    """A client that reads every Run as the serve did before it read closed executions
    from Temporal: its state, a query a worker answers."""

    async def closed(
        self, run: RunHandle | str, *, scope: Scope, rpc_timeout: timedelta | None = None
    ) -> ClosedRun | None:
        return None


def _ask(call: str) -> Reply:
    return Reply.tool_calls(ToolCall("ask_question", {"question": "Which day?"}, id=call))


@pytest.mark.timeout(120)
async def test_a_closed_tasks_reads_answer_without_a_worker_as_with_one(
    harness: Harness,
) -> None:
    agent = asking_agent(harness, "a2a_closed")  # the first Run asks (q1)
    harness.fake.enqueue(
        _ask("q2"),
        Reply.text("Order 42 ships today."),
        Reply.error(400, message="bad request shape"),
        _ask("q3"),
    )
    temporal = harness.client.temporal
    querying = QueriesOnly(
        temporal, store=harness.client.store, task_queue=harness.client.task_queue
    )
    async with (
        served(harness, query_timeout_seconds=QUERY_TIMEOUT) as base,
        a2a_client(base, agent, ACME, streaming=False) as client,
        a2a_client(base, agent, ACME) as streams,
        served(harness, query_timeout_seconds=QUERY_TIMEOUT, client=querying) as queried,
        a2a_client(queried, agent, ACME, streaming=False) as asking,
    ):

        async def sent(text: str) -> Task:
            (event,) = await collect(client.send_message(user(text)))
            return event.task

        async def read(task_id: str, via: Client) -> tuple[Task, Task]:
            got = await via.get_task(GetTaskRequest(id=task_id))
            listed = await via.list_tasks(
                ListTasksRequest(context_id=task_id, include_artifacts=True)
            )
            (row,) = listed.tasks
            return got, row

        async with harness.worker():
            canceled = (await sent("book it")).id
            await client.cancel_task(CancelTaskRequest(id=canceled))
            terminated = (await sent("book it")).id
            await temporal.get_workflow_handle(f"psych-acme-{terminated}").terminate(
                reason="an operator's terminate"
            )
            completed = (await sent("when?")).id
            failed = (await sent("when?")).id
            cancelled = (await sent("book it")).id
            handle = temporal.get_workflow_handle(f"psych-acme-{cancelled}")
            await handle.cancel()

            async def closed() -> bool:
                return (await handle.describe()).status is WorkflowExecutionStatus.CANCELED

            await eventually(closed, what="the workflow to end cancelled")
            ids = (canceled, terminated, completed, failed, cancelled)
            # As the serve read them before: each Run's state, which its worker answers.
            with_worker = {task_id: await read(task_id, asking) for task_id in ids}

        started = time.monotonic()
        without = {task_id: await read(task_id, client) for task_id in ids}
        with pytest.raises(UnsupportedOperationError, match="has ended"):
            await streams.subscribe(SubscribeToTaskRequest(id=completed)).__anext__()
        with pytest.raises(TaskNotCancelableError, match="has already ended"):
            await client.cancel_task(CancelTaskRequest(id=terminated))
        # Twelve reads, none of which waited for a worker (a workflow Temporal cancelled
        # waited for one to replay it: its close event does not say how the Run settled).
        assert time.monotonic() - started < QUERY_TIMEOUT
    states = {task_id: with_worker[task_id][0].status.state for task_id in ids}
    assert states == {
        canceled: TaskState.TASK_STATE_CANCELED,
        terminated: TaskState.TASK_STATE_FAILED,
        completed: TaskState.TASK_STATE_COMPLETED,
        failed: TaskState.TASK_STATE_FAILED,
        cancelled: TaskState.TASK_STATE_CANCELED,
    }
    got, row = with_worker[completed]
    assert [a.parts[0].text for a in got.artifacts] == ["Order 42 ships today."]
    assert list(row.artifacts) == list(got.artifacts)
    assert with_worker[terminated][0].status.message.parts[0].text == (
        "Temporal closed the Run's workflow execution (terminated) before the Run settled: "
        "an operator's terminate"
    )
    assert "model_error" in with_worker[failed][0].status.message.parts[0].text
    assert "canceled over A2A" in with_worker[canceled][0].status.message.parts[0].text
    assert with_worker[cancelled][0].status.message.parts[0].text == (
        "cancelled: the workflow was cancelled by its parent or an operator"
    )
    # What each task shows, read with no worker, is what it showed read with one.
    assert without == {task_id: with_worker[task_id] for task_id in ids}


class HoldsNoKeyOfResults(PayloadCodec):
    """Passes payloads through but refuses a Run's returned ``RunResult`` (the only payload
    naming ``handles``), as a serve's codec refuses one sealed with a key it does not hold
    (the Run's key before a rotation); a worker's answers it lets through."""

    def __init__(self) -> None:
        self.refused = 0

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        if any(b'"handles"' in payload.data for payload in payloads):
            self.refused += 1
            raise AccessDenied("cannot decrypt a payload: its key is not held here")
        return list(payloads)


@pytest.mark.timeout(60)
async def test_a_closed_task_whose_result_the_serve_cannot_decode_is_read_from_its_state(
    harness: Harness,
) -> None:
    # The close event's result decoded with a codec that refuses it: the codec's
    # AccessDenied was taken for another tenant's Run, and the task answered not found
    # (ListTasks by its context left it out); its state, which a worker answers, says it.
    version = harness.client.publish(AgentBuilder("a2a_closed_keys").model("fake-model").build())
    harness.fake.enqueue(Reply.text("Order 42 ships today."))
    codec = HoldsNoKeyOfResults()
    serving = PsychClient(
        _with_codec(harness.client.temporal, codec),
        store=harness.client.store,
        task_queue=harness.client.task_queue,
        registry=harness.registry,
    )
    async with harness.worker():
        run = await harness.client.dispatch(version, "when?", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        async with (
            served(harness, query_timeout_seconds=QUERY_TIMEOUT, client=serving) as base,
            a2a_client(base, "a2a_closed_keys", ACME, streaming=False) as client,
        ):
            got = await client.get_task(GetTaskRequest(id=run.run_id))
            listed = await client.list_tasks(ListTasksRequest(context_id=run.run_id))
    assert codec.refused == 2
    assert got.status.state == TaskState.TASK_STATE_COMPLETED
    assert [a.parts[0].text for a in got.artifacts] == ["Order 42 ships today."]
    assert [task.status.state for task in listed.tasks] == [TaskState.TASK_STATE_COMPLETED]


class HoldsNoKeyOfDetails(PayloadCodec):
    """Passes payloads through but refuses the details an operator terminated with (sealed
    with a key this serve does not hold)."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        if any(b"sealed details" in payload.data for payload in payloads):
            raise AccessDenied("cannot decrypt a payload: its key is not held here")
        return list(payloads)


@pytest.mark.timeout(60)
async def test_a_task_terminated_with_details_the_serve_cannot_decode_is_failed_not_missing(
    harness: Harness,
) -> None:
    # Its reason is read from the close event (``result()``, which decodes the details):
    # the codec's AccessDenied was taken for another tenant's Run, and the task answered
    # not found, with a worker or without.
    agent = asking_agent(harness, "a2a_closed_details")
    serving = PsychClient(
        _with_codec(harness.client.temporal, HoldsNoKeyOfDetails()),
        store=harness.client.store,
        task_queue=harness.client.task_queue,
        registry=harness.registry,
    )
    async with (
        served(harness, query_timeout_seconds=QUERY_TIMEOUT, client=serving) as base,
        a2a_client(base, agent, ACME, streaming=False) as client,
    ):
        async with harness.worker():
            (event,) = await collect(client.send_message(user("book it")))
        task_id = event.task.id
        handle = harness.client.temporal.get_workflow_handle(f"psych-acme-{task_id}")
        await handle.terminate("sealed details", reason="an operator's terminate")
        got = await client.get_task(GetTaskRequest(id=task_id))
    assert got.status.state == TaskState.TASK_STATE_FAILED
    assert got.status.message.parts[0].text == (
        "Temporal closed the Run's workflow execution (terminated) before the Run settled: "
        "an operator's terminate"
    )
