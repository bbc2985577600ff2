"""A rolling upgrade without Worker Versioning: a tools worker of a later build answers a
Run whose workflow task a worker of this build runs, with a field of the outcome this
build does not know (as ``ToolOutcome.unpermitted`` is to a build before it). The Run's
workflow task fails, retried until a worker of the later build takes it; the Run itself
does not fail (``tests/workflows/histories/README.md``, compatibility notes)."""

from __future__ import annotations

import dataclasses
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.api.failure.v1 import Failure
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from psych_runtime.activities import activity_name
from psych_runtime.activities.contract import (
    MODEL_CALL,
    TOOL_RUN_CODE,
    ErrorType,
    ModelFailure,
    SlimCodeToolCall,
    SlimModelCallInput,
    SlimModelCallResult,
    role_task_queue,
)
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import WorkerSettings, activities_for, egress_for, run_worker
from psych_runtime.workers.fleet import activities_of_role
from psych_runtime.workflows import PsychClient

from ._waiting import eventually
from .conftest import Harness


def count_crates(sku: str) -> str:
    """Count crates of an item.

    Args:
        sku: The item.
    """
    return f"{sku}: 4 crates"


def roles_apart_client(harness: Harness, settings: WorkerSettings) -> PsychClient:
    """A client of the harness's Temporal and registry dispatching to ``settings``' fleet,
    its roles apart."""
    return PsychClient(
        harness.env.client,
        store=FileVersionStore(harness.home / "versions"),
        task_queue=settings.task_queue,
        registry=harness.registry,
        roles_apart=True,
    )


async def task_failures_of_a_running_run(handle: WorkflowHandle[Any, Any]) -> list[Failure]:
    """Wait until the Run's workflow task (or the Run) fails; check the Run is still
    running (the task is retried, for a worker that reads the field) and return its
    workflow tasks' failures."""
    ends = (
        EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    )

    async def task_or_run_failed() -> bool:
        events = [e async for e in handle.fetch_history_events()]
        return any(e.event_type in ends for e in events)

    await eventually(task_or_run_failed, what="the workflow task (or the Run) to fail")
    events = [e async for e in handle.fetch_history_events()]
    assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
    return [
        e.workflow_task_failed_event_attributes.failure
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]


async def test_an_outcome_with_a_field_of_a_later_build_fails_the_task_not_the_run(
    harness: Harness,
) -> None:
    # Safe to repeat: its outcome is the activity's result, not completed through the client.
    harness.registry.register(count_crates, idempotent=True)
    spec = (
        AgentBuilder("crates", registry=harness.registry)
        .model("fake-model")
        .tool("count_crates")
        .build()
    )
    settings = dataclasses.replace(harness.settings, roles=("workflows", "model"), roles_apart=True)
    egress = egress_for(harness.settings)
    tools = activities_of_role(activities_for(harness.settings, egress), "tools")
    [ours] = [fn for fn in tools if activity_name(fn) == TOOL_RUN_CODE]

    @activity.defn(name=TOOL_RUN_CODE)
    async def later_run_code(input: SlimCodeToolCall) -> dict[str, Any]:
        """This build's tool activity, answering with a field of a later build's outcome."""
        outcome = await ours(input)
        return {**outcome.model_dump(mode="json"), "marked_by_a_later_build": True}

    later = Worker(
        harness.env.client,
        task_queue=role_task_queue(settings.task_queue, "tools"),
        activities=[*(fn for fn in tools if fn is not ours), later_run_code],
    )
    client = roles_apart_client(harness, settings)
    harness.fake.enqueue(Reply.tool_calls(ToolCall("count_crates", {"sku": "pear"})))
    try:
        async with later, run_worker(harness.env.client, settings):
            run = await client.dispatch(spec, "How many crates of pears?", scope=harness.scope)
            handle = harness.env.client.get_workflow_handle(run.workflow_id)
            failed = await task_failures_of_a_running_run(handle)
            # The SDK's words, then ours, naming the likely cause.
            assert failed[0].message == "Failed decoding arguments", failed[0]
            assert "a worker of a later build" in failed[0].cause.message, failed[0]
            await handle.terminate("test over")
    finally:
        await egress.aclose()


async def test_a_failure_with_a_field_of_a_later_build_fails_the_task_not_the_run(
    harness: Harness,
) -> None:
    # A model worker of a later build fails the call with a ModelFailure holding a field
    # this build does not know: its details are an activity's payload as its result is,
    # read by the workflow (not the SDK), and must fail the workflow task as a result does,
    # not the Run (until 12-06 pydantic's ValidationError failed it, unsettled).
    spec = AgentBuilder("crates").model("fake-model").build()
    settings = dataclasses.replace(harness.settings, roles=("workflows", "tools"), roles_apart=True)
    egress = egress_for(harness.settings)
    model = activities_of_role(activities_for(harness.settings, egress), "model")

    @activity.defn(name=MODEL_CALL)
    async def later_model_call(input: SlimModelCallInput) -> SlimModelCallResult:
        """A later build's model call failing with a field of its ModelFailure."""
        failure = ModelFailure(transient=True, message="upstream answered 503")
        raise ApplicationError(
            failure.message,
            {**failure.model_dump(mode="json"), "said_by_a_later_build": True},
            type=ErrorType.MODEL_CALL_FAILED,
            non_retryable=True,
        )

    later = Worker(
        harness.env.client,
        task_queue=role_task_queue(settings.task_queue, "model"),
        activities=[*(fn for fn in model if activity_name(fn) != MODEL_CALL), later_model_call],
    )
    client = roles_apart_client(harness, settings)
    try:
        async with later, run_worker(harness.env.client, settings):
            run = await client.dispatch(spec, "How many crates of pears?", scope=harness.scope)
            handle = harness.env.client.get_workflow_handle(run.workflow_id)
            failed = await task_failures_of_a_running_run(handle)
            assert "a worker of a later build" in failed[0].message, failed[0]
            assert "ModelCallFailed" in failed[0].message, failed[0]
            await handle.terminate("test over")
    finally:
        await egress.aclose()
