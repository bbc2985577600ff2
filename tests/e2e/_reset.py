"""An operator's reset of a Run's workflow, as tests do it: to its first completed
workflow task, through Temporal's service (the SDK client has no reset call)."""

from __future__ import annotations

import uuid

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client


async def reset_to_first_task(
    temporal: Client, workflow_id: str, run_id: str | None = None
) -> None:
    """Reset the execution ``run_id`` (None: the latest) of ``workflow_id`` to the end of
    its first workflow task: Temporal terminates the latest execution (when open) and
    starts a new one from there."""
    history = await temporal.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    first_task = next(
        e.event_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    )
    await temporal.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=temporal.namespace,
            workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id or ""),
            reason="an operator's reset",
            workflow_task_finish_event_id=first_task,
            request_id=str(uuid.uuid4()),
        )
    )
