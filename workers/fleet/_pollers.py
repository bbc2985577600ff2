"""Which task queues a Run waits on that no worker polls: a Run of a fleet missing a role
waits silently otherwise (Temporal holds its tasks until a worker asks for them)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from temporalio.api.enums.v1 import PendingActivityState, TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.activities import ACTIVITY_ROLES, ROLES, role_task_queue
from psych_runtime.activities.contract import WORKFLOWS_ROLE
from psych_runtime.workers.fleet._policy import POLLER_LIVE_SECONDS
from psych_runtime.workflows import (
    TEMPORAL_READ_TIMEOUT,
    describe_within,
    read_mapped,
)


@dataclass(frozen=True)
class UnpolledQueue:
    """A task queue holding a task of the Run that no live worker polls.

    Attributes:
        task_queue: the queue's name.
        role: the worker role that polls it (None: a queue of no psych role).
        task_type: ``workflow`` or ``activity``.
    """

    task_queue: str
    role: str | None
    task_type: str

    def message(self) -> str:
        """One line for ``psych status``."""
        if self.role is None:
            return (
                f"waiting for a worker on queue {self.task_queue} "
                f"(none has polled it for {self.task_type} tasks in the last "
                f"{POLLER_LIVE_SECONDS:g} s)"
            )
        return (
            f"waiting for a worker of role {self.role} on queue {self.task_queue} "
            f"(none has polled it in the last {POLLER_LIVE_SECONDS:g} s; start one with "
            f"`psych worker --role {self.role} --task-queue {self._base()}`)"
        )

    def _base(self) -> str:
        suffix = f"-{self.role}"
        if self.role != WORKFLOWS_ROLE and self.task_queue.endswith(suffix):
            return self.task_queue.removesuffix(suffix)
        return self.task_queue


async def unpolled_queues(client: Client, workflow_id: str) -> list[UnpolledQueue]:
    """The queues on which the Run ``workflow_id`` has a task waiting and no worker polls
    them (none seen within ``POLLER_LIVE_SECONDS``: a worker killed less than that ago
    still counts as polling).

    Only tasks not yet started count: an activity a worker runs has its worker. A server
    without DescribeTaskQueue (the time-skipping test server) gives no answer, nor does a
    Run that does not exist: empty.

    Raises:
        TemporalUnanswered: Temporal did not answer the Run's describe, or a task queue's,
            within ``TEMPORAL_READ_TIMEOUT``.
    """
    try:
        handle = client.get_workflow_handle(workflow_id)
        description = await describe_within(handle, workflow_id, TEMPORAL_READ_TIMEOUT)
    except RPCError as err:
        # No such Run: the caller's own read of it says so in its words.
        if err.status is RPCStatusCode.NOT_FOUND:
            return []
        raise
    raw = description.raw_description
    base = raw.execution_config.task_queue.name
    wanted: dict[tuple[str, int], str | None] = {}
    if raw.HasField("pending_workflow_task"):
        wanted[(base, TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW)] = WORKFLOWS_ROLE
    for activity in raw.pending_activities:
        if activity.state != PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED:
            continue
        queue = activity.activity_options.task_queue.name
        if not queue:
            scheduled_for = ACTIVITY_ROLES.get(activity.activity_type.name, WORKFLOWS_ROLE)
            queue = role_task_queue(base, scheduled_for)
        wanted[(queue, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY)] = _role_of(queue, base)
    found: list[UnpolledQueue] = []
    for (queue, task_type), queue_role in sorted(wanted.items()):
        try:
            polled = await has_live_poller(client, queue, task_type)
        except RPCError as err:
            if err.status is RPCStatusCode.UNIMPLEMENTED:
                return []
            raise
        if not polled:
            kind = "workflow" if task_type == TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW else "activity"
            found.append(UnpolledQueue(task_queue=queue, role=queue_role, task_type=kind))
    return found


def _role_of(queue: str, base: str) -> str | None:
    for role in ROLES:
        if role_task_queue(base, role) == queue:
            return role
    return None


async def has_live_poller(client: Client, queue: str, task_type: int) -> bool:
    """Whether a worker polls ``queue`` for tasks of ``task_type`` now (seen within
    ``POLLER_LIVE_SECONDS``: a live one polls again within about a minute; a worker
    stopped more recently than that still counts).

    Raises:
        TemporalUnanswered: Temporal did not answer the queue's describe within
            ``TEMPORAL_READ_TIMEOUT`` (its ``why`` names the task queue).
        TemporalCancelled: it answered a timeout's status at once (a CANCELLED under
            load): it gave the describe up, which is not its silence.
        RPCError: Temporal refused.
    """
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
        task_queue_type=task_type,  # type: ignore[arg-type]  # an enum member's int value
    )
    asked_at = time.monotonic()
    try:
        response = await client.workflow_service.describe_task_queue(
            request, timeout=TEMPORAL_READ_TIMEOUT
        )
    except RPCError as err:
        subject = f"task queue {queue!r}"
        raise read_mapped(
            err, None, "a describe", TEMPORAL_READ_TIMEOUT, asked_at=asked_at, subject=subject
        ) from err
    now = datetime.now(UTC)
    live = timedelta(seconds=POLLER_LIVE_SECONDS)
    return any(now - p.last_access_time.ToDatetime(tzinfo=UTC) <= live for p in response.pollers)
