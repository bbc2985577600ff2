"""An answer that comes after an abort is refused, even in the abort's own activation.

From an audit of WorkflowRun's steps and interrupts: an abort and an approval sent while the
Run's worker was down (or busy) reach the Run in one activation, the abort first. The wait
the abort ends was still held as the approval's validator ran, so the approver was told
"approved" and a ``resumed`` record said so: a tool step's call was then not run, and an
agent step's approval, forwarded to the step after the abort, could reach it first and run
its call in an aborted workflow.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import UpdateWorkflowExecutionLifecycleStage
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import PollWorkflowExecutionUpdateRequest
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, Refused, WorkflowBuilder, WorkflowSpec
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import (
    ABORT,
    RESUME,
    AbortInput,
    ResumeInput,
    RunHandle,
    RunState,
    RunStatus,
    SuspensionReason,
)
from psych_runtime.workflows.client._client_actions import update_id

from ._waiting import eventually, is_waiting, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

ABORTED_SAYS = "ended unanswered: the Run was aborted by ops: the wrong customer"


def register_write(harness: Harness, written: list[str]) -> None:
    @harness.registry.register
    async def write(row: str) -> str:
        """Write a row (cannot be interrupted)."""
        written.append(row)
        return f"wrote {row}"

    harness.settings.policy = RulePolicy(tools={"write": "ask"})


def tool_step_workflow(harness: Harness) -> WorkflowSpec:
    return (
        WorkflowBuilder("writer", registry=harness.registry)
        .tool("write", interruptible=False)
        .tool_step("write", "write", {"row": "r1"})
        .build()
    )


async def suspended_then_stopped(harness: Harness, spec: WorkflowSpec) -> RunHandle:
    """A Run of ``spec`` suspended on its approval, its worker stopped."""
    async with harness.worker():
        run = await harness.client.dispatch(spec, "write r1", scope=harness.scope)
        await state_when(harness.client, run, harness.scope, is_waiting, what="the approval")
    return run


async def abort_signalled(harness: Harness, run: RunHandle) -> None:
    """The abort, as a signal: in the Run's history before any answer sent next."""
    handle = harness.client.temporal.get_workflow_handle(run.workflow_id)
    await handle.signal(ABORT, AbortInput(tenant="acme", by="ops", reason="the wrong customer"))


async def admitted(harness: Harness, run: RunHandle, key: str) -> None:
    """Return once the server holds the resume sent under ``key`` (no worker took it yet),
    so that the next workflow task brings it with the abort."""
    temporal = harness.client.temporal
    sent_as = update_id(RESUME, key)
    assert sent_as is not None
    request = PollWorkflowExecutionUpdateRequest(
        namespace=temporal.namespace,
        update_ref=UpdateRef(
            workflow_execution=WorkflowExecution(workflow_id=run.workflow_id),
            update_id=sent_as,
        ),
        wait_policy=WaitPolicy(
            lifecycle_stage=UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED
        ),
    )

    async def held() -> bool:
        try:
            await temporal.workflow_service.poll_workflow_execution_update(request)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False  # not sent yet
            raise
        return True

    await eventually(held, what="the server to hold the approval", within=20.0)


async def refused(answer: Awaitable[object]) -> Refused:
    with pytest.raises(Refused) as caught:
        await answer
    return caught.value


async def test_an_approval_in_the_aborts_activation_is_refused_for_a_tool_step(
    harness: Harness,
) -> None:
    written: list[str] = []
    register_write(harness, written)
    run = await suspended_then_stopped(harness, tool_step_workflow(harness))
    await abort_signalled(harness, run)
    approving = asyncio.create_task(
        harness.client.approve(run, "write", scope=harness.scope, idempotency_key="ok-r1")
    )
    await admitted(harness, run, "ok-r1")
    async with harness.worker():
        refusal = await refused(approving)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert refusal.kind == "NotSuspended", refusal
    assert f"'write' {ABORTED_SAYS}" in str(refusal), refusal
    assert result.status is RunStatus.ABORTED, result.reason
    assert [r.kind for r in records if r.kind in ("abort_requested", "resumed")] == [
        "abort_requested"
    ]
    assert written == []


async def test_an_approval_signal_in_the_aborts_activation_is_not_taken(
    harness: Harness,
) -> None:
    written: list[str] = []
    register_write(harness, written)
    run = await suspended_then_stopped(harness, tool_step_workflow(harness))
    await abort_signalled(harness, run)
    handle = harness.client.temporal.get_workflow_handle(run.workflow_id)
    await handle.signal(
        RESUME,
        ResumeInput(
            tenant="acme", reason=SuspensionReason.APPROVAL, id="write", approved=True, by="bob"
        ),
    )
    async with harness.worker():
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.ABORTED, result.reason
    # Before: a "resumed" record said bob approved a call the Run then did not run.
    assert [r.kind for r in records if r.kind in ("abort_requested", "resumed")] == [
        "abort_requested"
    ]
    assert written == []


async def test_an_approval_in_the_aborts_activation_never_reaches_an_agent_step(
    harness: Harness,
) -> None:
    written: list[str] = []
    register_write(harness, written)
    clerk = (
        AgentBuilder("clerk", registry=harness.registry)
        .model("fake-model")
        .tool("write", interruptible=False)
        .build()
    )
    spec = WorkflowBuilder("clerking", registry=harness.registry).agent_step("rows", clerk).build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("write", {"row": "r1"}, id="call-w")), Reply.text("written")
    )
    run = await suspended_then_stopped(harness, spec)
    await abort_signalled(harness, run)
    approving = asyncio.create_task(
        harness.client.approve(run, "call-w", scope=harness.scope, idempotency_key="ok-w")
    )
    await admitted(harness, run, "ok-w")
    step = f"{run.workflow_id}-step1"
    async with harness.worker():
        refusal = await refused(approving)
        result = await harness.client.result(run, scope=harness.scope)
        child = (await harness.client.records(step, scope=harness.scope)).records
    assert refusal.kind == "NotSuspended", refusal
    assert f"'call-w' {ABORTED_SAYS}" in str(refusal), refusal
    assert result.status is RunStatus.ABORTED, result.reason
    # Before, the approval was forwarded after the abort and could reach the step first:
    # the write then ran in the aborted workflow.
    assert [r.kind for r in child if r.kind in ("abort_requested", "resumed")] == [
        "abort_requested"
    ]
    assert written == []


async def subagent_suspended_then_stopped(
    harness: Harness, written: list[str]
) -> tuple[RunHandle, str]:
    """A lead whose subagent waits for the approval of its write (call-w, mirrored by the
    lead), its worker stopped; the lead's Run and the subagent's workflow id."""
    register_write(harness, written)
    clerk = (
        AgentBuilder("clerk", registry=harness.registry)
        .model("fake-model")
        .tool("write", interruptible=False)
        .build()
    )
    lead = (
        AgentBuilder("lead", registry=harness.registry)
        .model("fake-model")
        .tool("write", interruptible=False)
        .subagent("clerk", "Writes the rows it is given.", clerk)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delegate", {"agent": "clerk", "task": "write r1"})),
        Reply.tool_calls(ToolCall("write", {"row": "r1"}, id="call-w")),
        Reply.text("written"),
        Reply.text("done"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(lead, "write r1", scope=harness.scope)

        def the_subagents_approval(state: RunState) -> bool:
            return any(p.id == "call-w" for p in state.pending)

        state = await state_when(
            harness.client, run, harness.scope, the_subagents_approval, what="call-w mirrored"
        )
    (sub,) = {p.run for p in state.pending if p.id == "call-w"}
    assert sub is not None
    return run, sub


async def signals_received(harness: Harness, workflow_id: str) -> list[str]:
    history = await harness.client.temporal.get_workflow_handle(workflow_id).fetch_history()
    return [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in history.events
        if e.HasField("workflow_execution_signaled_event_attributes")
    ]


async def test_an_approval_in_the_aborts_activation_never_reaches_a_subagent(
    harness: Harness,
) -> None:
    # From a review of the fix above: a lead AgentRun mirrors its subagent's items as a
    # workflow does its step's, and its abort winds the subagent down the same way (an
    # abort signalled once the delegate's wait ends). An approval of the subagent's call
    # reaching the lead in the abort's own activation was still taken ("approved") and
    # forwarded to a subagent being aborted.
    written: list[str] = []
    run, sub = await subagent_suspended_then_stopped(harness, written)
    await abort_signalled(harness, run)
    approving = asyncio.create_task(
        harness.client.approve(run, "call-w", scope=harness.scope, idempotency_key="ok-sub")
    )
    await admitted(harness, run, "ok-sub")
    async with harness.worker():
        refusal = await refused(approving)
        result = await harness.client.result(run, scope=harness.scope)
        child = (await harness.client.records(sub, scope=harness.scope)).records
    assert refusal.kind == "NotSuspended", refusal
    assert f"'call-w' {ABORTED_SAYS}" in str(refusal), refusal
    assert result.status is RunStatus.ABORTED, result.reason
    assert [r.kind for r in child if r.kind in ("abort_requested", "resumed")] == [
        "abort_requested"
    ]
    assert await signals_received(harness, sub) == [ABORT]
    assert written == []


async def test_an_approval_signal_in_the_aborts_activation_never_reaches_a_subagent(
    harness: Harness,
) -> None:
    # As a signal, the lead forwarded it ahead of the abort: the subagent recorded bob's
    # approval ("resumed"), then the abort, and its call was not run.
    written: list[str] = []
    run, sub = await subagent_suspended_then_stopped(harness, written)
    await abort_signalled(harness, run)
    handle = harness.client.temporal.get_workflow_handle(run.workflow_id)
    await handle.signal(
        RESUME,
        ResumeInput(
            tenant="acme", reason=SuspensionReason.APPROVAL, id="call-w", approved=True, by="bob"
        ),
    )
    async with harness.worker():
        result = await harness.client.result(run, scope=harness.scope)
        child = (await harness.client.records(sub, scope=harness.scope)).records
    assert result.status is RunStatus.ABORTED, result.reason
    assert [r.kind for r in child if r.kind in ("abort_requested", "resumed")] == [
        "abort_requested"
    ]
    assert await signals_received(harness, sub) == [ABORT]
    assert written == []
