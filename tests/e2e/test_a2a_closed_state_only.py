"""A2A reads of a task whose Run's workflow execution closed where only its state says how
the Run settled, with no worker polling: GetTask answers an error naming why (its close
event does not say it; a worker answers it, replaying the execution), never a state it
does not know. A Run cancelled after it took a steer (its reason counts the messages it did
not deliver), and an execution Temporal closed after the Run settled (its reason and answer
are its state's). With a worker, each reads as its state shows it. Driven by ``a2a-sdk``'s
own client against ``psych serve`` on loopback and the session's dev server."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Literal

import pytest
from a2a.types import GetTaskRequest, TaskState
from a2a.utils.errors import InternalError
from temporalio.client import WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from ._serve import ACME, asking_agent, served
from ._settled_run import SettledThenOpen
from ._waiting import eventually
from .conftest import Harness
from .test_a2a_serve import a2a_client, collect, user

pytestmark = pytest.mark.e2e

QUERY_TIMEOUT = 4.0
"""The serve's query timeout: a read that waits for a worker takes this long at least."""

NO_WORKER = {"type": "urn:psych:problem:no-worker", "status": "503"}


@pytest.mark.timeout(90)
async def test_a_task_cancelled_after_a_steer_is_read_from_its_state_or_says_why_not(
    harness: Harness,
) -> None:
    agent = asking_agent(harness, "a2a_state_only")  # the Run asks (q1), and waits
    async with (
        served(harness, query_timeout_seconds=QUERY_TIMEOUT) as base,
        a2a_client(base, agent, ACME, streaming=False) as client,
    ):
        async with harness.worker():
            (event,) = await collect(client.send_message(user("book it")))
            task_id = event.task.id
            workflow_id = f"psych-{harness.scope.tenant}-{task_id}"
            await harness.client.steer(workflow_id, "Friday, please", scope=harness.scope)
            handle = harness.client.temporal.get_workflow_handle(workflow_id)
            await handle.cancel()

            async def closed() -> bool:
                return (await handle.describe()).status is WorkflowExecutionStatus.CANCELED

            await eventually(closed, what="the workflow to end cancelled")
            with_worker = await client.get_task(GetTaskRequest(id=task_id))
        started = time.monotonic()
        with pytest.raises(InternalError) as unread:
            async with asyncio.timeout(QUERY_TIMEOUT + 10):
                await client.get_task(GetTaskRequest(id=task_id))
    # Its state: the steer was taken, and no model read it.
    assert with_worker.status.state == TaskState.TASK_STATE_CANCELED
    assert with_worker.status.message.parts[0].text == (
        "cancelled: the workflow was cancelled by its parent or an operator; 1 message sent "
        "during the Run not delivered (run_settled.undelivered)"
    )
    # With no worker: what it does not know, it does not show (not canceled without the
    # note), and it says why, after one query timeout.
    assert unread.value.data == NO_WORKER
    assert str(unread.value) == (
        "the Run could not be read: no worker answered for the Run in time; its workflow "
        "execution closed (canceled), and its close event does not say what its state does "
        "(how the Run settled), which a worker answers replaying it"
    )
    assert time.monotonic() - started < QUERY_TIMEOUT + 5


async def _settled_then_closed(
    harness: Harness, agent: str, status: str, close: Literal["terminate", "cancel"]
) -> str:
    """A Run of ``agent`` (its stand-in, ``_settled_run.py``) that settled ``status`` and
    that Temporal then closed (``close``); its task id. Its worker is gone after."""
    version = harness.client.publish(AgentBuilder(agent).model("fake-model").build())
    task_id = f"k{uuid.uuid4().hex}"
    attributes = [
        SearchAttributePair(SearchAttributeKey.for_keyword(name), value)
        for name, value in (
            ("PsychTenant", harness.scope.tenant),
            ("PsychAgent", agent),
            ("PsychVersion", version.hash),
            ("PsychStatus", "running"),
        )
    ]
    queue = f"settled-{agent}"
    temporal = harness.client.temporal
    async with Worker(
        temporal,
        task_queue=queue,
        workflows=[SettledThenOpen],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await temporal.start_workflow(
            SettledThenOpen.run,
            status,
            id=f"psych-{harness.scope.tenant}-{task_id}",
            task_queue=queue,
            search_attributes=TypedSearchAttributes(attributes),
        )
        status_key = SearchAttributeKey.for_keyword("PsychStatus")

        async def settled() -> bool:
            described = await handle.describe()
            return described.typed_search_attributes.get(status_key) == status

        await eventually(settled, what=f"the stand-in to set PsychStatus {status}")
        if close == "terminate":
            await handle.terminate("an operator's terminate")
        else:
            await handle.cancel()

        async def closed() -> bool:
            return (await handle.describe()).status is not WorkflowExecutionStatus.RUNNING

        await eventually(closed, what="the stand-in to close")
    return task_id


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("status", "close", "closed_as"),
    [
        ("completed", "terminate", "terminated"),
        ("completed", "cancel", "canceled"),
        # Aborted (by its caller) before Temporal cancelled it: the cancellation's reason
        # would be a wrong one.
        ("aborted", "cancel", "canceled"),
    ],
)
async def test_an_execution_closed_after_its_run_settled_says_why_it_is_not_read(
    harness: Harness, status: str, close: Literal["terminate", "cancel"], closed_as: str
) -> None:
    agent = f"a2a_settled{uuid.uuid4().hex[:8]}"
    task_id = await _settled_then_closed(harness, agent, status, close)
    # Not shown with no worker: the close event does not say how it settled.
    workflow_id = f"psych-{harness.scope.tenant}-{task_id}"
    assert await harness.client.closed(workflow_id, scope=harness.scope) is None
    async with (
        served(harness, query_timeout_seconds=QUERY_TIMEOUT) as base,
        a2a_client(base, agent, ACME, streaming=False) as client,
    ):
        with pytest.raises(InternalError) as unread:
            async with asyncio.timeout(QUERY_TIMEOUT + 10):
                await client.get_task(GetTaskRequest(id=task_id))
    assert unread.value.data == NO_WORKER
    assert str(unread.value) == (
        "the Run could not be read: no worker answered for the Run in time; its workflow "
        f"execution closed ({closed_as}), and its close event does not say what its state "
        "does (how the Run settled), which a worker answers replaying it"
    )


@pytest.mark.timeout(60)
async def test_a_continued_run_cancelled_is_read_from_its_history_and_carry(
    harness: Harness,
) -> None:
    # Its last execution continued from one that handed it no message (its input's carry,
    # read here through the client's converter): the cancellation's reason is the state's.
    @harness.registry.register
    def stamp() -> str:
        """Stamp."""
        return "stamped"

    spec = (
        AgentBuilder(f"carried{uuid.uuid4().hex[:8]}", registry=harness.registry)
        .model("fake-model")
        .tool("stamp")
        .suspension(may_ask_questions=True)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("stamp", {}, id="s1")),
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which day?"}, id="q1")),
    )
    async with harness.worker():
        run = await harness.client.dispatch(
            spec, "stamp it", scope=harness.scope, continue_after_events=1
        )
        handle = harness.client.temporal.get_workflow_handle(run.workflow_id)

        async def asking() -> bool:
            state = await harness.client.status(run, scope=harness.scope)
            return state.status is RunStatus.SUSPENDED

        await eventually(asking, what="the continued Run to ask")
        await handle.cancel()

        async def closed() -> bool:
            return (await handle.describe()).status is WorkflowExecutionStatus.CANCELED

        await eventually(closed, what="the workflow to end cancelled")
        state = await harness.client.status(run, scope=harness.scope)
    history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    assert started.continued_execution_run_id  # it continued as new
    shown = await harness.client.closed(run, scope=harness.scope)
    assert shown is not None
    assert (shown.status, shown.reason, shown.answer) == (state.status, state.reason, None)
    assert shown.status is RunStatus.ABORTED


@pytest.mark.timeout(90)
async def test_a_continued_run_handed_a_follow_up_then_cancelled_is_its_states_to_say(
    harness: Harness,
) -> None:
    # The execution before the cut took a follow-up after its last answer and handed it on
    # (its carry's ``unanswered``); the last one took no steer of its own, and Temporal
    # cancelled it while the model read it. Its history shows PsychStatus set aborted
    # after the cancel request, but the reason counts the message no model answered,
    # which only its state says: ``closed`` leaves it to the state, not the bare
    # cancellation's reason.
    waited = asyncio.Event()

    @harness.registry.register
    async def wait_note() -> str:
        """Wait for a note."""
        await waited.wait()
        return "waited"

    spec = (
        AgentBuilder(f"handed{uuid.uuid4().hex[:8]}", registry=harness.registry)
        .model("fake-model")
        .tool("wait_note")
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("wait_note", {}, id="w1")),
        Reply.text("first answer"),
        Reply.stall(60, after_chunks=0),  # the turn after the cut: its model call hangs
    )
    async with harness.worker():
        run = await harness.client.dispatch(
            spec, "hello", scope=harness.scope, continue_after_events=1
        )
        await harness.client.steer(run, "and now step 1", scope=harness.scope, mode="follow_up")
        waited.set()
        handle = harness.client.temporal.get_workflow_handle(run.workflow_id)

        async def reading() -> bool:
            return len(harness.fake.requests) >= 3

        await eventually(reading, what="the turn after the cut to call the model")
        await handle.cancel()

        async def closed() -> bool:
            return (await handle.describe()).status is WorkflowExecutionStatus.CANCELED

        await eventually(closed, what="the workflow to end cancelled")
        state = await harness.client.status(run, scope=harness.scope)
        shown = await harness.client.closed(run, scope=harness.scope)
    history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    assert started.continued_execution_run_id  # it continued as new
    carry = json.loads(started.input.payloads[0].data)["carry"]
    assert [u["message"] for u in carry["unanswered"]] == ["and now step 1"]
    assert state.status is RunStatus.ABORTED
    assert state.reason == (
        "cancelled: the workflow was cancelled by its parent or an operator; 1 message sent "
        "during the Run not delivered (run_settled.undelivered)"
    )
    assert shown is None
