"""A task's status as it is now, for a webhook watcher that takes a task over (what
happened while nobody watched) or follows it on past an operator's reset.

A Run whose execution closed is read from what Temporal holds of it, no worker needed
(``PsychClient.closed``): a watcher taken over once its task ended, with no worker
polling, waited the query timeout for its state and failed, again at every look, and the
task's end never reached its webhooks. Otherwise (open, or a close event that does not
say what its state shows), its state, within the query timeout.
"""

from __future__ import annotations

from datetime import timedelta

from a2a.server.events.event_queue import Event
from a2a.types import TaskStatusUpdateEvent

from psych_runtime.specs import NotFound, Scope
from psych_runtime.workers.serve.a2a._tasks import answer_event, task_of
from psych_runtime.workflows import ClosedRun, PsychClient, RunState


async def task_now(
    client: PsychClient, workflow_id: str, scope: Scope, query_timeout: timedelta
) -> tuple[tuple[Event, ...], int] | None:
    """The task's status as it is now (after its answer, when it ended with one: a webhook
    that missed the end gets both, as a watcher that saw it pushes them) and the last
    record seq it stands for (a closed Run's: 0, it has ended: nothing is read after it);
    None: the Run is gone.

    Raises:
        RPCError: Temporal could not say, or no worker answered within ``query_timeout``.
    """
    try:
        state: RunState | ClosedRun | None = await client.closed(
            workflow_id, scope=scope, rpc_timeout=query_timeout
        )
        if state is None:
            state = await client.status(workflow_id, scope=scope, query_timeout=query_timeout)
    except NotFound:
        return None
    task = task_of(state)
    status = TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=task.status)
    after = state.last_seq if isinstance(state, RunState) else 0
    if state.status.terminal and state.answer:
        return (answer_event(task.id, state.answer, state.reason), status), after
    return (status,), after
