"""``PsychClient.result(execution=)`` of a Run whose workflow Temporal cancelled, and which
an operator then reset: the execution named is the one read, its state included, never the
execution the workflow runs on in since. Real Runs on the session's dev server."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import WorkflowExecutionStatus

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply
from psych_runtime.workflows import RunStatus

from ._reset import reset_to_first_task
from ._waiting import eventually
from .conftest import Harness

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(60)
async def test_a_cancelled_execution_reset_since_is_read_from_its_own_state(
    harness: Harness,
) -> None:
    # A Run whose workflow Temporal cancelled has its result in its state, which result()
    # queried on the workflow's latest execution: after an operator's reset, the one it
    # runs on in (still working), not the execution named, so it failed "cancelled".
    spec = AgentBuilder(f"reset{uuid.uuid4().hex[:8]}").model("fake-model").build()
    harness.fake.enqueue(Reply.stall(30, after_chunks=1), Reply.stall(30, after_chunks=1))
    temporal = harness.env.client
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)

        async def calling(count: int) -> bool:
            return len(harness.fake.requests) == count

        await eventually(lambda: calling(1), what="the model call")
        handle = temporal.get_workflow_handle(run.workflow_id)
        await handle.cancel()

        async def closed() -> bool:
            return (await handle.describe()).status is WorkflowExecutionStatus.CANCELED

        await eventually(closed, what="the workflow to end cancelled")
        cancelled = (await handle.describe()).run_id
        await reset_to_first_task(temporal, run.workflow_id)
        await eventually(lambda: calling(2), what="the reset execution's model call")
        try:
            result = await harness.client.result(
                run.workflow_id, scope=harness.scope, execution=cancelled
            )
        finally:
            await temporal.get_workflow_handle(run.workflow_id).terminate("test over")

    assert (result.run_id, result.status) == (run.run_id, RunStatus.ABORTED)
