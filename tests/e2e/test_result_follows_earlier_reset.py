"""``PsychClient.result`` of a Run an operator resets from an EARLIER execution than the
latest (one before a continue-as-new) while it waits: Temporal terminates the latest
execution and records the new run in the reset's base execution's description only
(``workflow_extended_info.reset_run_id``), not in the terminated one's. Real dev server."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import RunFailed, Scope
from psych_runtime.workflows import PsychClient

from ._continuing_run import ContinuesWhenTold
from ._reset import reset_to_first_task
from ._waiting import eventually

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(90)
async def test_result_follows_a_reset_made_from_an_earlier_execution(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """E1 continues as new as E2; ``result()`` waits on E2; an operator resets from E1's
    first workflow task (E2 terminated, E3 started; the ``go`` signal reapplied, E3 goes
    on as E4): ``result()`` follows them and ends as the latest does, not with E2's
    termination (which it answered, as ``RunFailed("an operator's reset")``, when it read
    E2's own ``reset_run_id``: Temporal sets it on E1, the reset's base)."""
    scope = Scope(tenant=f"t{uuid.uuid4().hex[:10]}")
    workflow_id = f"psych-{scope.tenant}-{uuid.uuid4().hex}"
    queue = f"earlier-{uuid.uuid4().hex[:8]}"
    temporal = dev_env.client
    client = PsychClient(temporal, store=FileVersionStore(tmp_path / "versions"))
    async with Worker(
        temporal,
        task_queue=queue,
        workflows=[ContinuesWhenTold],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        first = await temporal.start_workflow(
            ContinuesWhenTold.run, 1, id=workflow_id, task_queue=queue
        )
        try:
            await asyncio.sleep(1)  # its first workflow task completed
            await first.signal(ContinuesWhenTold.told)
            e1 = temporal.get_workflow_handle(workflow_id, run_id=first.result_run_id)

            async def went_on() -> bool:
                return (await e1.describe()).status is WorkflowExecutionStatus.CONTINUED_AS_NEW

            await eventually(went_on, what="the first execution to continue as new")
            e2 = (await temporal.get_workflow_handle(workflow_id).describe()).run_id
            waiting = asyncio.create_task(client.result(workflow_id, scope=scope))
            await asyncio.sleep(2)  # it waits on E2's close event
            await reset_to_first_task(temporal, workflow_id, run_id=first.result_run_id)
            latest = temporal.get_workflow_handle(workflow_id)

            async def reset_made() -> bool:
                return (await latest.describe()).run_id not in (e2, first.result_run_id)

            await eventually(reset_made, what="the reset's execution to start")
            await asyncio.sleep(3)
            assert not waiting.done(), waiting.exception()
            await latest.terminate(reason="the operator's end")
            with pytest.raises(RunFailed, match="the operator's end"):
                async with asyncio.timeout(30):
                    await waiting
        finally:
            latest = temporal.get_workflow_handle(workflow_id)
            if (await latest.describe()).status is WorkflowExecutionStatus.RUNNING:
                await latest.terminate()
