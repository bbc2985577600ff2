"""``PsychClient.result`` of a Run an operator resets while it waits follows the reset as
it follows a continue-as-new: the reset's new execution's close event is waited for each
long poll timed on its own. Temporal records no new run id in the terminated close event
of a reset (its reason, the identity ``history-resetter``): the latest execution,
described, is the reset's. Real dev server behind the gRPC relay, which answers a call
with a status on cue."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import grpc
import pytest
from temporalio.client import (
    WorkflowContinuedAsNewError,
    WorkflowExecutionStatus,
    WorkflowHistoryEventFilterType,
)
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from psych_runtime.specs import RunFailed, Scope
from psych_runtime.workflows import HISTORY_LONG_POLL_TIMEOUT, TemporalCancelled

from ._continuing_run import ContinuesWhenTold
from ._reset import reset_to_first_task
from ._waiting import eventually
from .test_listing_bounded import relayed_client
from .test_reads_bounded import HISTORY

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(150)
async def test_results_long_poll_after_a_reset_is_timed_on_its_own(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """A Run reset while ``result()`` waits: the new execution's close event is waited for
    as the first one's was. Read by the SDK's ``result()`` instead (as before: the latest
    execution's, once the first one's close event came), which asks again unseen after
    each empty answer (20 s), a CANCELLED answered at once ~40 s after the reset was taken
    for Temporal's silence ("did not answer ... within 30 s")."""
    assert HISTORY_LONG_POLL_TIMEOUT.total_seconds() < 38
    scope = Scope(tenant=f"t{uuid.uuid4().hex[:10]}")
    workflow_id = f"psych-{scope.tenant}-{uuid.uuid4().hex}"
    queue = f"reset-{uuid.uuid4().hex[:8]}"
    temporal = dev_env.client
    async with Worker(
        temporal,
        task_queue=queue,
        workflows=[ContinuesWhenTold],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        first = await temporal.start_workflow(
            ContinuesWhenTold.run, 0, id=workflow_id, task_queue=queue
        )
        try:
            async with relayed_client(dev_env, tmp_path) as (relay, client):
                reset_at: list[float] = []

                # Every long poll passed on until ~35 s after the reset; the next one (of
                # the new execution, Temporal's empty answers at 20 s between) answered
                # CANCELLED by the relay.
                async def each() -> None:
                    if reset_at and time.monotonic() - reset_at[0] > 35:
                        relay.fail_next(HISTORY, grpc.StatusCode.CANCELLED)
                    else:
                        relay.before_next(HISTORY, each)

                relay.before_next(HISTORY, each)
                waiting = asyncio.create_task(client.result(workflow_id, scope=scope))
                await asyncio.sleep(2)  # its first long poll asked, of the first execution
                await reset_to_first_task(temporal, workflow_id)
                reset_at.append(time.monotonic())
                with pytest.raises(TemporalCancelled) as failed:
                    async with asyncio.timeout(120):
                        await waiting
            assert relay.of(HISTORY)[-1] == grpc.StatusCode.CANCELLED
            old = temporal.get_workflow_handle(workflow_id, run_id=first.result_run_id)
            assert (await old.describe()).status is WorkflowExecutionStatus.TERMINATED
            closes = old.fetch_history_events(
                event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT
            )
            close = [event async for event in closes][-1]
            # What Temporal records of a reset in the execution it terminates: no run id.
            terminated = close.workflow_execution_terminated_event_attributes
            assert (terminated.reason, terminated.identity) == (
                "an operator's reset",
                "history-resetter",
            )
            assert failed.value.why.startswith(
                f"Temporal cancelled a long poll of the close event of Run {workflow_id} at "
                "once (CANCELLED: "
            ), failed.value.why
        finally:
            await temporal.get_workflow_handle(workflow_id).terminate()


@pytest.mark.timeout(60)
async def test_a_named_execution_is_not_followed_past_a_reset_or_a_continue_as_new(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """``result(execution=)`` reads that execution's close event only: one a reset
    terminated is a ``RunFailed`` saying so, one that continued as new has no result of
    its own (``WorkflowContinuedAsNewError`` naming the next); neither waits."""
    scope = Scope(tenant=f"t{uuid.uuid4().hex[:10]}")
    temporal = dev_env.client
    queue = f"named-{uuid.uuid4().hex[:8]}"
    reset_id, continued_id = (f"psych-{scope.tenant}-{uuid.uuid4().hex}" for _ in range(2))
    async with (
        Worker(
            temporal,
            task_queue=queue,
            workflows=[ContinuesWhenTold],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ),
        relayed_client(dev_env, tmp_path) as (_relay, client),
    ):
        reset = await temporal.start_workflow(
            ContinuesWhenTold.run, 0, id=reset_id, task_queue=queue
        )
        continued = await temporal.start_workflow(
            ContinuesWhenTold.run, 1, id=continued_id, task_queue=queue
        )
        try:
            await asyncio.sleep(1)  # each one's first workflow task completed
            await reset_to_first_task(temporal, reset_id)
            await continued.signal(ContinuesWhenTold.told)
            async with asyncio.timeout(10):
                with pytest.raises(RunFailed, match="an operator's reset"):
                    await client.result(reset_id, scope=scope, execution=reset.result_run_id)
                first = temporal.get_workflow_handle(continued_id, run_id=continued.result_run_id)

                async def went_on_now() -> bool:
                    described = await first.describe()
                    return described.status is WorkflowExecutionStatus.CONTINUED_AS_NEW

                await eventually(went_on_now, what="the first execution to continue as new")
                with pytest.raises(WorkflowContinuedAsNewError) as went_on:
                    await client.result(
                        continued_id, scope=scope, execution=continued.result_run_id
                    )
            latest = await temporal.get_workflow_handle(continued_id).describe()
            assert went_on.value.new_execution_run_id == latest.run_id
        finally:
            for workflow_id in (reset_id, continued_id):
                await temporal.get_workflow_handle(workflow_id).terminate()
